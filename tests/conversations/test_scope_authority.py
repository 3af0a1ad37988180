"""A crew session never gives work more authority than its own (issue 27): on a real service and SQLite store.

The attack: a ``read_only`` session (sandboxed) starts an ``unrestricted`` conversation with
``kiro_spawn`` and gets its commands run outside the sandbox. Who the caller is comes from the
host's registry in production (tests/coretools/test_conversations_scope_e2e.py); here the service is
called with the session as its viewer, as the MCP server passes it.
"""

from __future__ import annotations

from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kirocrew_core.errors import KirocrewError
from kirocrew_testing.aio import run_bounded

from kirocrew_conversations.scope import PERSON, Viewer
from kirocrew_conversations.service import ConversationsService, ServiceConfig
from kirocrew_conversations.store import Workspace

T = TypeVar("T")


@pytest.fixture(autouse=True)
def _fake(fake_kiro_cli: Any, lean_kirocrew_agent: Path) -> Any:
    return fake_kiro_cli


def run(coro: Awaitable[T]) -> T:
    return run_bounded(coro, 60)


def _session(service: ConversationsService, workspace: Path, authority: str) -> Viewer:
    conversation = service.store.create_conversation(
        name=f"session-{authority}", workspace=Workspace("shared", str(workspace), "ws_test"), authority=authority)
    return Viewer(conversation.id)


def test_a_session_cannot_start_or_move_a_conversation_above_its_own_authority(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()

    async def main() -> list[str]:
        codes = []
        async with await ConversationsService.start(ServiceConfig(state_dir=tmp_path / "state")) as service:
            sandboxed = _session(service, workspace, "read_only")
            for tool, args in (
                    ("kiro_spawn", {"conversation": "new", "name": "escape", "workspace": str(workspace),
                                    "message": "!say out", "authority": "unrestricted"}),
                    ("kiro_spawn", {"conversation": "new", "name": "wider", "workspace": str(workspace),
                                    "message": "!say out", "authority": "workspace_write"})):
                with pytest.raises(KirocrewError) as refused:
                    await service.call(tool, args, viewer=sandboxed)
                codes.append(refused.value.code)
            assert not service.store.name_in_use("escape") and not service.store.name_in_use("wider")
            # The person may choose any authority; a session running unrestricted may narrow it.
            free = _session(service, workspace, "unrestricted")
            narrowed = await service.call("kiro_spawn", {"conversation": "new", "name": "narrow",
                                                          "workspace": str(workspace), "message": "!say in",
                                                          "authority": "unrestricted"}, viewer=free)
            assert service.store.get_conversation(narrowed["conversationId"]).authority == "unrestricted"
            with pytest.raises(KirocrewError) as configure:
                await service.call("kiro_configure", {"conversationId": narrowed["conversationId"],
                                                      "authority": "unrestricted"}, viewer=sandboxed)
            codes.append(configure.value.code)  # not its tree: not found, whatever the authority
            await service.call("kiro_spawn", {"conversation": "new", "name": "owners", "workspace": str(workspace),
                                              "message": "!say any", "authority": "unrestricted"}, viewer=PERSON)
        return codes

    assert run(main()) == ["authority_escalation", "authority_escalation", "conversation_not_found"]


def test_a_sessions_new_conversation_gets_the_sessions_authority_when_it_names_none(tmp_path: Path) -> None:
    from kirocrew_testing.requirements import executable

    executable("bwrap", apt="bubblewrap")  # the inherited read_only authority must be able to run here
    workspace = tmp_path / "ws"
    workspace.mkdir()

    async def main() -> str:
        async with await ConversationsService.start(ServiceConfig(state_dir=tmp_path / "state")) as service:
            sandboxed = _session(service, workspace, "read_only")
            out = await service.call("kiro_spawn", {"conversation": "new", "name": "child",
                                                    "workspace": str(workspace), "message": "!say hi"},
                                     viewer=sandboxed)
            await service.call("kiro_cancel", {"conversationId": out["conversationId"], "runId": out["runId"]},
                               viewer=PERSON)
            return service.store.get_conversation(out["conversationId"]).authority

    assert run(main()) == "read_only"
