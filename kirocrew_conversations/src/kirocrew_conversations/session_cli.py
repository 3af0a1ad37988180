"""``kirocrew conversations open|repair ID``: the person's hands on a conversation's own Kiro session.

Neither is an MCP tool (a crew session never hands a session over): with a host running they are
its owner API (``POST /api/conversations/{id}/open`` and ``…/repair``), so the host's own worker
is released first; without one the command opens the state directory itself, where no worker runs.
The click commands are in :mod:`kirocrew_conversations.cli`; this is what they call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from kirocrew_core.errors import KirocrewError

if TYPE_CHECKING:
    from kirocrew_conversations.cli import _Options

_ROUTES = {"hand_over": "open", "repair_session": "repair"}


def session_action(options: _Options, action: str, conversation_id: str) -> dict[str, Any]:
    """The host's answer to ``action`` (``hand_over``, ``repair_session``), or this process's service's."""
    from kirocrew_core.host.mcp_client import host_disabled

    if options.state_dir is None and not host_disabled():
        from kirocrew_core.gateway.owner_client import OwnerApiError, call, running_host_url

        url = running_host_url()
        if url is not None:
            path = f"/api/conversations/{quote(conversation_id, safe='')}/{_ROUTES[action]}"
            try:
                return call("POST", path, {}, url=url)
            except OwnerApiError as exc:
                raise KirocrewError(exc.message, code=exc.code) from None
    return _in_process(options, action, conversation_id)


def _in_process(options: _Options, action: str, conversation_id: str) -> dict[str, Any]:
    import asyncio

    from kirocrew_conversations.scope import PERSON
    from kirocrew_conversations.service import ConversationsService, ServiceConfig

    async def main() -> dict[str, Any]:
        service = await ConversationsService.start(ServiceConfig.from_env(state_dir=options.state_dir))
        try:
            result: dict[str, Any] = await getattr(service, action)(PERSON, conversation_id)
            return result
        finally:
            await service.aclose()

    return asyncio.run(main())


def render_repair(out: dict[str, Any]) -> str:
    kept = ", ".join(out["backups"]) or "none (nothing changed)"
    return (f"conversation {out['conversationId']}: {out['images']} image(s) found, {out['downscaled']} downscaled, "
            f"{out['removed']} removed, {out['imagesLeft']} left; originals kept as: {kept}")
