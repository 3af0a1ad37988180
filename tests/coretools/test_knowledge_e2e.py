"""Knowledge end to end: a conversation's kiro-cli searches the owner's library through the relay and the host.

The owner adds a folder and a file through the host's ``kirocrew-knowledge-admin`` server, as the owner's
``kirocrew knowledge add`` does; a conversation searches them and gets the reference's result form,
redacted, is refused removing duplicates, and its shell's ``kirocrew knowledge add`` is refused as that
session's; the owner's own MCP client (no session) removes the duplicate.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from kirocrew_core.host.mcp_client import call_tool_text
from kirocrew_core.knowledge.admin import ADMIN_SERVER
from kirocrew_testing.core_sessions import CrewHarness
from kirocrew_testing.fixtures import kirocrew_argv

TOKEN = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0" * 2


def _mcp(tool: str, args: dict[str, Any]) -> str:
    return f"!mcp kirocrew-core {tool} {json.dumps(args)}\n!result"


def test_a_session_searches_the_library_and_only_the_owner_removes_duplicates(
        crew: CrewHarness, run_async: Any, tmp_path: Path) -> None:
    from kirocrew_core.knowledge.store import shared

    notes = tmp_path / "library"
    notes.mkdir()
    (notes / "runbook.md").write_text(f"# Runbook\n\n## Failover\nswitch the lighthouse relay, key {TOKEN}\n")
    (tmp_path / "copy.md").write_text(f"# Runbook\n\n## Failover\nswitch the lighthouse relay, key {TOKEN}\n")
    add = shlex.join(kirocrew_argv("knowledge", "add", str(tmp_path)))
    script = "\n".join([_mcp("local_knowledge_search", {"query": "lighthouse relay", "limit": 2}),
                        _mcp("knowledge_dedup", {"apply": True}),
                        f'!shell {add} > twin.txt 2>&1; echo "exit $?" >> twin.txt', "!say done"])

    async def main() -> tuple[str, tuple[str, str | None]]:
        async with crew.conversations() as conv:
            for path in (tmp_path / "copy.md", notes):
                added = await call_tool_text(ADMIN_SERVER, "knowledge_add", {"path": str(path)})
                assert "1 read and chunked" in added, added
            run = await crew.delegate(conv, script, name="reader")
        async with crew.core() as plain:
            applied = await plain.call("knowledge_dedup", apply=True)
        return run["reply"]["text"], applied

    text, (applied, code) = run_async(main())
    searched, refused = text.split("result: ")[1:3]
    assert searched.startswith("📚 Knowledge Library (supplementary reference")
    assert "## Runbook\n**Source:** [folder] runbook.md — Runbook (lines 1-4)" in searched
    assert "switch the lighthouse relay" in searched and TOKEN not in text
    assert refused.startswith("error[owner_only]: ")
    assert code is None and applied.startswith("Deleted — 1 duplicate document(s):")
    assert len(shared().search("lighthouse", 5)) == 1
    twin = (crew.workspace / "twin.txt").read_text()
    assert "error[person_only_command]" in twin and twin.rstrip().endswith("exit 1"), twin
    assert len(shared().sources()) == 2
