"""Artifacts end to end: a conversation's kiro-cli saves through the relay and the host, the owner reviews from
the shell, a second run reads the review and revises, and only the owner resolves.

One host for the whole story, the fake kiro-cli speaking real ACP and calling ``kirocrew-core`` through
its relay, and the real ``kirocrew`` CLI: from the test's own process it is the owner; run from the
session's shell (``!shell``) it is that session, so the owner's decision is refused to it; the owner's own
call through the host's API (as the CLI makes it) resolves.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from kirocrew_core.artifacts import store
from kirocrew_core.artifacts.admin import ADMIN_SERVER
from kirocrew_core.artifacts.access import OWNER
from kirocrew_core.host.mcp_client import call_tool_text
from kirocrew_testing.core_sessions import CrewHarness
from kirocrew_testing.fixtures import kirocrew_argv, run_kirocrew


def _mcp(tool: str, args: dict[str, Any]) -> str:
    return f"!mcp kirocrew-core {tool} {json.dumps(args)}\n!result"


def _owner(crew: CrewHarness, *args: str) -> str:
    done = run_kirocrew("artifact", *args, env=crew.env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_session_saves_the_owner_comments_a_second_run_revises_and_only_the_owner_resolves(
        crew: CrewHarness, run_async: Any) -> None:
    save = {"name": "Weekly report", "content": "Revenue grew 5%.", "slug": "weekly-report", "tags": ["weekly"]}

    async def main() -> dict[str, Any]:
        async with crew.conversations() as conv:
            first = await crew.delegate(conv, _mcp("artifact_save", save) + "\n!say saved", name="reporter")
            posted = _owner(crew, "comment", "weekly-report", "cite the source", "--quote", "grew 5%")
            found = re.search(r"id=(c-[0-9a-f]{12})", posted)
            assert found is not None, posted
            comment_id = found.group(1)
            resolve = shlex.join(kirocrew_argv("artifact", "resolve", "weekly-report", comment_id))
            script = "\n".join([
                _mcp("artifact_get_comments", {"slug": "weekly-report"}),
                _mcp("artifact_update", {"slug": "weekly-report", "content": "Revenue rose 5% (Q3 filing)."}),
                _mcp("artifact_mark_review", {"slug": "weekly-report", "comment_id": comment_id}),
                f'!shell {resolve} > twin.txt 2>&1; echo "exit $?" >> twin.txt',
                "!say revised",
            ])
            started = await conv.structured("kiro_spawn", conversation=first["conversationId"], message=script)
            second = await crew.wait(conv, started)
        # The owner resolves through the host's API as the owner's own command does (a ``cli`` client).
        resolved = await call_tool_text(ADMIN_SERVER, "artifact_resolve_comment",
                                        {"slug": "weekly-report", "comment_id": comment_id})
        return {"first": first, "second": second, "comment_id": comment_id, "resolved": resolved}

    out = run_async(main())
    assert out["first"]["status"] == "completed" and out["second"]["status"] == "completed"
    saved = out["first"]["reply"]["text"].split("result: ")[1]
    assert saved.startswith("Saved artifact: slug=weekly-report version=1")
    comments, updated, reviewed = out["second"]["reply"]["text"].split("result: ")[1:4]
    assert comments.startswith(f"• owner: cite the source [open] (id={out['comment_id']})")
    assert updated.startswith("Updated artifact: slug=weekly-report version=2")
    assert reviewed.startswith(f"Comment {out['comment_id']} advanced to REVIEW status.")

    twin = (crew.workspace / "twin.txt").read_text()
    assert "error[person_only_command]" in twin and twin.rstrip().endswith("exit 1"), twin
    [comment] = store.comments("weekly-report", OWNER)
    assert comment["anchor_orphaned"] is True  # the revision lost "grew 5%"
    events = [(e["type"], e.get("action"), e["by"]) for e in store.get("weekly-report", OWNER)[0]["events"]]
    assert events[-2:] == [("comment", "reviewed", f"conversation:{out['first']['conversationId']}"),
                           ("comment", "resolved", "owner")]  # reviewed by the session, resolved by the owner

    meta = store.get("weekly-report", OWNER)[0]
    assert (meta["conversation"], meta["tree"], meta["source"], meta["created_by"]) == (
        out["first"]["conversationId"], out["first"]["conversationId"], "chat", "agent")
    assert meta["session"].startswith("kcs:") and [e["type"] for e in meta["events"]][:2] == ["created", "comment"]

    assert out["resolved"] == f"Comment {out['comment_id']} resolved."
    assert comment["status"] == "resolved"
    assert store.get("weekly-report", OWNER)[1] == "Revenue rose 5% (Q3 filing)."
