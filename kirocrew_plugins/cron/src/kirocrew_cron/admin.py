"""``kirocrew-cron-admin``: what only the person's CLI asks of the host's cron store (``cron_import``).

While a host runs it is the cron store's one writer, so ``kirocrew cron import`` cannot write
the store itself: it asks the host. The import is not one of the eight kirocrew-cron tools
(a session has no business importing the person's old jobs, and models should not see it),
so it lives on a server of its own that the host serves on its socket and that no agent
config names. Only the person's ``cli`` caller (a process that descends from no session and
not from the host) may call it; anyone else is refused ``caller_unverified``. Without a host
the command imports in process under the owner lock (:func:`import_in_process`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kirocrew_core.contributions import CoreMcpTool, HostedMcpServer
from kirocrew_core.coretools.contract import ToolCall

from kirocrew_cron.errors import cron_error

ADMIN_SERVER = "kirocrew-cron-admin"
ADMIN_COMMAND = "mcp-cron-admin"
INSTRUCTIONS = "The person's kirocrew-cron administration (kirocrew cron import); not for sessions."

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


def _report(report: Any, path: Path, as_json: bool) -> str:
    return json.dumps(report.as_dict()) if as_json else str(report.text(path))


def _cron_import(args: dict[str, Any], call: ToolCall) -> str:
    from kirocrew_cron.importer import import_crons_json
    from kirocrew_cron.service import cron_host
    from kirocrew_cron.tools import actor_of

    actor = actor_of(call)
    if actor is None or actor.owner is not None:
        raise cron_error("caller_unverified", "only the person's kirocrew command may import jobs "
                                              "(kirocrew cron import)")
    path = Path(args["path"])
    if not path.is_absolute():
        raise cron_error("import_unreadable", f"the path to import must be absolute: {path}")
    host = cron_host()
    report = import_crons_json(host.store, path)
    if report.imported:
        host.changed(None)
    return _report(report, path, bool(args.get("json")))


def admin_tools() -> dict[str, CoreMcpTool]:
    return {"cron_import": CoreMcpTool(
        name="cron_import",
        description="Import the original's crons.json (version 2) into the cron store as the person's jobs; the "
                    "file is only read. Only the person's kirocrew command may call it.",
        input_schema=_IMPORT_SCHEMA, handler=_cron_import, identity="none")}


class _AdminServer:
    """The SDK server, built on first use (the mcp SDK is not imported when the plugin loads)."""

    def __init__(self) -> None:
        self._server: Any = None

    def __call__(self) -> Any:
        if self._server is None:
            from kirocrew_core.coretools.server import CoreToolsServer, build_server

            core = CoreToolsServer(tool_source=admin_tools, server_name=ADMIN_SERVER)
            self._server = build_server(core, instructions=INSTRUCTIONS)
        return self._server


def hosted_server() -> HostedMcpServer:
    return HostedMcpServer(ADMIN_SERVER, ADMIN_COMMAND, _AdminServer(),
                           "The person's cron administration (kirocrew cron import); no agent config names it.")


def import_in_process(path: Path, as_json: bool) -> str:
    """``kirocrew cron import`` without a host: the owner lock held, the store opened here."""
    from kirocrew_cron import store as store_module
    from kirocrew_cron.importer import import_crons_json

    with store_module.owner_lock(), store_module.CronStore.open() as store:
        report = import_crons_json(store, path)
    return _report(report, path, as_json)
