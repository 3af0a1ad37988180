"""The owner's hook changes: list, show and revoke, for ``kirocrew hooks``.

Like the knowledge library's, these are the tools of a separate host server,
``kirocrew-hooks-admin``, that no agent config names; each refuses every caller but the person's
own ``kirocrew`` command (by process ancestry, :func:`kirocrew_core.coretools.person_tools.require_person`),
so a session cannot revoke hooks, not even from its shell. With ``KIROCREW_NO_HOST=1`` the same
handlers run in the command's process as the person.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from kirocrew_core.coretools.person_tools import object_schema as _schema
from kirocrew_core.webhooks import store

if TYPE_CHECKING:
    from kirocrew_core.contributions import CoreMcpTool, HostedMcpServer

ADMIN_SERVER = "kirocrew-hooks-admin"
ADMIN_COMMAND = "mcp-hooks-admin"
INSTRUCTIONS = "The owner's inbound webhooks (list, show, revoke); not for models."
_HOOK_ID = {"type": "string", "minLength": 1, "maxLength": store.HOOK_ID_MAX_CHARS}


def when(at: float | None) -> str:
    return "never" if at is None else datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def list_hooks(args: dict[str, Any]) -> str:
    hooks = store.all_hooks()
    if args.get("json"):
        return json.dumps([h.view() for h in hooks], indent=2)
    if not hooks:
        return "No webhooks are registered (a session registers one with register_hook)."
    width = max(len(h.hook_id) for h in hooks)
    return "\n".join(f"{h.hook_id:<{width}}  conversation {h.conversation_id}  {h.deliveries:>5} deliveries  "
                     f"last {when(h.last_delivery):<20}  created {when(h.created)}" for h in hooks)


def show(args: dict[str, Any]) -> str:
    from kirocrew_core.webhooks.tools import webhook_url

    hook = store.get(args["hook_id"])
    return "\n".join([f"hook:          {hook.hook_id}", f"url:           {webhook_url(hook.hook_id)}",
                      f"conversation:  {hook.conversation_id}", f"agent:         {hook.agent or '-'}",
                      f"created:       {when(hook.created)}", f"token rotated: {when(hook.rotated)}",
                      f"deliveries:    {hook.deliveries}", f"last delivery: {when(hook.last_delivery)}",
                      "context:", *("  " + line for line in hook.context_summary.splitlines())])


def revoke(args: dict[str, Any]) -> str:
    from kirocrew_core.webhooks.api import revoke_hook

    hook_id = revoke_hook(args["hook_id"])["revoked"]
    return f"Revoked webhook {hook_id}: its token is refused from now on."


def admin_tools() -> dict[str, CoreMcpTool]:
    from kirocrew_core.coretools.person_tools import person_tool as tool

    found = [
        tool("hooks_list", "list the inbound webhooks", _schema({"json": {"type": "boolean"}}), list_hooks,
             read_only=True),
        tool("hooks_show", "show one inbound webhook", _schema({"hook_id": _HOOK_ID}, ("hook_id",)), show,
             read_only=True),
        tool("hooks_revoke", "revoke an inbound webhook", _schema({"hook_id": _HOOK_ID}, ("hook_id",)), revoke),
    ]
    return {t.name: t for t in found}


def hosted_server() -> HostedMcpServer:
    from kirocrew_core.coretools.person_tools import admin_server

    return admin_server(ADMIN_SERVER, ADMIN_COMMAND, admin_tools, INSTRUCTIONS,
                        "The owner's inbound webhooks (list, show, revoke); no agent config names it.")


def call(tool: str, arguments: dict[str, Any]) -> str:
    """One admin tool call through the host, or in this process as the person without one; a refusal raised."""
    from kirocrew_core.coretools.person_tools import person_call

    return person_call(ADMIN_SERVER, admin_tools, tool, arguments)
