"""The ``artifact_*`` tools through the real tool path: schema validation, identity by process ancestry, results.

Each call goes through :class:`~kirocrew_core.coretools.server.CoreToolsServer` with a real
:class:`~kirocrew_core.coretools.identity.SessionRegistry`: sessions are real process trees bound to
keys (``sh`` standing for a kiro-cli, its ``sleep`` for the relay that calls), the person is this test
process (no session's descendant), and what a caller's block claims never decides. The end-to-end
run through a real host and relay is ``test_artifacts_e2e.py``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

import pytest
from kirocrew_core import processes
from kirocrew_core.artifacts import store
from kirocrew_core.artifacts.access import OWNER
from kirocrew_core.artifacts.tools import artifact_tools
from kirocrew_core.coretools.identity import SessionRegistry, fingerprint
from kirocrew_core.coretools.server import CoreToolsServer
from kirocrew_core.processes import ProcessRef
from kirocrew_testing.core_sessions import ProcessTree, verified_caller
from kirocrew_testing.plugins import register_plugin

ELSEWHERE = ProcessRef(pid=2**22 + 1, started=0.0)  # a host that is no ancestor of anything here
TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0" * 2


class Crew:
    """Two bound sessions (conversations a and b), the person, and a caller the host started for nobody."""

    def __init__(self, trees: Callable[[], ProcessTree], plugin_manager: Any) -> None:
        self.registry = SessionRegistry(host=ELSEWHERE)
        self.server = CoreToolsServer(plugin_manager, self.registry,
                                      tool_source=lambda: {t.name: t for t in artifact_tools()})
        self.trees = trees
        self.keys: dict[str, str] = {}
        self.callers: dict[str, Any] = {"person": verified_caller(os.getpid())}
        for conversation in ("conv-a", "conv-b"):
            self.bind(conversation)

    def bind(self, conversation: str) -> None:
        tree = self.trees()
        key = self.registry.issue("conversation", conversation)
        assert self.registry.bind_pid(key, tree.parent)
        self.keys[conversation] = key
        self.callers[conversation] = verified_caller(tree.child)

    def __call__(self, who: str, tool: str, **args: Any) -> tuple[str, str | None]:
        return asyncio.run(self.server.call(tool, args, self.callers[who]))

    def ok(self, who: str, tool: str, **args: Any) -> str:
        text, code = self(who, tool, **args)
        assert code is None, text
        return text


@pytest.fixture
def crew(process_tree: Callable[[], ProcessTree], plugin_manager: Any) -> Crew:
    return Crew(process_tree, plugin_manager)


def test_the_tools_are_listed_with_schemas_that_refuse_unknown_fields() -> None:
    tools = {t.name: t for t in artifact_tools()}
    assert sorted(tools) == sorted([
        "artifact_save", "artifact_get", "artifact_update", "artifact_revert", "artifact_list", "artifact_versions",
        "artifact_delete", "artifact_move", "artifact_get_comments", "artifact_post_comment",
        "artifact_reply_comment", "artifact_mark_review", "artifact_delete_comment", "artifact_folder_list",
        "artifact_folder_create", "artifact_folder_rename", "artifact_folder_move", "artifact_folder_delete",
        "deploy_artifact"])
    assert all(t.input_schema["additionalProperties"] is False and t.identity == "lenient" for t in tools.values())
    assert {n for n, t in tools.items() if t.read_only} == {"artifact_get", "artifact_list", "artifact_versions",
                                                           "artifact_get_comments", "artifact_folder_list"}


def test_a_session_saves_reads_revises_and_reverts_with_the_reference_results(crew: Crew) -> None:
    saved = crew.ok("conv-a", "artifact_save", name="Design note", content="# Plan\nstep one", tags=["design"])
    assert saved.splitlines()[0] == "Saved artifact: slug=design-note version=1"
    meta = store.get("design-note", OWNER)[0]
    assert (meta["conversation"], meta["tree"], meta["source"], meta["session"]) == (
        "conv-a", "conv-a", "chat", fingerprint(crew.keys["conv-a"]))
    got = crew.ok("conv-a", "artifact_get", slug="design-note")
    assert got.splitlines()[:4] == ["slug: design-note", "name: Design note", "kind: markdown", "version: 1"]
    assert got.splitlines()[4].startswith("updated_at: ") and got.endswith("--- content ---\n# Plan\nstep one")
    assert crew.ok("conv-a", "artifact_update", slug="design-note", content="# Plan\nstep two") == (
        "Updated artifact: slug=design-note version=2")
    assert crew.ok("conv-a", "artifact_get", slug="design-note", version=1).endswith("step one")
    assert crew.ok("conv-a", "artifact_revert", slug="design-note", target_version=1) == (
        "Reverted design-note to v1's content. Live state is now v3 (snapshot of v1).")
    assert crew.ok("conv-a", "artifact_versions", slug="design-note") == "design-note: versions v1, v2, v3"
    assert crew.ok("conv-a", "artifact_list") == "design-note  v3  markdown  [design]  Design note"
    assert crew.ok("conv-a", "artifact_list", kind="html") == "No artifacts match."
    assert crew.ok("conv-a", "artifact_list", q="design") == "design-note  v3  markdown  [design]  Design note"


def test_refusals_carry_stable_codes_and_change_nothing(crew: Crew) -> None:
    crew.ok("conv-a", "artifact_save", name="Note", content="x", slug="note")
    before = store.get("note", OWNER)
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("artifact_save", {"name": "Note", "content": "y", "slug": "note"}, "slug_taken"),
        ("artifact_save", {"name": "W", "content": "<b/>", "kind": "widget"}, "kind_unsupported"),
        ("artifact_save", {"name": "W", "content": "x", "webapp_metadata": {}}, "invalid_arguments"),
        ("artifact_save", {"name": "W", "content": "x", "slug": "../up"}, "invalid_arguments"),
        ("artifact_save", {"name": "W\nX", "content": "x"}, "invalid_name"),
        ("artifact_save", {"name": "W", "content": "x", "tags": ["t"] * 17}, "invalid_arguments"),
        ("artifact_get", {"slug": "note", "version": 7}, "version_not_found"),
        ("artifact_get", {"slug": "nothing-here"}, "artifact_not_found"),
        ("artifact_update", {"slug": "note"}, "invalid_arguments"),
        ("artifact_revert", {"slug": "note", "target_version": 0}, "invalid_arguments"),
        ("artifact_mark_review", {"slug": "note", "comment_id": "c-000000000000"}, "comment_not_found"),
        ("artifact_folder_rename", {"folder": "root", "name": "x"}, "folder_root"),
        ("artifact_move", {"slug": "note", "folder": "Nowhere"}, "folder_not_found"),
    ]
    for tool, args, code in cases:
        text, got = crew("conv-a", tool, **args)
        assert got == code, (tool, args, text)
    assert store.get("note", OWNER) == before and store.folder_list() == []


def test_a_session_cannot_read_or_act_on_another_conversation_trees_artifact_whatever_it_claims(crew: Crew) -> None:
    crew.ok("conv-a", "artifact_save", name="Secret plan", content="only for a", slug="plan")
    crew.callers["forger"] = verified_caller(crew.callers["conv-b"].relay_pid, key=crew.keys["conv-a"])
    for who in ("conv-b", "forger"):  # b's process, claiming nothing or a's key: it is b either way
        assert crew(who, "artifact_list") == ("No artifacts saved.", None)
        for tool, args in (("artifact_get", {}), ("artifact_update", {"content": "b was here"}),
                           ("artifact_get_comments", {}), ("artifact_post_comment", {"text": "hi"}),
                           ("artifact_delete", {}), ("artifact_move", {"folder": "X"}),
                           ("deploy_artifact", {"site_id": "s"})):
            args = {"artifact_slug" if tool == "deploy_artifact" else "slug": "plan", **args}
            assert crew(who, tool, **args) == ("no artifact plan", "artifact_not_found"), (who, tool)
    meta, content = store.get("plan", OWNER)
    assert (meta["version"], content, store.comments("plan", OWNER)) == (1, "only for a", [])


def test_the_owner_sees_all_and_shares_and_a_shared_artifact_is_every_sessions_but_not_theirs_to_delete(
        crew: Crew) -> None:
    crew.ok("conv-a", "artifact_save", name="A note", content="a", slug="a-note")
    crew.ok("person", "artifact_save", name="Brief", content="for everyone", slug="brief")
    assert store.get("brief", OWNER)[0]["source"] == "manual"  # an MCP client of the owner's, not the CLI
    assert crew.ok("person", "artifact_list").count("\n") == 1
    assert crew("conv-b", "artifact_get", slug="brief")[1] == "artifact_not_found"
    store.update("brief", OWNER, shared=True)
    assert crew.ok("conv-b", "artifact_get", slug="brief").endswith("for everyone")
    assert crew.ok("conv-b", "artifact_update", slug="brief", content="revised by b").endswith("version=2")
    assert crew("conv-b", "artifact_delete", slug="brief")[1] == "owner_only"
    assert crew.ok("person", "artifact_delete", slug="a-note") == "Deleted artifact: a-note"


def test_a_caller_that_is_neither_a_session_nor_the_person_is_refused(crew: Crew,
                                                                       process_tree: Callable[[], ProcessTree]) -> None:
    unverified = verified_caller(os.getpid())
    unverified = type(unverified)(**{**vars(unverified), "peer_verified": False})
    crew.callers["unverified"] = unverified
    hosts = SessionRegistry(host=processes.ref(os.getpid()))  # this process stands for the host
    crew.server.registry = hosts
    crew.callers["host-child"] = verified_caller(process_tree().child)
    for who in ("unverified", "host-child"):
        text, code = crew(who, "artifact_save", name="x", content="y")
        assert code == "caller_unverified" and "could not be verified" in text
    assert store.listing(OWNER) == []


def test_a_sub_agent_shares_its_parents_tree_and_records_itself_as_a_subagent(crew: Crew,
                                                                             plugin_manager: Any) -> None:
    register_plugin(plugin_manager, "conversations-stand-in", conversation_ancestry=lambda conversation_id: {
        "conv-child": ["conv-a"]}.get(conversation_id, []))
    crew.bind("conv-child")
    crew.ok("conv-a", "artifact_save", name="Parent doc", content="p", slug="parent-doc")
    assert crew.ok("conv-child", "artifact_get", slug="parent-doc").endswith("p")
    crew.ok("conv-child", "artifact_save", name="Child doc", content="c", slug="child-doc")
    meta = store.get("child-doc", OWNER)[0]
    assert (meta["source"], meta["conversation"], meta["tree"]) == ("subagent", "conv-child", "conv-a")
    assert "child-doc" in crew.ok("conv-a", "artifact_list")
    assert crew("conv-b", "artifact_get", slug="child-doc")[1] == "artifact_not_found"


def test_the_review_flow_through_the_tools(crew: Crew) -> None:
    crew.ok("conv-a", "artifact_save", name="Report", content="Revenue grew 5%.", slug="report")
    note = store.post_comment("report", OWNER, "source for 5%?", quote="grew 5%")
    assert crew.ok("conv-a", "artifact_get_comments", slug="report") == (
        f'• owner: source for 5%? [open] (id={note["id"]}) parent=- at={note["created_at"]} on "grew 5%"')
    reply = crew.ok("conv-a", "artifact_reply_comment", slug="report", parent_id=note["id"], text="cited Q3 filing")
    assert reply.startswith("Reply posted (id=c-") and reply.endswith(", sync=local_only)")
    crew.ok("conv-a", "artifact_update", slug="report", content="Revenue rose (Q3 filing).")
    assert crew("conv-a", "artifact_delete_comment", slug="report", comment_id=note["id"], reason="done")[1] == (
        "comment_not_applied")
    assert crew.ok("conv-a", "artifact_mark_review", slug="report", comment_id=note["id"]) == (
        f"Comment {note['id']} advanced to REVIEW status.")
    lines = crew.ok("conv-a", "artifact_get_comments", slug="report").splitlines()
    assert lines[0].startswith("• owner: source for 5%? [review]") and lines[0].endswith(
        '"grew 5%" (orphaned: the content no longer contains it)')
    assert lines[1].startswith("  ↳ [agent] conversation:conv-a: cited Q3 filing [open]")
    posted = crew.ok("conv-a", "artifact_post_comment", slug="report", text="ready for another look")
    assert posted.startswith("Comment posted (id=c-")
    assert crew.ok("conv-a", "artifact_delete_comment", slug="report", comment_id=note["id"],
                   reason="applied in v2") == f"Comment {note['id']} deleted (reason recorded in activity feed)."
    assert [c["body"] for c in store.comments("report", OWNER)] == ["ready for another look"]


def test_content_and_comments_are_redacted_on_the_way_out(crew: Crew) -> None:
    crew.ok("conv-a", "artifact_save", name="Setup", content=f"export GITHUB_TOKEN={TOKEN}\nrun it", slug="setup")
    crew.ok("conv-a", "artifact_post_comment", slug="setup", text=f"the token {TOKEN} leaked")
    shown = crew.ok("conv-a", "artifact_get", slug="setup") + crew.ok("conv-a", "artifact_get_comments", slug="setup")
    assert TOKEN not in shown and shown.count("<redacted>") == 2
    assert TOKEN in store.get("setup", OWNER)[1]  # the owner's file keeps what was saved


def test_folders_through_the_tools(crew: Crew) -> None:
    created = crew.ok("conv-a", "artifact_folder_create", name="Reports")
    assert created.startswith("Created folder `/Reports` (id=") and created.endswith(").")
    crew.ok("conv-a", "artifact_save", name="Q3", content="q", slug="q3", folder="Reports/2026")
    listed = crew.ok("conv-b", "artifact_folder_list").splitlines()
    assert [line.split("  ", 1)[1] for line in listed] == ["/Reports  (0 items)", "/Reports/2026  (1 item)"]
    assert crew.ok("conv-a", "artifact_folder_rename", folder="Reports", name="Reviews").startswith(
        "Renamed folder to `/Reviews` (id=")
    assert crew("conv-b", "artifact_folder_rename", folder="Reviews", name="Mine")[1] == "owner_only"
    assert crew("conv-a", "artifact_folder_move", folder="Reviews", new_parent="Reviews/2026")[1] == "folder_cycle"
    assert crew.ok("conv-a", "artifact_folder_move", folder="Reviews/2026").startswith("Moved folder to `/2026`")
    assert crew.ok("conv-a", "artifact_move", slug="q3") == "Moved q3 to the library root (unfiled)."
    assert crew.ok("conv-a", "artifact_move", slug="q3", folder="Reviews").startswith("Moved q3 to folder ")
    crew.ok("conv-a", "artifact_save", name="Loose", content="l", slug="loose")
    assert crew.ok("conv-a", "artifact_list", folder="Reviews") == "q3  v1  markdown  []  Q3"
    assert crew("conv-a", "artifact_list", folder="Nowhere")[1] == "folder_not_found"
    assert crew.ok("conv-a", "artifact_folder_delete", folder="Reviews") == (
        "Deleted the folder; its subfolders and 1 artifact moved up to its parent.")
    assert crew.ok("conv-a", "artifact_folder_delete", folder="2026", delete_contents=True) == (
        "Deleted 1 folder and 0 artifacts.")
    assert crew.ok("conv-a", "artifact_folder_list") == "No folders."


def test_a_long_artifact_is_shown_up_to_the_cap_cut_where_no_piece_of_a_secret_is_left(crew: Crew) -> None:
    from kirocrew_core.artifacts.tools import SHOWN_MAX_CHARS

    head = "word " * ((SHOWN_MAX_CHARS - 10) // 5)
    crew.ok("conv-a", "artifact_save", name="Long", content=head + TOKEN + " tail " * 5000, slug="long")
    shown = crew.ok("conv-a", "artifact_get", slug="long")
    assert TOKEN[:8] not in shown and shown.endswith(
        f"…[content cut at {len(head) - 1} of {len(head) + len(TOKEN) + 30000} characters: a result holds at most "
        f"{SHOWN_MAX_CHARS}]")
