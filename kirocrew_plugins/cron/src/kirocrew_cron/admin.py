"""``kirocrew-cron-admin``: the ``kirocrew cron`` commands that are not one of the eight tools.

While a host runs it is the cron store's one writer and the only place jobs run, so these
commands ask it, on a server of its own that the host serves on its socket and that no agent
config names (models never see them):

* ``cron_history`` — a job's runs, newest first, to whoever may see the job: the person any job,
  a session (a ``kirocrew`` command run from its shell) its own jobs; a one-shot its run removed
  answers too, to its owner only (:func:`kirocrew_cron.ops.job_history`).
* ``cron_import``, ``cron_adopt``, ``cron_preview`` — the person's only: the ``cli`` caller whose
  process descends from no session and not from the host. A session's command is refused
  ``person_only_command`` (import: ``caller_unverified``, as it always was); a caller that is
  nobody's, ``caller_unverified``.

Without a host (``KIROCREW_NO_HOST=1``) the command runs the same handlers in its own process
as the person (:func:`call_in_process`); adopt needs the host's conversations and answers
``host_required`` there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kirocrew_core.contributions import CoreMcpTool, HostedMcpServer
from kirocrew_core.coretools.contract import ToolCall

from kirocrew_cron.errors import cron_error
from kirocrew_cron.model import COMMAND_MAX, HISTORY_PER_JOB, JOB_ID_PATTERN, TIMEOUT_MAX_SECS

if TYPE_CHECKING:
    from kirocrew_cron.ops import JobHistory, JobHost
    from kirocrew_cron.tools import HostProvider

#: The runs ``kirocrew cron history`` shows unless told.
DEFAULT_HISTORY_LIMIT = 20

ADMIN_SERVER = "kirocrew-cron-admin"
ADMIN_COMMAND = "mcp-cron-admin"
INSTRUCTIONS = ("The kirocrew cron commands that are not kirocrew-cron tools (history, import, adopt, preview); "
                "not for models.")

_IMPORT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1, "maxLength": 4096,
                 "description": "Absolute path of the crons.json (version 2) to import."},
        "json": {"type": "boolean", "description": "Answer with the report as JSON."},
    },
    "required": ["path"],
    "additionalProperties": False,
}


_JOB_ID: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": 16, "pattern": JOB_ID_PATTERN,
                           "description": "A job id (kirocrew cron list shows them)."}
_HISTORY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"job_id": _JOB_ID,
                   "limit": {"type": "integer", "minimum": 1, "maximum": HISTORY_PER_JOB,
                             "description": "How many runs, newest first (default 20)."}},
    "required": ["job_id"],
    "additionalProperties": False,
}
_ADOPT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"job_id": _JOB_ID,
                   "session_of": {"type": "string", "minLength": 1, "maxLength": 128,
                                  "pattern": r"^[A-Za-z0-9_-]+$",
                                  "description": "The conversation whose session is to own the job."},
                   "release": {"type": "boolean", "description": "Give the job back to the person."},
                   "json": {"type": "boolean", "description": "Answer with the job as JSON."}},
    "required": ["job_id"],
    "additionalProperties": False,
}
_PREVIEW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"job_id": _JOB_ID,
                   "command": {"type": "string", "minLength": 1, "maxLength": COMMAND_MAX,
                               "pattern": r"^[^\x00-\x08\x0a-\x1f\x7f]*$",
                               "description": "A shell command to preview instead of a job's (vetted as a job's)."},
                   "authority": {"type": "string", "minLength": 1, "maxLength": 128,
                                 "description": "The authority the command runs under (default unrestricted)."},
                   "cwd": {"type": "string", "minLength": 1, "maxLength": 4096, "pattern": r"^/[^\x00]*$",
                           "description": "The absolute directory the command runs in (default: the home folder)."},
                   "timeout": {"type": "integer", "minimum": 0, "maximum": TIMEOUT_MAX_SECS,
                               "description": "The command's bound in seconds; 0: 300."},
                   "json": {"type": "boolean", "description": "Answer with the report as JSON."}},
    "additionalProperties": False,
}
PERSON_ONLY = ("kirocrew cron {what} is the person's: a session's kirocrew command cannot {verb} (run it from your "
               "own shell)")


def _person_only(call: ToolCall, what: str, verb: str) -> None:
    """Refuse anyone but the person's own ``kirocrew`` command: a session by name, anyone else as nobody."""
    if call.is_person_command:
        return
    if call.origin == "session":
        raise cron_error("person_only_command", PERSON_ONLY.format(what=what, verb=verb))
    raise cron_error("caller_unverified", f"only the person's kirocrew command may {verb}")


def history_document(found: JobHistory) -> dict[str, Any]:
    """A job's history as ``kirocrew cron history --json`` prints it."""
    import dataclasses

    return {"job_id": found.job_id, "name": found.name,
            "removed_at": None if found.removed is None else found.removed.removed_at,
            "runs": [{**dataclasses.asdict(r), "duration_ms": r.duration_ms} for r in found.runs]}


def _report(report: Any, path: Path, as_json: bool) -> str:
    return json.dumps(report.as_dict()) if as_json else str(report.text(path))


def _hosted() -> JobHost:
    from kirocrew_cron.service import cron_host

    host: JobHost = cron_host()
    return host


def admin_tools(host: HostProvider = _hosted) -> dict[str, CoreMcpTool]:
    """The admin server's tools over ``host`` (the host's CronHost; the CLI's own without a host)."""

    def cron_import(args: dict[str, Any], call: ToolCall) -> str:
        from kirocrew_cron.importer import import_crons_json
        from kirocrew_cron.tools import actor_of

        actor = actor_of(call)
        if actor is None or actor.owner is not None:
            raise cron_error("caller_unverified", "only the person's kirocrew command may import jobs "
                                                  "(kirocrew cron import)")
        path = Path(args["path"])
        if not path.is_absolute():
            raise cron_error("import_unreadable", f"the path to import must be absolute: {path}")
        h = host()
        report = import_crons_json(h.store, path)  # type: ignore[arg-type]  # the host's CronStore
        if report.imported:
            h.changed(None)
        return _report(report, path, bool(args.get("json")))

    def cron_history(args: dict[str, Any], call: ToolCall) -> str:
        from kirocrew_cron import ops
        from kirocrew_cron.tools import actor_of

        actor = actor_of(call)
        if actor is None:
            raise cron_error("caller_unverified", "this caller is neither a verified kirocrew session nor the "
                                                  "person's kirocrew command, so it reads no history")
        found = ops.job_history(host(), actor, args["job_id"], int(args.get("limit", DEFAULT_HISTORY_LIMIT)))
        return json.dumps(history_document(found), ensure_ascii=False)

    async def cron_adopt(args: dict[str, Any], call: ToolCall) -> str:
        import asyncio

        from kirocrew_cron import ops

        _person_only(call, "adopt", "give a job to a session or take it back")
        if ("session_of" in args) == bool(args.get("release")):
            raise cron_error("conflicting_arguments", "give the job to a conversation's session (--session-of) or "
                                                      "back to you (--release), one of the two")
        h = await asyncio.to_thread(host)
        cid = args.get("session_of")
        placement = None if cid is None else await _conversation_placement(cid)
        job = await asyncio.to_thread(ops.adopt_job, h, args["job_id"], cid, placement)
        if args.get("json"):
            return json.dumps(await asyncio.to_thread(ops.job_view, h, job), ensure_ascii=False, sort_keys=True)
        if cid is None:
            return f"Released job: {job.id} ({job.name}): it is yours again"
        return (f"Adopted job: {job.id} ({job.name}): now owned by {job.owner}, authority {job.authority}, "
                f"working in {job.workspace}")

    async def cron_preview(args: dict[str, Any], call: ToolCall) -> str:
        import asyncio

        from kirocrew_cron.preview import preview_job, preview_text, run_preview

        _person_only(call, "preview", "preview a job")
        h = await asyncio.to_thread(host)
        job = await asyncio.to_thread(preview_job, h, args)
        report = await run_preview(job)
        return json.dumps(report, ensure_ascii=False) if args.get("json") else preview_text(report)

    return {tool.name: tool for tool in (
        CoreMcpTool(name="cron_import",
                    description="Import the original's crons.json (version 2) into the cron store as the person's "
                                "jobs; the file is only read. Only the person's kirocrew command may call it.",
                    input_schema=_IMPORT_SCHEMA, handler=cron_import, identity="none"),
        CoreMcpTool(name="cron_history",
                    description="A job's runs, newest first, as JSON (kirocrew cron history): any job for the "
                                "person, a session's own jobs for a session; a one-shot its run removed answers "
                                "too, to its owner.",
                    input_schema=_HISTORY_SCHEMA, handler=cron_history, identity="lenient", read_only=True),
        CoreMcpTool(name="cron_adopt",
                    description="Give a job to a conversation's session (session_of) or back to the person "
                                "(release). Only the person's kirocrew command may call it.",
                    input_schema=_ADOPT_SCHEMA, handler=cron_adopt, identity="none"),
        CoreMcpTool(name="cron_preview",
                    description="Run a command job (or a command) once as a real run would and answer with its "
                                "result and the notification it would publish; nothing is stored. Only the "
                                "person's kirocrew command may call it.",
                    input_schema=_PREVIEW_SCHEMA, handler=cron_preview, identity="none"),
    )}


async def _conversation_placement(conversation_id: str) -> tuple[str, str]:
    """``(authority, cwd)`` of the host's conversation ``conversation_id`` now; ``conversation_not_found``."""
    import asyncio

    from kirocrew_core.errors import KirocrewError

    from kirocrew_conversations.public import ready_service

    service = await ready_service()
    try:
        return await asyncio.to_thread(service.session_placement, conversation_id)
    except KirocrewError as exc:
        if exc.code != "conversation_not_found":
            raise
        raise cron_error("conversation_not_found", f"no conversation {conversation_id!r} in this host") from None


def hosted_server() -> HostedMcpServer:
    from kirocrew_core.coretools.server import LazyToolServer

    return HostedMcpServer(ADMIN_SERVER, ADMIN_COMMAND, LazyToolServer(admin_tools, ADMIN_SERVER, INSTRUCTIONS),
                           "The kirocrew cron commands that are not tools (history, import, adopt, preview); "
                           "no agent config names it.")


async def call_in_process(tool: str, arguments: dict[str, Any], *, write: bool) -> tuple[str, str | None]:
    """``(text, code)`` of an admin tool called by the person in this process (no host runs): over the store,
    with the owner lock held when the tool writes (``write``), as the hosted server would answer."""
    import contextlib

    from kirocrew_core.coretools.server import CoreToolsServer
    from kirocrew_core.host.caller import CallerContext
    from kirocrew_core.host.protocol import SESSION_TYPE_CLI

    from kirocrew_cron import store as store_module
    from kirocrew_cron.offline import OfflineCronHost

    if tool == "cron_adopt":
        raise cron_error("host_required", "adopting a job needs the host, which holds the conversations (unset "
                                          "KIROCREW_NO_HOST, or start it with kirocrew serve)")
    caller = CallerContext(session_key="", session_type=SESSION_TYPE_CLI, relay_pid=0, host_pid=None, raw={})
    with contextlib.ExitStack() as held:
        if write:
            held.enter_context(store_module.owner_lock())
        opened = held.enter_context(store_module.CronStore.open())
        offline = OfflineCronHost(opened)
        server = CoreToolsServer(tool_source=lambda: admin_tools(lambda: offline), server_name=ADMIN_SERVER)
        return await server.call(tool, arguments, caller, as_person=True)


def import_in_process(path: Path, as_json: bool) -> str:
    """``kirocrew cron import`` without a host: the owner lock held, the store opened here."""
    from kirocrew_cron import store as store_module
    from kirocrew_cron.importer import import_crons_json

    with store_module.owner_lock(), store_module.CronStore.open() as store:
        report = import_crons_json(store, path)
    return _report(report, path, as_json)
