"""History end to end: a conversation's kiro-cli searches and reads past sessions through the relay and the host.

One host for the whole story. kiro-cli session files (written in the documented forms) sit in this
workspace and in another one; a first conversation searches and lists (it sees only its workspace's
sessions, and is refused every workspace), and says a marker word; a second conversation finds the
first one's reply (kirocrew's conversations are a history source) and reads the kiro session by the
key the first got. A plain MCP client of the owner's (no session) must ask for every workspace.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kirocrew_core import home

from kirocrew_testing.core_sessions import CrewHarness
from kirocrew_testing.kiro_store_files import write_flat, write_v3


def _mcp(tool: str, args: dict[str, Any]) -> str:
    return f"!mcp kirocrew-core {tool} {json.dumps(args)}\n!result"


def test_sessions_search_and_read_history_scoped_to_their_workspace(crew: CrewHarness, run_async: Any) -> None:
    kiro = home.kiro_home()
    write_flat(kiro, "5e55a0c1-0000-4000-8000-000000000001", title="Zebracorn migration", cwd=str(crew.workspace),
               messages=[("user", "how do we migrate the zebracorn table?"),
                         ("assistant", "Copy it in batches of 500, then swap the names.")])
    write_v3(kiro, "sess_elsewhere", title="Other project", workspace=str(crew.root / "elsewhere"),
             messages=[("user", "the zebracorn of another project"), ("assistant", "not yours to read")])

    first_script = "\n".join([
        _mcp("search_chat_history", {"query": "zebracorn"}),
        _mcp("list_sessions", {"limit": 100}),
        _mcp("search_chat_history", {"query": "zebracorn", "all_workspaces": True}),
        "!say quasarmoth finished",
    ])

    async def main() -> tuple[str, str, list[tuple[str, str | None]]]:
        async with crew.conversations() as conv:
            first = await crew.delegate(conv, first_script, name="searcher")
            text = first["reply"]["text"]
            key = re.search(r"\*\*Zebracorn migration\*\*  ·  `(h1-[0-9a-f]{24})`", text)
            assert key is not None, text
            second_script = "\n".join([_mcp("search_chat_history", {"query": "quasarmoth"}),
                                       _mcp("get_chat_session", {"session_key": key.group(1), "max_messages": 1})])
            second = await crew.delegate(conv, second_script, name="reader")
        async with crew.core() as plain:
            answers = [await plain.call("search_chat_history", query="zebracorn"),
                       await plain.call("search_chat_history", query="zebracorn", all_workspaces=True)]
        return text, second["reply"]["text"], answers

    first, second, answers = run_async(main())
    searched, listed, everywhere = first.split("result: ")[1:4]
    assert searched.startswith("🔎 Chat history matches")
    assert "how do we migrate the <<<zebracorn>>> table?" in searched and "Other project" not in searched
    assert listed.startswith("🗂️ Sessions in this workspace (") and "**Zebracorn migration**" in listed
    assert "Other project" not in listed and "5e55a0c1" not in first
    assert everywhere.startswith("error[scope_denied]: ")

    found, read = second.split("result: ")[1:3]
    assert "**searcher**" in found and "<<<quasarmoth>>> finished" in found  # the first conversation's reply
    assert read.startswith("**Zebracorn migration**  ·  newest 1 of 2 messages, oldest first")
    assert "**Assistant:** Copy it in batches of 500, then swap the names." in read

    (unscoped, code), (owner_view, owner_code) = answers
    assert code == "workspace_unknown" and "all_workspaces" in unscoped
    assert owner_code is None and "Zebracorn migration" in owner_view and "Other project" in owner_view
