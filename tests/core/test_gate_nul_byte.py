"""A shell line with a NUL byte is decided as the shell would run it, and never allowed without asking."""

from __future__ import annotations

from kirocrew_core.gate.calls import Context, ToolCall
from kirocrew_core.gate.engine import Policy
from kirocrew_core.gate.rules import build_rule


def decide(command: str, *rules: dict[str, str]) -> str:
    owner = [build_rule(r, tier="owner", source="test") for r in rules]
    policy = Policy(owner_rules=owner)
    call = ToolCall("shell", None, {"command": command})
    return policy.decide(call, Context("unrestricted", "kirocrew", "/w", "/h")).decision


def test_a_nul_byte_cannot_hide_a_denied_command_from_its_rule(isolated_homes):
    assert decide("rm\x00 x", {"decision": "deny", "tool": "shell", "command": "rm"}) == "deny"
    assert decide("echo\x00 hi") == "ask"  # allowed by default without the byte, asked with it
    assert decide("echo hi") == "allow"
