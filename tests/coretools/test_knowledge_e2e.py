"""Knowledge end to end: a conversation's kiro-cli searches the owner's library through the relay and the host.

The owner's library holds a folder (read in before the host starts); a conversation searches it and
gets the reference's result form, redacted, and is refused removing duplicates; the owner's own MCP
client (no session) may.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kirocrew_testing.core_sessions import CrewHarness

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
    library = shared()
    for path in (tmp_path / "copy.md", notes):
        library.reindex(str(library.add(path).id))

    script = "\n".join([_mcp("local_knowledge_search", {"query": "lighthouse relay", "limit": 2}),
                        _mcp("knowledge_dedup", {"apply": True}), "!say done"])

    async def main() -> tuple[str, tuple[str, str | None]]:
        async with crew.conversations() as conv:
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
    assert len(library.search("lighthouse", 5)) == 1
