"""``local_knowledge_search``, ``knowledge_dedup`` and the owner's admin tools through the real tool path.

Calls go through :class:`~kirocrew_core.coretools.server.CoreToolsServer` with a real
:class:`~kirocrew_core.coretools.identity.SessionRegistry`: a session is a real process tree bound to
a key, the person is this test process (no session's descendant). The run through a real host and
relay is ``test_knowledge_e2e.py``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kirocrew_core.coretools.identity import SessionRegistry
from kirocrew_core.coretools.server import CoreToolsServer
from kirocrew_core.knowledge.admin import admin_tools
from kirocrew_core.knowledge.store import shared
from kirocrew_core.knowledge.tools import knowledge_tools
from kirocrew_core.processes import ProcessRef
from kirocrew_testing.core_sessions import ProcessTree, verified_caller

ELSEWHERE = ProcessRef(pid=2**22 + 1, started=0.0)
TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0" * 2


class Callers:
    """A bound session, the person (as an MCP client and as its ``kirocrew`` command), and the two servers."""

    def __init__(self, trees: Callable[[], ProcessTree], plugin_manager: Any) -> None:
        self.registry = SessionRegistry(host=ELSEWHERE)
        self.core = CoreToolsServer(plugin_manager, self.registry,
                                    tool_source=lambda: {t.name: t for t in knowledge_tools()})
        self.admin = CoreToolsServer(plugin_manager, self.registry, tool_source=admin_tools,
                                     server_name="kirocrew-knowledge-admin")
        tree = trees()
        key = self.registry.issue("conversation", "conv-a")
        assert self.registry.bind_pid(key, tree.parent)
        self.callers = {"session": verified_caller(tree.child), "person": verified_caller(os.getpid()),
                        "person-cli": verified_caller(os.getpid(), session_type="cli"),
                        "session-cli": verified_caller(tree.child, session_type="cli")}

    def __call__(self, who: str, tool: str, **args: Any) -> tuple[str, str | None]:
        server = self.admin if tool in admin_tools() else self.core
        return asyncio.run(server.call(tool, args, self.callers[who]))

    def ok(self, who: str, tool: str, **args: Any) -> str:
        text, code = self(who, tool, **args)
        assert code is None, text
        return text


@pytest.fixture
def callers(process_tree: Callable[[], ProcessTree], plugin_manager: Any) -> Callers:
    return Callers(process_tree, plugin_manager)


def _notes(tmp_path: Path) -> Path:
    root = tmp_path / "notes"
    (root / "ops").mkdir(parents=True)
    (root / "ops" / "deploy.md").write_text(f"# Deploying\n\n## Tokens\nthe harbour token is {TOKEN}\n")
    (root / "intro.md").write_text("# Intro\nharbour basics\n")
    return root


def test_the_tools_have_the_reference_schemas() -> None:
    tools = {t.name: t for t in knowledge_tools()}
    search = tools["local_knowledge_search"].input_schema
    assert search["properties"]["query"]["maxLength"] == 500 and search["required"] == ["query"]
    assert (search["properties"]["limit"]["minimum"], search["properties"]["limit"]["maximum"]) == (1, 5)
    assert tools["knowledge_dedup"].input_schema["properties"]["apply"]["default"] is False
    assert tools["local_knowledge_search"].read_only and not tools["knowledge_dedup"].read_only
    assert all(t.identity == "lenient" for t in tools.values())


def test_a_session_searches_the_owners_library_redacted_in_the_reference_form(
        callers: Callers, tmp_path: Path) -> None:
    assert callers.ok("session", "local_knowledge_search", query="harbour").startswith(
        "Knowledge Library is not configured.")
    added = callers.ok("person-cli", "knowledge_add", path=str(_notes(tmp_path)))
    assert "2 read and chunked" in added
    found = callers.ok("session", "local_knowledge_search", query="harbour token", limit=5)
    assert found.startswith("📚 Knowledge Library (supplementary reference — extract only what's relevant")
    assert "## Deploying\n**Source:** [folder] ops/deploy.md — Deploying (lines 1-4)" in found
    assert TOKEN not in found and "the harbour token is" in found
    assert callers.ok("session", "local_knowledge_search", query="nothing-like-this") == "No relevant knowledge found."
    text, code = callers("session", "local_knowledge_search", query="x", limit=6)
    assert code == "invalid_arguments"
    hostile = '"(((NEAR* harbour:' * 27  # 486 characters of FTS5 syntax: searched as words
    assert callers.ok("session", "local_knowledge_search", query=hostile) == "No relevant knowledge found."
    assert callers("session", "local_knowledge_search", query=hostile + "x" * 15)[1] == "invalid_arguments"  # > 500
    assert callers("session", "local_knowledge_search", query=")(" * 250) == (
        "query: give at least one word to search for", "invalid_arguments")


def test_only_the_owner_changes_the_library(callers: Callers, tmp_path: Path) -> None:
    root = _notes(tmp_path)
    for who in ("session", "session-cli"):
        assert callers(who, "knowledge_add", path=str(root))[1] == "person_only_command"
    assert callers("person", "knowledge_add", path=str(root))[1] == "caller_unverified"  # an MCP client, no command
    assert shared().sources() == []
    callers.ok("person-cli", "knowledge_add", path=str(root))
    (tmp_path / "copy.md").write_text("# Intro\nharbour basics\n")
    callers.ok("person-cli", "knowledge_add", path=str(tmp_path / "copy.md"))
    for tool, args in (("knowledge_remove", {"source": "1"}), ("knowledge_reindex", {})):
        assert callers("session-cli", tool, **args)[1] == "person_only_command"
    dry = callers.ok("session", "knowledge_dedup")
    assert dry.startswith("Would delete (dry run; set apply=true to delete) — 1 duplicate document(s):")
    assert f"- {(tmp_path / 'copy.md').resolve()} (1 chunks) -> kept {root.resolve()}/intro.md" in dry
    assert callers("session", "knowledge_dedup", apply=True)[1] == "owner_only"
    assert len(shared().duplicates()) == 1
    assert callers.ok("person", "knowledge_dedup", apply=True).startswith("Deleted — 1 duplicate document(s):")
    assert callers.ok("person", "knowledge_dedup") == "No duplicate documents found."
    listed = callers.ok("person-cli", "knowledge_sources")
    assert "ready" in listed and str(root.resolve()) in listed
    assert callers.ok("person-cli", "knowledge_remove", source=str(root)).startswith("Removed source 1")
    assert callers("person-cli", "knowledge_remove", source="99")[1] == "source_not_found"


def test_an_unverified_caller_reads_nothing(callers: Callers) -> None:
    from kirocrew_core.host.caller import CallerContext

    nobody = CallerContext("", "relay", 0, None, {})
    text, code = asyncio.run(callers.core.call("local_knowledge_search", {"query": "x"}, nobody))
    assert code == "caller_unverified"


def test_an_artifact_and_the_global_lessons_are_sources_read_again_when_they_change(callers: Callers) -> None:
    from kirocrew_core.artifacts import store as artifacts
    from kirocrew_core.artifacts.access import OWNER
    from kirocrew_core.lessons import store as lessons

    artifacts.save(artifacts.NewArtifact("Tide tables", "# Tides\nspring tide at noon\n", "markdown",
                                         slug="tides"), OWNER)
    lessons.add(lessons.validate_new("always check the tide tables before sailing"), author="owner")
    lessons.add(lessons.validate_new("tide secrets of this repo only", scope="workspace", workspace="/elsewhere"),
                author="owner")
    assert "1 read and chunked" in callers.ok("person-cli", "knowledge_add", artifact="tides")
    assert "1 read and chunked" in callers.ok("person-cli", "knowledge_add", lessons=True)
    assert callers("person-cli", "knowledge_add", artifact="no-such")[1] == "artifact_not_found"
    assert callers("person-cli", "knowledge_add", lessons=True, artifact="tides")[1] == "invalid_arguments"
    found = callers.ok("session", "local_knowledge_search", query="tide", limit=5)
    assert "## Tide tables\n**Source:** [artifact] tides — Tides (lines 1-2)\n**Artifact:** tides" in found
    assert "**Source:** [lessons] lessons.md" in found and "before sailing" in found
    assert "this repo only" not in found  # a workspace's lesson is not every session's
    artifacts.update("tides", OWNER, content="# Tides\nneap tide at dusk\n")
    assert "1 read and chunked" in callers.ok("person-cli", "knowledge_reindex", source="artifact:tides")
    assert "0 read and chunked" in callers.ok("person-cli", "knowledge_reindex", source="lessons:global")
    assert "neap tide" in callers.ok("session", "local_knowledge_search", query="neap")
