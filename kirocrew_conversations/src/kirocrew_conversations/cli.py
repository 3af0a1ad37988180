"""``kirocrew conversations …``: the 17 Conversations MCP tools as shell commands, and ``open``/``repair``.

Each command builds exactly one tool's arguments (options map 1:1, in kebab-case)
and sends them where :func:`~kirocrew_conversations.twin_backend.open_backend`
says: to a standalone server over its control socket, to the host, or — with
``KIROCREW_NO_HOST=1``, or when neither owns the state directory — to a service
opened in this process. In that local case a run lives only as long as the
command, so the commands that start one keep supervising it in the foreground
until it ends.

Registered lazily by :mod:`kirocrew_conversations.plugin`; the service (SQLite,
ACP, the mcp SDK) is imported only inside a command that runs.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from kirocrew_core.errors import BadInputError, KirocrewError

from kirocrew_conversations import limits
from kirocrew_conversations.errors import conversation_error
from kirocrew_conversations.vocabulary import (
    ARCHIVE_FILTERS,
    AUTHORITIES,
    CONVERSATION_STATES,
    ALWAYS_SCOPES,
    OWNER_DECISIONS,
    EFFORTS,
    RUN_STATUSES,
    TERMINAL_RUN_STATUSES,
)

# A run a command waited for and that ended like this makes the command exit 1.
UNSUCCESSFUL = frozenset(TERMINAL_RUN_STATUSES) - {"completed"}
# needs_attention without an open request (it is being answered): look again shortly, do not spin.
_ATTENTION_RECHECK_SECS = 0.2
_PROG = "kirocrew conversations"


@dataclass
class _Options:
    state_dir: Path | None = None
    as_json: bool = False


@dataclass(frozen=True)
class _Twin:
    """The backend a command talks to, and the wait ceiling the CLI's own waiting loops honour."""

    backend: Any
    wait_ceiling_secs: float

    @property
    def local(self) -> bool:
        return bool(self.backend.local)

    async def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return await self.backend.call(tool, arguments)


# -- running one command -------------------------------------------------------------------------
def _run(options: _Options, work: Callable[[_Twin], Awaitable[int]]) -> None:
    """Open the backend, run ``work(twin)``, exit with the code it returns."""
    import asyncio

    async def main() -> int:
        from kirocrew_conversations.service import ServiceConfig
        from kirocrew_conversations.twin_backend import open_backend

        config = ServiceConfig.from_env(state_dir=options.state_dir)
        async with open_backend(config) as backend:
            return await work(_Twin(backend, config.wait_ceiling_secs))

    code = asyncio.run(main())
    if code:
        click.get_current_context().exit(code)


def _emit(options: _Options, payload: dict[str, Any], render: Callable[[dict[str, Any]], str]) -> None:
    """One JSON document on one line with ``--json``, else the compact human rendering."""
    if options.as_json:
        click.echo(json.dumps(payload, ensure_ascii=False))
    else:
        click.echo(render(payload))


def _note(text: str) -> None:
    click.echo(f"kirocrew: {text}", err=True)


def _exit_code(runs: list[dict[str, Any]]) -> int:
    return 1 if any(run["status"] in UNSUCCESSFUL for run in runs) else 0


# -- waiting and supervising ---------------------------------------------------------------------
async def _wait(twin: _Twin, targets: list[dict[str, str]], mode: str) -> dict[str, Any]:
    """``kiro_wait`` again while a call returns ``waitExpired`` (the server bounds one call to
    about 50 s), until the spec's fixed ceiling has passed since the first call."""
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + twin.wait_ceiling_secs
    while True:
        waited = await twin.call("kiro_wait", {"targets": targets, "mode": mode})
        if not waited["waitExpired"] or loop.time() >= deadline:
            return waited


async def _supervise(twin: _Twin, conversation_id: str, run_id: str) -> dict[str, Any]:
    """Local mode: wait until the run is terminal, answering its permission requests meanwhile."""
    import asyncio

    target = [{"conversationId": conversation_id, "runId": run_id}]
    while True:
        run = (await twin.call("kiro_wait", {"targets": target, "mode": "any"}))["runs"][0]
        if run["status"] in TERMINAL_RUN_STATUSES:
            return run
        if run["status"] == "needs_attention":
            if run["attention"] is None or run["attention"]["kind"] == "question":
                # A question card is answered by a person (the page, `answer`), never on their behalf.
                await asyncio.sleep(_ATTENTION_RECHECK_SECS)
            else:
                await _answer_attention(twin, run)


async def _answer_attention(twin: _Twin, run: dict[str, Any]) -> None:
    """Ask on a terminal; anywhere else reject once (fail closed) and say so on stderr."""
    attention = run["attention"]
    what = attention["toolName"] or "a tool"
    decision = "reject_once"
    if sys.stdin is None or not sys.stdin.isatty():
        _note(f"run {run['runId']} asked to use {what}; stdin is not a terminal, so it was rejected once "
              "(fail closed)")
    elif "allow_once" not in attention["options"]:
        _note(f"run {run['runId']} asked to use {what} without offering allow_once; rejected once")
    else:
        _note(f"run {run['runId']}: {attention['title']}")
        decision = "allow_once" if await _confirm("allow once?") else "reject_once"
    try:
        await twin.call("kiro_permission_decide", {
            "conversationId": run["conversationId"], "runId": run["runId"],
            "permissionRequestId": attention["permissionRequestId"], "decision": decision,
        })
    except KirocrewError as exc:
        if exc.code != "permission_not_pending":  # withdrawn meanwhile: the next wait shows why
            raise


async def _confirm(question: str) -> bool:
    """``question [y/N]`` answered on the terminal without blocking the event loop.

    The run's worker lives on this loop and must keep being served while the user thinks; and
    unlike a prompt in a thread, Ctrl-C here cancels cleanly instead of waiting for Enter.
    """
    import asyncio

    click.echo(f"{question} [y/N]: ", nl=False, err=True)
    loop = asyncio.get_running_loop()
    line: asyncio.Future[str] = loop.create_future()
    fd = sys.stdin.fileno()

    def read_line() -> None:
        if not line.done():
            line.set_result(sys.stdin.readline())

    loop.add_reader(fd, read_line)
    try:
        answer = await line
    finally:
        loop.remove_reader(fd)
    return answer.strip().lower() in ("y", "yes")


def _local_note(run_id: str | None = None) -> None:
    which = f"run {run_id}" if run_id else "the run"
    _note(f"working in this process (KIROCREW_NO_HOST is set, or neither the host nor a standalone server owns "
          f"the state directory): supervising {which} here until it ends (it stops when this command does)")


# -- human rendering -----------------------------------------------------------------------------
def _or_dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _settings_line(settings: dict[str, Any]) -> str:
    ws = settings["workspace"]
    where = f"{ws['mode']} {ws['label']}" + (f" on {ws['branch']}" if ws["branch"] else "")
    return (f"model {_or_dash(settings['model'])} · effort {_or_dash(settings['effort'])} · "
            f"mode {_or_dash(settings['mode'])} · authority {settings['authority']} · workspace {where}")


def _render_run(run: dict[str, Any]) -> str:
    lines = [f"run {run['runId']} in conversation {run['conversationId']}: {run['status']}",
             f"  {_settings_line(run['settings'])}", *_warning_lines(run)]
    if run["error"]:
        lines.append(f"  error[{run['error']['code']}]: {run['error']['message']}")
    attention = run["attention"]
    if attention and attention["kind"] == "question":
        card = attention["question"]
        lines.append(f"  {attention['title']} (question card {card['askId']}):")
        for question in card["questions"]:
            badge = f"[{question['header']}] " if question["header"] else ""
            choices = " | ".join(option["label"] for option in question["options"])
            lines.append(f"    {badge}{question['question']}  ({choices})")
        lines.append(f"  answer with: {_PROG} answer {run['conversationId']} --ask {card['askId']} "
                     "--answer 'QUESTION=ANSWER' (or --dismiss)")
    elif attention:
        lines.append(f"  {attention['title']} (permission {attention['permissionRequestId']})")
        if attention.get("subject"):
            lines.append(f"    {attention['subject']}")
        if attention.get("rule"):
            rule = attention["rule"]
            lines.append(f"    policy rule {rule['id']} ({rule['description']}): {attention.get('reason') or ''}")
        lines.append("  answer with:")
        lines.append(f"    {_PROG} decide {run['conversationId']} {run['runId']} "
                     f"{attention['permissionRequestId']} {'|'.join(attention['options'])}")
    reply = run["reply"]
    if reply is not None:
        more = f" (truncated; {reply['originalBytes']} bytes in all)" if reply["truncated"] else ""
        lines.append(f"reply{more}:")
        lines.append(reply["text"])
    lines.extend(_render_session(run.get("session")))
    return "\n".join(lines)


def _warning_lines(out: dict[str, Any]) -> list[str]:
    return [f"  warning[{w['code']}]: {w['message']}" for w in out.get("warnings") or ()]


def _render_session(session: dict[str, Any] | None) -> list[str]:
    """What the conversation's session directives left (kiro_result's ``session``), after the reply."""
    if not session:
        return []
    lines = []
    monitor = session["monitor"]
    if monitor:
        state = "active" if monitor["active"] else f"stopped ({monitor['stoppedReason']})"
        lines.append(f"monitor loop {monitor['monitorId']}: {state}, cycle {monitor['cycles']} of "
                     f"{monitor['maxCycles']}, every {monitor['intervalSecs']} s idle")
    if session["project"]:
        lines.append(f"project: {session['project']} (bound by the session; used from its next run)")
    card = session["followUps"]
    if card:
        lines.append("suggested follow-ups (send one with `kirocrew conversations send`):")
        for number, item in enumerate(card["items"], 1):
            branch = f" [branch {item['branch']}]" if item["branch"] else ""
            lines.append(f"  {number}. {item['title']}{branch}: {item['description']}")
            lines.append(f"     prompt: {item['prompt']}")
    return lines


def _render_spawned(out: dict[str, Any]) -> str:
    created = "new conversation" if out["createdConversation"] else "conversation"
    lines = [f"run {out['runId']} in {created} {out['conversationId']}: {out['status']}"
             + (f" ({out['queuePosition']} ahead)" if out["queuePosition"] else ""),
             f"  {_settings_line(out['settings'])}", *_warning_lines(out)]
    if out.get("delivery") == "interrupt":
        lines.append(f"  interrupted run {_or_dash(out['interruptedRunId'])}; "
                     f"{out['supersededRunCount']} queued follow-up(s) superseded")
    return "\n".join(lines)


def _render_wait(out: dict[str, Any]) -> str:
    runs = out["runs"]
    done = sum(run["status"] in TERMINAL_RUN_STATUSES for run in runs)
    head = f"wait {out['mode']}: {done} of {len(runs)} run(s) finished"
    if out["waitExpired"]:
        head += "; the wait ceiling passed (nothing was cancelled: wait again)"
    return "\n\n".join([head, *(_render_run(run) for run in runs)])


def _render_delegated(out: dict[str, Any]) -> str:
    text = _render_run(out["run"])
    if out["waitExpired"]:
        text += "\nthe wait ceiling passed; the run keeps going (wait again with: " \
                f"{_PROG} wait {out['run']['conversationId']}:{out['run']['runId']})"
    return text


def _render_status(out: dict[str, Any]) -> str:
    lines = []
    for c in out["conversations"]:
        latest = c["latestRun"]
        run = f"latest {latest['runId']} {latest['status']}" if latest else "no runs"
        extra = (f"  follow-ups {c['followUps']}" if c.get("followUps") else "") + (
            "  monitor on" if c.get("monitorActive") else "")
        lines.append(f"{c['conversationId']}  {c['name']}  {c['state']}  {run}  queued {c['queuedRuns']}{extra}")
    if not lines:
        lines.append("no conversations match")
    lines.append("counts: " + ", ".join(f"{state} {n}" for state, n in out["counts"].items()))
    if out["nextCursor"]:
        lines.append(f"more: --cursor {out['nextCursor']}")
    return "\n".join(lines)


def _render_events(out: dict[str, Any]) -> str:
    lines = []
    for e in out["events"]:
        line = f"#{e['seq']} {e['at']} {e['kind']}: {e.get('summary', '')}"
        if "toolName" in e:
            line += f" [{e['toolName']}" + (f" {e['toolStatus']}" if "toolStatus" in e else "") + "]"
        if e.get("locations"):
            line += " " + ", ".join(e["locations"])
        if "permissionRequestId" in e:
            line += f" (permission {e['permissionRequestId']}"
            line += f": {'|'.join(e['options'])})" if e.get("options") else ")"
        lines.append(line)
    if not lines:
        lines.append(f"no events for run {out['runId']}")
    if out["nextCursor"]:
        lines.append(f"more: --cursor {out['nextCursor']}")
    return "\n".join(lines)


def _render_capabilities(out: dict[str, Any]) -> str:
    models = ", ".join(m["id"] + (" (default)" if m["id"] == out["defaultModel"] else "") for m in out["models"])
    default_mode = out["defaults"]["mode"]
    modes = ", ".join(m + (" (default)" if m == default_mode else " (kiro-cli's default)" if m == out["defaultMode"]
                           else "") for m in out["modes"])
    authorities = "; ".join(a["name"] + (" available" if a["available"] else f" unavailable ({a['reason']})")
                            for a in out["authorities"])
    lim = out["limits"]
    yes = {True: "yes", False: "no"}
    return "\n".join([
        f"kiro-cli {_or_dash(out['kiroCli']['version'])}" + (" (cached)" if out["cached"] else ""),
        f"models: {models or '-'}",
        f"modes: {modes or '-'}",
        f"efforts: {', '.join(out['efforts'])}",
        f"images: {yes[out['prompt']['images']]} · session fork: {yes[out['acp']['sessionFork']]} · "
        f"load session: {yes[out['acp']['loadSession']]}",
        f"authorities: {authorities}",
        f"defaults: agent {default_mode} · authority {out['defaults']['authority']} · "
        f"workspace {out['defaults']['workspaceMode']} · {out['defaults']['maxWorkers']} worker(s)",
        f"limits: {lim['waitMaxTargets']} wait targets · {lim['maxImages']} images · run deadline "
        f"{lim['runDeadlineSeconds']} s · wait ceiling {lim['waitCeilingSeconds']} s",
    ])


def _render_inspect(out: dict[str, Any]) -> str:
    stats = out["diffStats"]
    base = out["baseRef"] + (f" at {out['baseCommit'][:12]}" if out.get("baseCommit") else "")
    lines = [f"branch {out['branch']} (base {base}): {out['mergeState']}, "
             f"{'clean' if out['clean'] else 'uncommitted changes'}, {out['activeRuns']} active run(s)",
             f"diff: {stats['files']} file(s), +{stats['insertions']} -{stats['deletions']}"]
    lines += [f"  {f['status']} {f['path']}" for f in out["changedFiles"]]
    if out["changedFilesTruncated"]:
        lines.append("  … (more files)")
    return "\n".join(lines)


# -- argument builders ---------------------------------------------------------------------------
def _read_message(message: str) -> str:
    return sys.stdin.read().rstrip("\n") if message == "-" else message


def _image(path: Path) -> dict[str, Any]:
    """One image argument: absolute path, MIME type from the extension, declared size from stat."""
    import mimetypes

    absolute = os.path.abspath(os.path.expanduser(path))
    name = Path(absolute).name
    try:
        info = os.stat(absolute)
    except OSError as exc:
        raise conversation_error("invalid_image", f"{name}: not a readable file ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise conversation_error("invalid_image", f"{name}: not a regular file")
    mime, _ = mimetypes.guess_type(absolute, strict=False)
    if mime is None or not mime.startswith("image/"):
        raise conversation_error("invalid_image", f"{name}: its extension does not name an image type "
                                                  f"({mime or 'unknown'})")
    if not 0 < info.st_size <= limits.IMAGE_MAX_BYTES:
        raise conversation_error("invalid_image", f"{name}: an image must be 1 byte to "
                                                  f"{limits.IMAGE_MAX_BYTES // (1024 * 1024)} MiB")
    return {"path": absolute, "mimeType": mime, "sizeBytes": info.st_size}


def _overrides(model: str | None, effort: str | None, mode: str | None, authority: str | None,
               images: tuple[Path, ...] = ()) -> dict[str, Any]:
    args: dict[str, Any] = {key: value for key, value in
                            {"model": model, "effort": effort, "mode": mode, "authority": authority}.items()
                            if value is not None}
    if images:
        args["images"] = [_image(path) for path in images]
    return args


def _spawn_arguments(name: str | None, workspace: Path | None, worktree: bool, base_ref: str | None,
                     conversation: str | None, message: str, slash_commands: tuple[str, ...] = (),
                     **overrides: Any) -> dict[str, Any]:
    if conversation is not None:
        given = [flag for flag, value in (("--name", name), ("--workspace", workspace), ("--worktree", worktree),
                                          ("--base-ref", base_ref), ("--allow-slash-command", slash_commands))
                 if value]
        if given:
            raise BadInputError(f"{', '.join(given)} only apply to a new conversation, not with --conversation")
        args: dict[str, Any] = {"conversation": conversation}
    else:
        if name is None:
            raise BadInputError("a new conversation needs --name (or continue one with --conversation ID)")
        if base_ref is not None and not worktree:
            raise BadInputError("--base-ref needs --worktree")
        args = {"conversation": "new", "name": name,
                "workspace": os.path.abspath(os.path.expanduser(workspace if workspace is not None else "."))}
        if worktree:
            args["workspaceMode"] = "worktree"
        if base_ref is not None:
            args["baseRef"] = base_ref
        if slash_commands:
            args["allowedSlashCommands"] = list(slash_commands)
    return {**args, "message": _read_message(message), **_overrides(**overrides)}


def _target(text: str) -> dict[str, str]:
    conversation_id, sep, run_id = text.partition(":")
    if not sep or not conversation_id or not run_id or ":" in run_id:
        raise BadInputError(f"wait target {text!r} is not CONVERSATION_ID:RUN_ID (as printed by spawn)")
    return {"conversationId": conversation_id, "runId": run_id}


# -- options -------------------------------------------------------------------------------------
def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.ensure_object(_Options).as_json = True


_json_option = click.option("--json", "as_json", is_flag=True, expose_value=False, callback=_set_json,
                            help="Print the tool's structured output as JSON (one document per line).")


def _run_overrides(command: Callable[..., Any]) -> Callable[..., Any]:
    for decorator in reversed([
        click.option("--model", help="Model id from `capabilities` (this run only)."),
        click.option("--effort", type=click.Choice(EFFORTS), help="Reasoning effort (this run only)."),
        click.option("--mode", help="Kiro agent / ACP session mode (this run only)."),
        click.option("--authority", type=click.Choice(AUTHORITIES),
                     help="Execution authority (this run only; default the conversation's, unrestricted)."),
        click.option("--image", "images", multiple=True, type=click.Path(path_type=Path),
                     help=f"Attach an image (repeatable, up to {limits.MAX_IMAGES}); its type comes from the "
                          "extension. Only when `capabilities` reports images."),
    ]):
        command = decorator(command)
    return command


def _spawn_options(command: Callable[..., Any]) -> Callable[..., Any]:
    command = _run_overrides(command)  # listed after the options naming the conversation
    for decorator in reversed([
        click.argument("message"),
        click.option("--name", help="Unique lowercase name of the new conversation (a-z, 0-9, ., _, -)."),
        click.option("--workspace", type=click.Path(file_okay=False, path_type=Path),
                     help="Project directory of the new conversation (default: the current directory)."),
        click.option("--worktree", is_flag=True,
                     help="Work in a new git worktree and kiro/… branch (needs a clean repository root)."),
        click.option("--base-ref", help="Git ref the worktree branch starts from (default HEAD)."),
        click.option("--allow-slash-command", "slash_commands", multiple=True, metavar="/NAME",
                     help="A slash command the new conversation's messages may run (repeatable; one "
                          "`capabilities` lists). Messages starting with / are refused otherwise."),
        click.option("--conversation", "conversation", metavar="ID",
                     help="Continue this existing conversation instead of creating one (queued FIFO)."),
    ]):
        command = decorator(command)
    return command


_MESSAGE_HELP = "MESSAGE `-` reads the message from stdin."
_NEW_CONVERSATION_HELP = ("A new conversation needs --name and works in the current directory unless --workspace "
                          "says otherwise; --conversation ID continues an existing one instead.")
_LOCAL_RUN_HELP = (
    "In process: when neither the host nor a standalone server owns the state directory (or with "
    "KIROCREW_NO_HOST=1), the run stops when this command exits, so the command supervises it in the "
    "foreground until it ends"
)
_LOCAL_RUN_TAIL = (
    ". A permission request is then asked on the terminal, or rejected once when stdin is not one. "
    "Exits 1 when the run failed, was cancelled, timed out or was interrupted."
)
_LOCAL_RUN_TWO_DOCUMENTS = (
    f"\n\n{_LOCAL_RUN_HELP} and then prints the final run as well (with --json, as a second line)"
    f"{_LOCAL_RUN_TAIL}"
)


# -- the commands --------------------------------------------------------------------------------
@click.group("conversations")
@click.option("--state-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="State directory (default KIRO_CONVERSATIONS_STATE_DIR, else "
                   "~/.local/state/kiro-conversations-mcp).")
@click.option("--json", "as_json", is_flag=True,
              help="Print each tool's structured output as JSON (one document per line).")
@click.pass_context
def conversations(ctx: click.Context, state_dir: Path | None, as_json: bool) -> None:
    """Spawn, wait on and manage durable Kiro conversations from the shell.

    Every command but `open` and `repair` is one Conversations MCP tool (see docs/conversations/tools.md).
    It talks to the server that owns the state directory: a `kirocrew mcp-conversations --standalone`
    server, else the kirocrew host (started in the background if none runs), and runs that
    server supervises keep going after the command returns. With KIROCREW_NO_HOST=1, or when
    neither owns the directory, the command opens it itself. IDs are opaque: pass back what
    was printed.
    """
    options = ctx.ensure_object(_Options)
    options.state_dir = Path(os.path.abspath(state_dir.expanduser())) if state_dir is not None else None
    options.as_json = options.as_json or as_json


@conversations.command("spawn", help="Start a run and print its conversation and run IDs at once.\n\n"
                       f"{_NEW_CONVERSATION_HELP} {_MESSAGE_HELP}{_LOCAL_RUN_TWO_DOCUMENTS}")
@_spawn_options
@_json_option
@click.pass_obj
def spawn(options: _Options, **kwargs: Any) -> None:
    args = _spawn_arguments(**kwargs)

    _start_run(options, "kiro_spawn", args)


@conversations.command("delegate", help="Start a run and wait for it: the one-task flow.\n\n"
                       "It returns when the run ends or needs attention, or once the fixed 30-minute wait "
                       f"ceiling has passed (the run keeps going). {_NEW_CONVERSATION_HELP} {_MESSAGE_HELP}\n\n"
                       f"{_LOCAL_RUN_HELP}, whatever the ceiling{_LOCAL_RUN_TAIL}")
@_spawn_options
@_json_option
@click.pass_obj
def delegate(options: _Options, **kwargs: Any) -> None:
    args = _spawn_arguments(**kwargs)

    async def work(twin: _Twin) -> int:
        if twin.local:
            _local_note()
        out = await twin.call("kiro_delegate", args)
        run = out["run"]
        if twin.local and run["status"] not in TERMINAL_RUN_STATUSES:
            out = {**out, "waitExpired": False, "run": await _supervise(twin, run["conversationId"],
                                                                        run["runId"])}
        elif out["waitExpired"] and run["status"] not in TERMINAL_RUN_STATUSES:
            waited = await _wait(twin, [{"conversationId": run["conversationId"], "runId": run["runId"]}],
                                 "any")
            out = {**out, "waitExpired": waited["waitExpired"], "run": waited["runs"][0]}
        _emit(options, out, _render_delegated)
        return _exit_code([out["run"]])

    _run(options, work)


@conversations.command("wait")
@click.option("--any/--all", "any_", default=True,
              help="Return when one target finishes (default) or when all have; both wake on attention.")
@click.argument("targets", nargs=-1, required=True, metavar="CONVERSATION_ID:RUN_ID...")
@_json_option
@click.pass_obj
def wait(options: _Options, any_: bool, targets: tuple[str, ...]) -> None:
    """Wait for 1 to 8 runs, given as CONVERSATION_ID:RUN_ID, up to the fixed 30-minute ceiling.

    Waiting never cancels a run. Exits 1 when a run it reports failed, was cancelled, timed out
    or was interrupted.
    """
    refs = [_target(text) for text in targets]
    mode = "any" if any_ else "all"

    async def work(twin: _Twin) -> int:
        out = await _wait(twin, refs, mode)
        _emit(options, out, _render_wait)
        return _exit_code(out["runs"])

    _run(options, work)


@conversations.command("send", help="Send a follow-up to a conversation and print the new run's ID at once.\n\n"
                       "The message is queued after the conversation's work, or with --interrupt replaces the "
                       "active run (a cancellation and a new turn, not steering). "
                       f"{_MESSAGE_HELP}{_LOCAL_RUN_TWO_DOCUMENTS}")
@click.argument("conversation_id")
@click.argument("message")
@click.option("--interrupt", is_flag=True, help="Cancel the active run and queued follow-ups, then run this.")
@_run_overrides
@_json_option
@click.pass_obj
def send(options: _Options, conversation_id: str, message: str, interrupt: bool, **overrides: Any) -> None:
    args = {"conversationId": conversation_id, "message": _read_message(message),
            "delivery": "interrupt" if interrupt else "queue", **_overrides(**overrides)}

    _start_run(options, "kiro_send", args)


def _start_run(options: _Options, tool: str, args: dict[str, Any]) -> None:
    """``kiro_spawn``/``kiro_send``: print the new run; with no server, supervise it here until it ends."""
    async def work(twin: _Twin) -> int:
        out = await twin.call(tool, args)
        _emit(options, out, _render_spawned)
        if not twin.local:
            return 0
        _local_note(out["runId"])
        await _supervise(twin, out["conversationId"], out["runId"])
        # The final run as kiro_result has it (with what the session's directives left).
        run = await twin.call("kiro_result", {"conversationId": out["conversationId"], "runId": out["runId"]})
        _emit(options, run, _render_run)
        return _exit_code([run])

    _run(options, work)


def _simple(tool: str, args: dict[str, Any], options: _Options,
            render: Callable[[dict[str, Any]], str]) -> None:
    async def work(twin: _Twin) -> int:
        _emit(options, await twin.call(tool, args), render)
        return 0

    _run(options, work)


@conversations.command("result")
@click.argument("conversation_id")
@click.argument("run_id")
@_json_option
@click.pass_obj
def result(options: _Options, conversation_id: str, run_id: str) -> None:
    """Show one run's current or final state and reply now, without waiting (reads never consume it)."""
    _simple("kiro_result", {"conversationId": conversation_id, "runId": run_id}, options, _render_run)


@conversations.command("status")
@click.option("--state", "states", multiple=True, type=click.Choice(CONVERSATION_STATES),
              help="Only conversations in this state (repeatable).")
@click.option("--run-status", "run_statuses", multiple=True, type=click.Choice(RUN_STATUSES),
              help="Only conversations whose latest run has this status (repeatable).")
@click.option("--workspace-fingerprint", help="Only conversations on this workspace (its fingerprint).")
@click.option("--model", help="Only conversations with this default model.")
@click.option("--authority", type=click.Choice(AUTHORITIES), help="Only conversations with this authority.")
@click.option("--archive", type=click.Choice(ARCHIVE_FILTERS), default=None,
              help="Active conversations (default), archived ones, or all.")
@click.option("--cursor", help="The cursor printed by the previous page.")
@click.option("--limit", type=click.IntRange(1, limits.PAGE_SIZE_MAX), default=None,
              help=f"Page size (default {limits.PAGE_SIZE_DEFAULT}).")
@_json_option
@click.pass_obj
def status(options: _Options, states: tuple[str, ...], run_statuses: tuple[str, ...],
           workspace_fingerprint: str | None, model: str | None, authority: str | None, archive: str | None,
           cursor: str | None, limit: int | None) -> None:
    """List conversations with their latest run, and counts per state (one page at a time)."""
    args: dict[str, Any] = {key: value for key, value in {
        "state": list(states) or None, "runStatus": list(run_statuses) or None,
        "workspaceFingerprint": workspace_fingerprint, "model": model, "authority": authority,
        "archive": archive, "cursor": cursor, "limit": limit,
    }.items() if value is not None}
    _simple("kiro_status", args, options, _render_status)


@conversations.command("events")
@click.argument("conversation_id")
@click.argument("run_id")
@click.option("--cursor", help="The cursor printed by the previous page.")
@click.option("--limit", type=click.IntRange(1, limits.PAGE_SIZE_MAX), default=None,
              help=f"Page size (default {limits.PAGE_SIZE_DEFAULT}).")
@_json_option
@click.pass_obj
def events(options: _Options, conversation_id: str, run_id: str, cursor: str | None, limit: int | None) -> None:
    """Show one run's redacted activity: phases, tools, permissions, usage."""
    args: dict[str, Any] = {"conversationId": conversation_id, "runId": run_id}
    if cursor is not None:
        args["cursor"] = cursor
    if limit is not None:
        args["limit"] = limit
    _simple("kiro_events", args, options, _render_events)


@conversations.command("decide")
@click.argument("conversation_id")
@click.argument("run_id")
@click.argument("permission_id")
@click.argument("decision", type=click.Choice(OWNER_DECISIONS))
@click.option("--scope", type=click.Choice(ALWAYS_SCOPES), default=None,
              help="For allow_always: where the new policy rules apply (default: the conversation's workspace).")
@_json_option
@click.pass_obj
def decide(options: _Options, conversation_id: str, run_id: str, permission_id: str, decision: str,
           scope: str | None) -> None:
    """Answer a run's open permission request: allow_once, reject_once, or allow_always (adds policy rules)."""
    args = {"conversationId": conversation_id, "runId": run_id, "permissionRequestId": permission_id,
            "decision": decision}
    if scope is not None:
        args["scope"] = scope
    _simple("kiro_permission_decide", args, options,
            lambda out: f"run {out['runId']}: {out['decision']} → {out['status']}" + (
                f" (added policy rules {', '.join(out['rulesAdded'])})" if out.get("rulesAdded") else ""))


@conversations.command("answer")
@click.argument("conversation_id")
@click.option("--ask", "ask_id", metavar="ASK_ID",
              help="The question card's id (optional when the conversation has exactly one open card).")
@click.option("--answer", "answers", multiple=True, metavar="QUESTION=ANSWER",
              help="An answer: the question's exact text, '=', the answer (split at the first '='). Repeat it "
                   "for each question.")
@click.option("--dismiss", is_flag=True, help="Close the card without answering.")
@_json_option
@click.pass_obj
def answer(options: _Options, conversation_id: str, ask_id: str | None, answers: tuple[str, ...],
           dismiss: bool) -> None:
    """Answer (or dismiss) the question card a run of the conversation is blocked on."""
    if dismiss == bool(answers):
        raise BadInputError("give --answer QUESTION=ANSWER (once per question) or --dismiss, not both",
                            code="invalid_arguments")
    args: dict[str, Any] = {"conversationId": conversation_id}
    if ask_id:
        args["askId"] = ask_id
    if dismiss:
        args["dismissed"] = True
    else:
        pairs = []
        for item in answers:
            question, sep, text = item.partition("=")
            if not sep or not question.strip() or not text.strip():
                raise BadInputError("--answer takes QUESTION=ANSWER, both non-empty", code="invalid_arguments")
            pairs.append({"question": question.strip(), "answer": text.strip()})
        args["answers"] = pairs
    _simple("kiro_question_answer", args, options,
            lambda out: f"question card {out['askId']} of conversation {out['conversationId']}: {out['status']}")


@conversations.command("configure")
@click.argument("conversation_id")
@click.option("--model", help="Default model id for future runs.")
@click.option("--effort", type=click.Choice(EFFORTS), help="Default reasoning effort.")
@click.option("--mode", help="Default Kiro agent / ACP session mode.")
@click.option("--authority", type=click.Choice(AUTHORITIES), help="Default execution authority.")
@click.option("--allow-slash-command", "slash_commands", multiple=True, metavar="/NAME",
              help="A slash command its messages may run (repeatable; replaces the list; one `capabilities` "
                   "lists). Messages starting with / are refused otherwise.")
@click.option("--no-slash-commands", is_flag=True, help="Allow no slash command again (the default).")
@_json_option
@click.pass_obj
def configure(options: _Options, conversation_id: str, slash_commands: tuple[str, ...], no_slash_commands: bool,
              **overrides: Any) -> None:
    """Change an idle conversation's defaults for its future runs."""
    settings = _overrides(**overrides)
    if slash_commands and no_slash_commands:
        raise BadInputError("give --allow-slash-command or --no-slash-commands, not both")
    if slash_commands or no_slash_commands:
        settings["allowedSlashCommands"] = list(slash_commands)
    if not settings:
        raise BadInputError("give at least one of --model, --effort, --mode, --authority, --allow-slash-command, "
                            "--no-slash-commands")
    _simple("kiro_configure", {"conversationId": conversation_id, **settings}, options,
            lambda out: f"conversation {out['conversationId']} defaults: {_settings_line(out['defaults'])}")


@conversations.command("cancel")
@click.argument("conversation_id")
@click.argument("run_id")
@_json_option
@click.pass_obj
def cancel(options: _Options, conversation_id: str, run_id: str) -> None:
    """Cancel one run; returns once its Kiro process has been shut down."""
    _simple("kiro_cancel", {"conversationId": conversation_id, "runId": run_id}, options,
            lambda out: f"run {out['runId']}: {out['status']}" + ("" if out["changed"] else " (already ended)"))


@conversations.command("archive")
@click.argument("conversation_id")
@_json_option
@click.pass_obj
def archive(options: _Options, conversation_id: str) -> None:
    """Hide an idle conversation from `status`, keeping its history."""
    _simple("kiro_archive", {"conversationId": conversation_id}, options,
            lambda out: f"conversation {out['conversationId']}: {out['state']}")


@conversations.command("delete")
@click.argument("conversation_id")
@click.option("--confirm-name", required=True, metavar="NAME", help="The conversation's exact name.")
@_json_option
@click.pass_obj
def delete(options: _Options, conversation_id: str, confirm_name: str) -> None:
    """Permanently remove an archived conversation's local state (not its workspace or branch)."""
    _simple("kiro_delete", {"conversationId": conversation_id, "confirmName": confirm_name}, options,
            lambda out: f"conversation {out['conversationId']}: deleted")


@conversations.command("capabilities")
@click.option("--refresh", is_flag=True, help="Ask kiro-cli again instead of using the cached answer.")
@_json_option
@click.pass_obj
def capabilities(options: _Options, refresh: bool) -> None:
    """Show kiro-cli's version, models, modes, authorities, defaults and limits."""
    _simple("kiro_capabilities", {"refresh": True} if refresh else {}, options, _render_capabilities)


@conversations.command("fork")
@click.argument("conversation_id")
@click.argument("name")
@_json_option
@click.pass_obj
def fork(options: _Options, conversation_id: str, name: str) -> None:
    """Fork an idle conversation into a new one named NAME (when kiro-cli supports forking)."""
    _simple("kiro_fork", {"conversationId": conversation_id, "name": name}, options,
            lambda out: f"conversation {out['conversationId']} ({out['name']}) forked from {out['forkedFrom']}")


@conversations.group("worktree")
def worktree() -> None:
    """Review and clean up a worktree conversation's branch (never merges or pushes)."""


@worktree.command("inspect")
@click.argument("conversation_id")
@_json_option
@click.pass_obj
def worktree_inspect(options: _Options, conversation_id: str) -> None:
    """Show the worktree's branch, base, merge state, changed files and diff statistics."""
    _simple("kiro_worktree_inspect", {"conversationId": conversation_id}, options, _render_inspect)


@worktree.command("cleanup")
@click.argument("conversation_id")
@_json_option
@click.pass_obj
def worktree_cleanup(options: _Options, conversation_id: str) -> None:
    """Remove a clean, idle, integrated worktree and its branch; the conversation is retired."""
    _simple("kiro_worktree_cleanup", {"conversationId": conversation_id}, options,
            lambda out: f"removed branch {out['removedBranch']}; conversation {out['conversationId']} "
                        f"is {out['state']}")


@conversations.command("open")
@click.argument("conversation_id")
@click.option("--exec", "run_now", is_flag=True,
              help="Run the command now: this process becomes kiro-cli, in the conversation's directory.")
@_json_option
@click.pass_obj
def open_(options: _Options, conversation_id: str, run_now: bool) -> None:
    """Release the conversation's worker; print the `kiro-cli chat --resume-id` command that carries it on.

    The command changes to the conversation's working directory first. A new message to the
    conversation starts a worker again, which cannot load the session while your kiro-cli holds it.
    """
    from kirocrew_conversations.session_cli import session_action

    out = session_action(options, "hand_over", conversation_id)
    if run_now:
        try:
            os.chdir(out["cwd"])
            os.execvp(out["argv"][0], out["argv"])
        except OSError as exc:
            raise click.ClickException(f"cannot run kiro-cli in the conversation's directory: {exc.strerror}") \
                from None
    _emit(options, out, lambda o: o["command"])


@conversations.command("repair")
@click.argument("conversation_id")
@_json_option
@click.pass_obj
def repair(options: _Options, conversation_id: str) -> None:
    """Mend a Kiro session its images broke: downscale them, keep the newest 80, keep each original as .bak.

    The conversation's worker is released first; a session another kiro-cli holds is refused.
    """
    from kirocrew_conversations.session_cli import render_repair, session_action

    _emit(options, session_action(options, "repair_session", conversation_id), render_repair)
