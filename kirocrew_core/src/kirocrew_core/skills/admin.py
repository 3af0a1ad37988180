"""``kirocrew-skills-admin``: the owner's skill install as a host tool (for a dashboard page to call).

Installing puts instructions in front of every later session, so it is no model's decision: the
tool refuses every caller but the person's own ``kirocrew`` command, as the artifact admin tools do
(``person_only_command`` for a session, ``caller_unverified`` for anyone else).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kirocrew_core.contributions import CoreMcpTool, HostedMcpServer
    from kirocrew_core.coretools.contract import ToolCall

ADMIN_SERVER = "kirocrew-skills-admin"
ADMIN_COMMAND = "mcp-skills-admin"
INSTRUCTIONS = "The owner's skill install; not for models."


def install_from_registry(args: dict[str, Any]) -> str:
    from kirocrew_core.skills import install, registry

    skill_id = str(args["id"])
    try:
        files = registry.fetch(skill_id)
    except registry.RegistryError as exc:
        from kirocrew_core.coretools.contract import ToolRefused

        raise ToolRefused(str(exc), code=exc.code) from exc
    path = install.install(skill_id, files)
    return f"Installed skill {skill_id} as {path.name} ({len(files)} files)."


async def skill_install(args: dict[str, Any], call: ToolCall) -> str:
    from kirocrew_core.coretools.person_tools import require_person

    require_person(call, "install a skill")
    return await asyncio.to_thread(install_from_registry, args)


def admin_tools() -> dict[str, CoreMcpTool]:
    from kirocrew_core.contributions import CoreMcpTool
    from kirocrew_core.skills.registry import FETCH_SCHEMA

    schema = {**FETCH_SCHEMA, "properties": {"id": FETCH_SCHEMA["properties"]["id"]}}
    return {"skill_install": CoreMcpTool("skill_install", "The owner's: install a registry skill.", schema,
                                         skill_install, identity="lenient")}


def hosted_server() -> HostedMcpServer:
    from kirocrew_core.coretools.person_tools import admin_server

    return admin_server(ADMIN_SERVER, ADMIN_COMMAND, admin_tools, INSTRUCTIONS,
                        "The owner's skill install; no agent config names it.")
