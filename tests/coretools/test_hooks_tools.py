"""``register_hook`` and the owner's hooks admin tools through the real tool path.

Calls go through :class:`~kirocrew_core.coretools.server.CoreToolsServer` with a real
:class:`~kirocrew_core.coretools.identity.SessionRegistry`: a session is a real process tree bound to a key,
the person is this test process (no session's descendant). Deliveries through a real host and gateway are
``test_hooks_e2e.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from typing import Any

import pytest
from kirocrew_core import home
from kirocrew_core.config import set_value
from kirocrew_core.coretools.identity import SessionRegistry
from kirocrew_core.coretools.server import CoreToolsServer
from kirocrew_core.processes import ProcessRef
from kirocrew_core.webhooks import store
from kirocrew_core.webhooks.admin import admin_tools
from kirocrew_core.webhooks.tools import hook_tools
from kirocrew_testing.core_sessions import ProcessTree, verified_caller

ELSEWHERE = ProcessRef(pid=2**22 + 1, started=0.0)


class Callers:
    """Two bound sessions (conversations a and b), the person as an MCP client and as its command."""

    def __init__(self, trees: Callable[[], ProcessTree], plugin_manager: Any) -> None:
        self.registry = SessionRegistry(host=ELSEWHERE)
        self.core = CoreToolsServer(plugin_manager, self.registry,
                                    tool_source=lambda: {t.name: t for t in hook_tools()})
        self.admin = CoreToolsServer(plugin_manager, self.registry, tool_source=admin_tools,
                                     server_name="kirocrew-hooks-admin")
        self.callers = {"person": verified_caller(os.getpid()),
                        "person-cli": verified_caller(os.getpid(), session_type="cli")}
        for name in ("a", "b"):
            tree = trees()
            key = self.registry.issue("conversation", f"conv-{name}", agent="kirocrew")
            assert self.registry.bind_pid(key, tree.parent)
            self.callers[f"session-{name}"] = verified_caller(tree.child)
            self.callers[f"session-{name}-cli"] = verified_caller(tree.child, session_type="cli")

    def __call__(self, who: str, tool: str, **args: Any) -> tuple[str, str | None]:
        server = self.admin if tool in admin_tools() else self.core
        return asyncio.run(server.call(tool, args, self.callers[who]))


@pytest.fixture
def callers(process_tree: Callable[[], ProcessTree], plugin_manager: Any) -> Callers:
    return Callers(process_tree, plugin_manager)


def _token(text: str) -> str:
    return next(line.rsplit(": ", 1)[1] for line in text.splitlines() if line.startswith("Token"))


def test_the_tool_has_the_schema_bounds_and_is_strict() -> None:
    [tool] = hook_tools()
    schema = tool.input_schema
    assert (tool.name, tool.identity, tool.read_only) == ("register_hook", "strict", False)
    assert schema["properties"]["hook_id"]["maxLength"] == 500 and schema["properties"]["hook_id"]["pattern"]
    assert schema["properties"]["context_summary"]["maxLength"] == 5000
    assert schema["required"] == ["hook_id", "context_summary"] and schema["additionalProperties"] is False


def test_a_session_registers_for_its_own_conversation_and_another_cannot_take_the_hook(callers: Callers) -> None:
    text, code = callers("session-a", "register_hook", hook_id="ci", context_summary="Wait for CI")
    assert code is None, text
    token = _token(text)
    assert text.startswith("Registered webhook `ci` for this conversation.")
    assert "/webhooks/ci" in text and f"-H 'Authorization: Bearer {token}'" in text
    hook = store.get("ci")
    assert (hook.conversation_id, hook.agent, hook.context_summary) == ("conv-a", "kirocrew", "Wait for CI")
    assert store.authenticate("ci", token) == hook

    taken, code = callers("session-b", "register_hook", hook_id="ci", context_summary="mine now")
    assert code == "hook_taken", taken
    rotated, code = callers("session-a-cli", "register_hook", hook_id="ci", context_summary="Second")
    assert code is None and rotated.startswith("Rotated the token of webhook `ci`")  # its shell is the session
    assert store.authenticate("ci", token) is None and store.authenticate("ci", _token(rotated)) is not None
    assert store.get("ci").conversation_id == "conv-a"

    records = [json.loads(line) for line in home.audit_log_file().read_text().splitlines()]
    registered = [r["fields"] for r in records if r["event"] == "hooks.register"]
    assert [(r["hook_id"], r["conversation_id"], r["rotated"]) for r in registered] == [
        ("ci", "conv-a", False), ("ci", "conv-a", True)]
    assert token not in home.audit_log_file().read_text()


@pytest.mark.parametrize(("args", "code"), [
    ({"hook_id": "x" * 501, "context_summary": "c"}, "invalid_arguments"),
    ({"hook_id": "../etc", "context_summary": "c"}, "invalid_arguments"),
    ({"hook_id": "ok", "context_summary": "c" * 5001}, "invalid_arguments"),
    ({"hook_id": "ok", "context_summary": "c", "conversation": "conv-b"}, "invalid_arguments"),
    ({"hook_id": "ok", "context_summary": "   "}, "invalid_context"),
])
def test_bad_arguments_are_refused_and_nothing_is_stored(callers: Callers, args: dict[str, Any], code: str) -> None:
    assert callers("session-a", "register_hook", **args)[1] == code
    assert store.all_hooks() == []


def test_no_session_no_hook_and_governance_denies_closed(callers: Callers) -> None:
    for who in ("person", "person-cli"):
        assert callers(who, "register_hook", hook_id="ci", context_summary="c")[1] == "caller_unverified"
    set_value("governance.hooks", "deny")
    text, code = callers("session-a", "register_hook", hook_id="ci", context_summary="c")
    assert code == "governance_denied" and "governance.hooks" in text
    home.config_file().write_text("governance = [not toml")  # unreadable policy: denied, not allowed
    assert callers("session-a", "register_hook", hook_id="ci", context_summary="c")[1] == "governance_denied"
    assert store.all_hooks() == []


def test_only_the_owners_own_command_lists_and_revokes(callers: Callers) -> None:
    callers("session-a", "register_hook", hook_id="deploys", context_summary="Watch the deploy")
    for who in ("session-a", "session-a-cli", "session-b-cli"):
        assert callers(who, "hooks_revoke", hook_id="deploys")[1] == "person_only_command"
    assert callers("person", "hooks_list")[1] == "caller_unverified"  # an MCP client, not the command
    listed, code = callers("person-cli", "hooks_list", json=True)
    assert code is None and [h["hook_id"] for h in json.loads(listed)] == ["deploys"]
    assert "token" not in listed.replace("token_sha256", "") and "token_sha256" not in listed
    shown, _ = callers("person-cli", "hooks_show", hook_id="deploys")
    assert "conversation:  conv-a" in shown and "  Watch the deploy" in shown
    assert callers("person-cli", "hooks_revoke", hook_id="deploys") == (
        "Revoked webhook deploys: its token is refused from now on.", None)
    assert callers("person-cli", "hooks_show", hook_id="deploys")[1] == "hook_not_found"
    assert callers("person-cli", "hooks_list")[0].startswith("No webhooks are registered")
