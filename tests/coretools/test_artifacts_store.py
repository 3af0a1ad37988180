"""The artifact library on disk: versions, caps, validation, the review flow, folders and concurrent writers.

Real files under the test's crew home, real inter-process locks, real threads and a real second process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from kirocrew_core import home
from kirocrew_core.artifacts import folders, names, store
from kirocrew_core.artifacts.access import OWNER, Actor
from kirocrew_core.errors import KirocrewError

SESSION_A = Actor(tree="conv-a", conversation="conv-a", session="kcs:aaaa", source="chat")
SESSION_B = Actor(tree="conv-b", conversation="conv-b", session="kcs:bbbb", source="chat")


@pytest.fixture(autouse=True)
def _homes(isolated_homes: Any) -> None:
    """Every test here has its own crew home."""


def _save(name: str = "Weekly report", content: str = "# Report\nall good", actor: Actor = SESSION_A,
          **fields: Any) -> dict[str, Any]:
    return store.save(store.NewArtifact(name, content, fields.pop("kind", "markdown"), **fields), actor).meta


def _code(fn: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(KirocrewError) as caught:
        fn(*args, **kwargs)
    return caught.value.code


def _library() -> list[str]:
    return sorted(p.name for p in home.artifacts_dir().iterdir()) if home.artifacts_dir().exists() else []


def test_a_save_lays_out_meta_content_versions_and_records_who_made_it() -> None:
    meta = _save(tags=("weekly",), description="for the owner")
    folder = home.artifacts_dir() / "weekly-report"
    assert sorted(p.name for p in folder.iterdir()) == ["current.html", "meta.json", "versions"]
    assert (folder / "versions" / "v1.html").read_text() == "# Report\nall good"
    on_disk = json.loads((folder / "meta.json").read_text())
    assert on_disk == meta and list(on_disk) == sorted(on_disk)
    assert (meta["slug"], meta["version"], meta["source"], meta["conversation"], meta["tree"], meta["session"]) == (
        "weekly-report", 1, "chat", "conv-a", "conv-a", "kcs:aaaa")
    assert [e["type"] for e in meta["events"]] == ["created"]
    assert oct(os.stat(folder / "current.html").st_mode & 0o777) == "0o600"


def test_only_import_is_taken_from_a_claimed_source() -> None:
    assert _save("a", claimed_source="import")["source"] == "import"
    assert _save("b", claimed_source="manual")["source"] == "chat"  # the verified caller decides
    assert _save("c", actor=OWNER, claimed_source="cron")["source"] == "manual"


def test_an_explicit_slug_that_is_taken_is_refused_never_renamed_and_the_first_is_untouched() -> None:
    _save(slug="notes", content="first")
    assert _code(_save, slug="notes", content="second") == "slug_taken"
    assert store.get("notes", SESSION_A)[1] == "first" and _library() == ["notes"]
    derived = store.save(store.NewArtifact("Notes", "third", "markdown"), SESSION_A)
    assert derived.meta["slug"].startswith("notes-") and derived.hints[0] == "slug_collided_with=notes"


@pytest.mark.parametrize(("fields", "code"), [
    ({"slug": "../etc"}, "invalid_slug"),
    ({"slug": "Upper"}, "invalid_slug"),
    ({"slug": "-lead"}, "invalid_slug"),
    ({"slug": "a" * 81}, "invalid_slug"),
    ({"kind": "widget"}, "kind_unsupported"),
    ({"kind": "webapp"}, "kind_unsupported"),
    ({"kind": "exe"}, "invalid_kind"),
    ({"kind": "json", "content": "{nope"}, "invalid_content"),
    ({"kind": "image", "content": "<svg/>"}, "invalid_content"),
    ({"content": "nul\x00byte"}, "invalid_content"),
    ({"folder": "/".join(["f"] * 21)}, "folder_too_deep"),
    ({"folder": "a//b"}, "invalid_folder"),
    ({"folder": "a/../b"}, "invalid_folder_name"),
])
def test_bad_input_is_refused_with_a_stable_code_and_nothing_is_written(fields: dict[str, Any], code: str) -> None:
    def attempt() -> None:
        kind = fields.get("kind", "markdown")
        names.check_kind(kind)
        _save(**fields)

    assert _code(attempt) == code
    assert [n for n in _library() if n != "folders.json"] == []
    assert folders.load() == []


@pytest.mark.parametrize(("check", "value", "code"), [
    (names.check_name, "line\nbreak", "invalid_name"),
    (names.check_name, "zero\u200bwidth", "invalid_name"),
    (names.check_name, "x" * 201, "invalid_name"),
    (names.check_name, "   ", "invalid_name"),
    (names.check_tags, ["t"] * 17, "invalid_tags"),
    (names.check_tags, ["x" * 65], "invalid_tags"),
    (names.check_folder_name, "root", "invalid_folder_name"),
    (names.check_comment_id, "../c", "invalid_comment_id"),
])
def test_names_tags_and_ids_are_checked_as_the_reference_gives_them(check: Any, value: Any, code: str) -> None:
    assert _code(check, value) == code


def test_content_of_25_mib_is_kept_and_one_byte_more_is_refused_before_anything_is_written() -> None:
    limit = names.CONTENT_MAX_BYTES
    assert _code(_save, "big", "x" * (limit + 1)) == "content_too_large"
    assert _code(_save, "wide", "é" * (limit // 2 + 1)) == "content_too_large"  # counted in UTF-8 bytes
    assert _library() == []
    meta = _save("exact", "x" * limit)
    assert meta["size"] == limit
    assert _code(store.update, "exact", SESSION_A, content="x" * (limit + 1)) == "content_too_large"
    assert store.get("exact", SESSION_A)[0]["version"] == 1


def test_updates_are_versions_the_newest_50_kept_and_numbers_keep_counting() -> None:
    _save(content="v1")
    for n in range(2, 56):
        store.update("weekly-report", SESSION_A, content=f"v{n}")
    meta, content = store.get("weekly-report", SESSION_A)
    assert (meta["version"], content) == (55, "v55")
    assert meta["versions"] == list(range(6, 56))
    kept = sorted(p.name for p in (home.artifacts_dir() / "weekly-report" / "versions").iterdir())
    assert len(kept) == store.MAX_VERSIONS and "v5.html" not in kept
    assert store.get("weekly-report", SESSION_A, 6)[1] == "v6"
    assert _code(store.get, "weekly-report", SESSION_A, 5) == "version_not_found"


def test_a_revert_is_a_new_version_holding_the_old_content() -> None:
    _save(content="first")
    store.update("weekly-report", SESSION_A, content="second")
    meta = store.revert("weekly-report", SESSION_A, 1)
    assert (meta["version"], store.get("weekly-report", SESSION_A)[1]) == (3, "first")
    assert meta["events"][-1]["type"] == "reverted" and meta["events"][-1]["from_version"] == 1


def _seed(path: Path, key: str | None, items: list[dict[str, Any]]) -> None:
    """Fill a store file up to its cap in one write (posting 500 times only spends the disk's fsyncs)."""
    document: Any = items
    if key:
        document = {**json.loads(path.read_text()), key: items}
    path.write_text(json.dumps(document))


def test_events_keep_the_newest_500() -> None:
    _save()
    meta_file = home.artifacts_dir() / "weekly-report" / "meta.json"
    created = json.loads(meta_file.read_text())["events"]
    _seed(meta_file, "events", created + [{"type": "edited", "at": "x", "by": "owner", "n": n} for n in range(499)])
    store.update("weekly-report", SESSION_A, description="the 501st event")
    events = store.get("weekly-report", SESSION_A)[0]["events"]
    assert len(events) == store.MAX_EVENTS and events[0]["n"] == 0 and events[-1]["type"] == "iterated"


def test_comments_keep_the_newest_500_dropping_the_oldest_whole_thread() -> None:
    _save()
    first = store.post_comment("weekly-report", OWNER, "first thread")
    store.post_comment("weekly-report", SESSION_A, "a reply", parent_id=first["id"])
    comments_file = home.artifacts_dir() / "weekly-report" / "comments.json"
    thread = json.loads(comments_file.read_text())
    _seed(comments_file, None, thread + [{**thread[0], "id": f"c-{n}", "thread_id": f"c-{n}"} for n in range(497)])
    assert len(store.comments("weekly-report", OWNER)) == store.MAX_COMMENTS - 1
    store.post_comment("weekly-report", OWNER, "the 500th")
    assert len(store.comments("weekly-report", OWNER)) == store.MAX_COMMENTS  # at the cap, nothing dropped
    store.post_comment("weekly-report", OWNER, "the 501st")
    found = store.comments("weekly-report", OWNER)
    assert len(found) == store.MAX_COMMENTS - 1 and all(c["thread_id"] != first["id"] for c in found)
    assert found[-1]["body"] == "the 501st"


def test_two_sessions_updating_one_artifact_at_once_all_land_as_versions_in_order(tmp_path: Path) -> None:
    _save(content="start")
    store.update("weekly-report", OWNER, shared=True)  # so a second session (conv-b, in another process) may write
    script = ("from kirocrew_core.artifacts import store\nfrom kirocrew_core.artifacts.access import Actor\n"
              "a = Actor(tree='conv-b', conversation='conv-b')\n"
              "for n in range(15):\n    store.update('weekly-report', a, content=f'process {n}')\n")
    other = subprocess.Popen([sys.executable, "-c", script], env=dict(os.environ))
    threads = [threading.Thread(target=lambda t=t: [store.update("weekly-report", SESSION_A, content=f"thread {t} {n}")
                                                    for n in range(5)]) for t in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert other.wait(timeout=60) == 0
    meta, live = store.get("weekly-report", SESSION_A)
    assert meta["version"] == 1 + 15 + 15 and meta["versions"] == list(range(1, 32))
    contents = [store.get("weekly-report", SESSION_A, v)[1] for v in range(2, 32)]
    assert sorted(contents) == sorted([f"process {n}" for n in range(15)]
                                      + [f"thread {t} {n}" for t in range(3) for n in range(5)])
    assert [c for c in contents if c.startswith("process")] == [f"process {n}" for n in range(15)]  # in order
    assert live == contents[-1]
    assert [e["version"] for e in meta["events"] if e["type"] != "edited"] == list(range(1, 32))
    assert {e["by"] for e in meta["events"] if e["type"] == "iterated"} == {"conversation:conv-a",
                                                                            "conversation:conv-b"}


def test_a_session_sees_its_conversation_tree_and_what_the_owner_shared_and_no_more() -> None:
    _save(slug="mine")
    _save(slug="theirs", actor=SESSION_B)
    assert [m["slug"] for m in store.listing(SESSION_A)] == ["mine"]
    assert sorted(m["slug"] for m in store.listing(OWNER)) == ["mine", "theirs"]
    for attempt in (lambda: store.get("theirs", SESSION_A), lambda: store.update("theirs", SESSION_A, content="x"),
                    lambda: store.delete("theirs", SESSION_A),
                    lambda: store.post_comment("theirs", SESSION_A, "hi")):
        assert _code(attempt) == "artifact_not_found"  # word for word what a slug that does not exist gets
    assert _code(store.update, "theirs", SESSION_B, shared=True) == "owner_only"
    store.update("theirs", OWNER, shared=True)
    assert store.get("theirs", SESSION_A)[1] == "# Report\nall good"
    store.update("theirs", SESSION_A, content="revised by a")
    assert _code(store.delete, "theirs", SESSION_A) == "owner_only"
    assert store.get("theirs", SESSION_B)[0]["version"] == 2


def test_the_review_flow_open_review_resolved_and_who_may_do_what() -> None:
    _save()
    owner_note = store.post_comment("weekly-report", OWNER, "say more about Q3")
    assert owner_note["status"] == "open" and owner_note["author"] == "owner" and not owner_note["is_agent"]
    reply = store.post_comment("weekly-report", SESSION_A, "added a Q3 section", parent_id=owner_note["id"])
    assert reply["is_agent"] and reply["thread_id"] == owner_note["id"]
    assert _code(store.delete_comment, "weekly-report", SESSION_A, owner_note["id"], "done") == "comment_not_applied"
    assert _code(store.resolve_comment, "weekly-report", SESSION_A, owner_note["id"]) == "owner_only"
    assert store.mark_review("weekly-report", SESSION_A, owner_note["id"])["status"] == "review"
    assert store.resolve_comment("weekly-report", OWNER, owner_note["id"])["status"] == "resolved"
    assert _code(store.mark_review, "weekly-report", SESSION_A, owner_note["id"]) == "comment_resolved"
    assert store.comments("weekly-report", SESSION_A, exclude_resolved=True) == [reply]
    second = store.post_comment("weekly-report", OWNER, "fix the title")
    store.post_comment("weekly-report", SESSION_A, "fixed", parent_id=second["id"])
    store.mark_review("weekly-report", SESSION_A, second["id"])
    assert store.delete_comment("weekly-report", SESSION_A, second["id"], "applied in v2") == 2  # with its reply
    assert [c["id"] for c in store.comments("weekly-report", OWNER)] == [owner_note["id"], reply["id"]]
    last = store.get("weekly-report", OWNER)[0]["events"][-1]
    assert (last["type"], last["action"], last["reason"], last["by"]) == ("comment", "deleted", "applied in v2",
                                                                           "conversation:conv-a")
    assert _code(store.delete_comment, "weekly-report", SESSION_A, "c-nope", "x") == "comment_not_found"


def test_an_anchored_comment_is_flagged_orphaned_when_the_content_loses_its_quote_and_cleared_when_it_returns() -> None:
    _save(content="The budget is 10k.")
    anchored = store.post_comment("weekly-report", OWNER, "too low", quote="budget is 10k")
    assert (anchored["anchor_quote"], anchored["anchor_version"], anchored["anchor_orphaned"]) == (
        "budget is 10k", 1, False)
    assert _code(store.post_comment, "weekly-report", OWNER, "x", quote="not there") == "quote_not_found"
    store.update("weekly-report", SESSION_A, content="The budget is 20k.")
    assert store.comments("weekly-report", OWNER)[0]["anchor_orphaned"] is True
    store.revert("weekly-report", SESSION_A, 1)
    assert store.comments("weekly-report", OWNER)[0]["anchor_orphaned"] is False


def test_folders_resolve_like_mkdir_p_and_refuse_cycles_depth_and_other_trees_changes() -> None:
    _save(folder="Reports/2026")
    rows = store.folder_list()
    assert [(path, count) for _, path, count in rows] == [("/Reports", 0), ("/Reports/2026", 1)]
    reports = rows[0][0]["id"]
    assert _code(store.folder_move, "Reports", "Reports/2026", SESSION_A) == "folder_cycle"
    assert _code(store.folder_move, "Reports", "Reports", SESSION_A) == "folder_cycle"
    assert _code(store.folder_rename, "Reports", "Other", SESSION_B) == "owner_only"
    assert _code(store.folder_rename, "root", "Other", OWNER) == "folder_root"
    deep, _ = store.folder_create("d1", None, OWNER)
    parent = deep["id"]
    for n in range(2, 21):
        parent = store.folder_create(f"d{n}", parent, OWNER)[0]["id"]
    assert _code(store.folder_create, "d21", parent, OWNER) == "folder_too_deep"
    assert _code(store.folder_move, "Reports", parent, OWNER) == "folder_too_deep"  # 20 + 2 levels
    assert store.folder_rename(reports, "Reviews", SESSION_A)[1] == "/Reviews"
    assert store.get("weekly-report", SESSION_A)[0]["folder_id"] == rows[1][0]["id"]  # a rename touches no artifact


def test_deleting_a_folder_refiles_its_contents_or_deletes_them_only_when_all_are_the_callers() -> None:
    _save(folder="Reports/2026")
    _save("Theirs", actor=SESSION_B, folder="Reports/2026")
    assert store.folder_delete("Reports/2026", SESSION_A, delete_contents=False) == (1, 2)
    reports = store.folder_list()[0][0]["id"]
    assert {m["folder_id"] for m in store.listing(OWNER)} == {reports}
    assert _code(store.folder_delete, "Reports", SESSION_A, delete_contents=True) == "owner_only"
    assert store.folder_delete("Reports", OWNER, delete_contents=True) == (1, 2)
    assert store.listing(OWNER) == [] and store.folder_list() == []


def test_a_broken_meta_file_is_reported_not_listed_and_left_as_it_was() -> None:
    _save()
    broken = home.artifacts_dir() / "weekly-report" / "meta.json"
    broken.write_text("{not json")
    assert _code(store.get, "weekly-report", OWNER) == "artifact_unreadable"
    assert store.listing(OWNER) == [] and broken.read_text() == "{not json"
