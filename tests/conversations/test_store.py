"""The conversations database through its typed API, on real SQLite files."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kirocrew_core import proc
from kirocrew_core.errors import KirocrewError

from kirocrew_conversations import migrations, state_paths
from kirocrew_conversations.errors import CATALOGUE
from kirocrew_conversations.store import (
    MAX_REPLY_BYTES,
    Event,
    ImageInput,
    Settings,
    Store,
    SummaryQuery,
    Workspace,
    open_state,
)

SHARED = Workspace("shared", "/work/project", "ws_1234")


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "conv-state"
    monkeypatch.setenv(state_paths.STATE_DIR_ENV, str(directory))
    return directory


@pytest.fixture
def store(state_dir: Path):
    state = open_state()
    yield state.store
    state.close()


@contextlib.contextmanager
def _raw(path: Path) -> Iterator[sqlite3.Connection]:
    """A plain connection beside the store's, closed on exit (sqlite3's own ``with`` only commits)."""
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    try:
        with conn:
            yield conn
    finally:
        conn.close()


def _code(excinfo: pytest.ExceptionInfo[KirocrewError]) -> str:
    assert excinfo.value.code in CATALOGUE
    return excinfo.value.code


def test_the_database_is_owner_only_in_an_owner_only_dir_with_wal(store: Store, state_dir: Path) -> None:
    conv = store.create_conversation(name="a", workspace=SHARED)
    store.enqueue_run(conv.id, "x")
    assert state_dir.stat().st_mode & 0o777 == 0o700
    assert store.path == state_dir / "orchestrator-v1.sqlite"
    for name in ("orchestrator-v1.sqlite", "orchestrator-v1.sqlite-wal", "orchestrator-v1.sqlite-shm"):
        assert (state_dir / name).stat().st_mode & 0o777 == 0o600, name
    with _raw(store.path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_loose_existing_database_file_is_tightened(state_dir: Path) -> None:
    state_paths.ensure_state_dir()
    db = state_paths.database_file()
    db.touch(mode=0o644)
    os.chmod(db, 0o644)
    Store.open(db).close()
    assert db.stat().st_mode & 0o777 == 0o600


def test_migrations_build_an_empty_database_and_reopening_changes_nothing(state_dir: Path) -> None:
    state_paths.ensure_state_dir()
    db = state_paths.database_file()
    store = Store.open(db)
    conv = store.create_conversation(name="keep", workspace=SHARED)
    store.close()
    store = Store.open(db)
    try:
        assert store.get_conversation(conv.id).name == "keep"
    finally:
        store.close()
    with _raw(db) as raw:
        versions = [r[0] for r in raw.execute("SELECT version FROM schema_version ORDER BY version")]
    assert versions == list(range(1, migrations.LATEST_VERSION + 1))


def test_a_database_from_a_newer_version_is_refused_and_left_alone(state_dir: Path) -> None:
    state_paths.ensure_state_dir()
    db = state_paths.database_file()
    Store.open(db).close()
    with _raw(db) as raw:
        raw.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, 'later')",
                    (migrations.LATEST_VERSION + 1,))
    with pytest.raises(KirocrewError) as refused:
        Store.open(db)
    assert _code(refused) == "database_too_new"
    with _raw(db) as raw:
        assert raw.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == migrations.LATEST_VERSION + 1


def test_deleting_an_archived_conversation_cascades_through_foreign_keys(store: Store) -> None:
    conv = store.create_conversation(name="gone", workspace=SHARED)
    run = store.enqueue_run(conv.id, "x")
    store.transition_run(run.id, "cancelled")
    store.archive_conversation(conv.id)
    with pytest.raises(KirocrewError) as wrong_name:
        store.delete_conversation(conv.id, confirm_name="Gone")
    assert _code(wrong_name) == "confirmation_mismatch"
    store.delete_conversation(conv.id, confirm_name="gone")
    with _raw(store.path) as raw:
        for table in ("runs", "prompts", "events"):
            assert raw.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == 0, table
        raw.execute("PRAGMA foreign_keys = ON")
        with pytest.raises(sqlite3.IntegrityError):
            raw.execute("INSERT INTO events (conversation_id, kind, payload_json, created_at)"
                        " VALUES ('conv_nope', 'x', '{}', 'now')")


def test_an_active_conversation_cannot_be_archived_or_deleted(store: Store) -> None:
    conv = store.create_conversation(name="busy", workspace=SHARED)
    store.enqueue_run(conv.id, "x")
    with pytest.raises(KirocrewError) as busy:
        store.archive_conversation(conv.id)
    assert _code(busy) == "conversation_busy"
    with pytest.raises(KirocrewError) as not_archived:
        store.delete_conversation(conv.id, confirm_name="busy")
    assert _code(not_archived) == "conversation_not_archived"


def test_runs_start_in_fifo_order_one_at_a_time(store: Store) -> None:
    conv = store.create_conversation(name="fifo", workspace=SHARED)
    first, second, third = (store.enqueue_run(conv.id, f"m{i}") for i in range(3))
    assert [first.seq, second.seq, third.seq] == [1, 2, 3]
    assert store.get_conversation(conv.id).state == "active"
    queued = store.next_queued_run(conv.id)
    assert queued is not None and queued.id == first.id
    with pytest.raises(KirocrewError) as jumped:
        store.transition_run(second.id, "running")
    assert _code(jumped) == "not_next_in_queue"
    store.transition_run(first.id, "running")
    assert store.next_queued_run(conv.id) is None  # serialized: nothing starts beside a running run
    store.transition_run(first.id, "completed")
    queued = store.next_queued_run(conv.id)
    assert queued is not None and queued.id == second.id
    store.transition_run(second.id, "running")
    store.transition_run(second.id, "failed", error_code="kiro_crashed")
    store.transition_run(third.id, "running")
    store.transition_run(third.id, "completed")
    assert store.get_conversation(conv.id).state == "idle"
    assert store.get_run(second.id).error_code == "kiro_crashed"


def test_ids_are_opaque_and_prefixed(store: Store) -> None:
    conv = store.create_conversation(name="ids", workspace=SHARED)
    runs = [store.enqueue_run(conv.id, "m").id for _ in range(3)]
    assert re.fullmatch(r"conv_[0-9a-f]{24}", conv.id)
    assert all(re.fullmatch(r"run_[0-9a-f]{24}", r) for r in runs) and len(set(runs)) == 3
    # Random, not sequential: consecutive runs share no meaningful prefix.
    assert len(os.path.commonprefix(runs)) < len("run_") + 6


@pytest.mark.parametrize(("path", "target"), [
    ((), "completed"),
    (("running", "completed"), "running"),
    (("cancelled",), "queued"),
    (("running", "timed_out"), "needs_attention"),
    (("running",), "queued"),
])
def test_illegal_transitions_are_refused_and_change_nothing(store: Store, path: tuple[str, ...], target: str) -> None:
    conv = store.create_conversation(name="sm", workspace=SHARED)
    run = store.enqueue_run(conv.id, "m")
    for status in path:
        store.transition_run(run.id, status)
    before = store.get_run(run.id)
    with pytest.raises(KirocrewError) as refused:
        store.transition_run(run.id, target)
    assert _code(refused) == "illegal_transition"
    assert store.get_run(run.id) == before


def test_attention_goes_back_to_running_and_ending_cancels_pending_permissions(store: Store) -> None:
    conv = store.create_conversation(name="perm", workspace=SHARED)
    run = store.enqueue_run(conv.id, "m")
    store.transition_run(run.id, "running")
    request = store.add_permission_request(run.id, ["allow_once", "reject_once"], tool_name="shell")
    store.transition_run(run.id, "needs_attention")
    store.transition_run(run.id, "running")
    store.transition_run(run.id, "cancelled")
    (after,) = store.permission_requests(run.id)
    assert after.id == request.id and after.id.startswith("perm_")
    assert after.state == "cancelled" and after.options == ("allow_once", "reject_once")


def test_each_run_records_its_resolved_settings_forever(store: Store) -> None:
    conv = store.create_conversation(name="cfg", workspace=SHARED, model="m-1", effort="low", mode="ask")
    first = store.enqueue_run(conv.id, "a", settings=Settings(effort="high"))
    with pytest.raises(KirocrewError) as busy:
        store.update_defaults(conv.id, Settings(model="m-2"))
    assert _code(busy) == "conversation_busy"
    store.transition_run(first.id, "running")
    store.transition_run(first.id, "completed")
    store.update_defaults(conv.id, Settings(model="m-2"))
    second = store.enqueue_run(conv.id, "b")
    first = store.get_run(first.id)
    assert (first.model, first.effort, first.mode, first.authority) == ("m-1", "high", "ask", "unrestricted")
    assert (second.model, second.effort) == ("m-2", "low")


def test_a_long_reply_keeps_256_kib_with_truncation_metadata(store: Store) -> None:
    conv = store.create_conversation(name="big", workspace=SHARED)
    run = store.enqueue_run(conv.id, "m")
    store.transition_run(run.id, "running")
    text = "é" * (MAX_REPLY_BYTES // 2) + "tail"  # 2-byte chars: the cut must not split one
    store.record_reply(run.id, text)
    done = store.transition_run(run.id, "completed")
    assert done.reply_truncated is True
    assert done.reply_total_bytes == len(text.encode())
    assert done.reply_text is not None
    kept = done.reply_text.encode()
    assert len(kept) <= MAX_REPLY_BYTES and text.startswith(done.reply_text)
    with pytest.raises(KirocrewError) as final:
        store.record_reply(run.id, "other")
    assert _code(final) == "illegal_transition"
    assert store.get_run(run.id) == done  # the result is idempotent


def test_a_short_reply_is_kept_whole(store: Store) -> None:
    conv = store.create_conversation(name="small", workspace=SHARED)
    run = store.enqueue_run(conv.id, "m")
    store.transition_run(run.id, "running")
    stored = store.record_reply(run.id, "done ✓")
    assert (stored.reply_text, stored.reply_truncated, stored.reply_total_bytes) == ("done ✓", False, 8)


def test_delivery_erases_the_prompt_text_and_image_bytes_from_the_file(store: Store, state_dir: Path) -> None:
    secret, pixels = "SECRET-PROMPT-7f3a9c", b"PIXELS-e81b22" * 100
    conv = store.create_conversation(name="erase", workspace=SHARED)
    run = store.enqueue_run(conv.id, secret, images=[ImageInput("image/png", len(pixels), pixels)])
    prompt = store.read_prompt(run.id)
    assert prompt.text == secret and prompt.images[0].data == pixels
    store.transition_run(run.id, "running")
    store.mark_delivered(run.id)
    with pytest.raises(KirocrewError) as gone:
        store.read_prompt(run.id)
    assert _code(gone) == "payload_erased"
    with _raw(store.path) as raw:
        row = raw.execute("SELECT text, erased_at, erase_reason FROM prompts WHERE run_id = ?", (run.id,)).fetchone()
        assert row["text"] is None and row["erased_at"] and row["erase_reason"] == "delivered"
        assert raw.execute("SELECT data FROM prompt_images WHERE run_id = ?", (run.id,)).fetchone()[0] is None
    # Still open: the bytes must be gone from the live files, not only after a clean shutdown.
    on_disk = b"".join(p.read_bytes() for p in state_dir.iterdir() if p.name.startswith("orchestrator"))
    assert secret.encode() not in on_disk and b"PIXELS-e81b22" not in on_disk


def test_a_run_that_ends_before_delivery_loses_its_prompt(store: Store) -> None:
    conv = store.create_conversation(name="drop", workspace=SHARED)
    run = store.enqueue_run(conv.id, "never sent", images=[ImageInput("image/png", 3, b"abc")])
    store.transition_run(run.id, "cancelled")
    with _raw(store.path) as raw:
        row = raw.execute("SELECT text, erase_reason FROM prompts WHERE run_id = ?", (run.id,)).fetchone()
        assert row["text"] is None and row["erase_reason"] == "run_cancelled"
        assert raw.execute("SELECT data FROM prompt_images WHERE run_id = ?", (run.id,)).fetchone()[0] is None


def test_events_page_by_a_monotonic_cursor(store: Store) -> None:
    conv = store.create_conversation(name="ev", workspace=SHARED)
    run = store.enqueue_run(conv.id, "m")
    for i in range(5):
        store.append_event(conv.id, run.id, "tool", {"name": "read", "i": i})
    seen: list[Event] = []
    cursor = 0
    while True:
        page = store.list_events(run.id, after=cursor, limit=2)
        if not page.events:
            break
        assert all(e.cursor > cursor for e in page.events)
        seen.extend(page.events)
        cursor = page.next_cursor
    assert [e.kind for e in seen] == ["run_queued"] + ["tool"] * 5
    assert [e.payload.get("i") for e in seen[1:]] == [0, 1, 2, 3, 4]
    assert store.list_events(run.id, after=cursor).next_cursor == cursor
    with pytest.raises(KirocrewError) as bad:
        store.list_events(run.id, after=-1)
    assert _code(bad) == "bad_cursor"


def test_threads_enqueueing_at_once_get_distinct_fifo_sequence_numbers(store: Store) -> None:
    conv = store.create_conversation(name="threads", workspace=SHARED)
    seqs: list[int] = []

    def worker() -> None:
        for _ in range(10):
            seqs.append(store.enqueue_run(conv.id, "m").seq)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seqs) == list(range(1, 41))


_WRITER = """
import json, sys
from kirocrew_conversations.store import Workspace, open_state
store = open_state().store
ws = Workspace("shared", "/w", "fp")
a = store.create_conversation(name="a", workspace=ws)
done = store.enqueue_run(a.id, "one"); store.transition_run(done.id, "running")
store.record_reply(done.id, "kept"); store.transition_run(done.id, "completed")
running = store.enqueue_run(a.id, "two"); store.transition_run(running.id, "running")
queued = store.enqueue_run(a.id, "three")
b = store.create_conversation(name="b", workspace=ws)
waiting = store.enqueue_run(b.id, "four"); store.transition_run(waiting.id, "running")
store.add_permission_request(waiting.id, ["allow_once"]); store.transition_run(waiting.id, "needs_attention")
print(json.dumps({"done": done.id, "live": [running.id, queued.id, waiting.id],
                  "convs": [a.id, b.id]}), flush=True)
sys.stdin.read()
"""


def test_a_restart_after_a_hard_kill_marks_unfinished_runs_interrupted(state_dir: Path) -> None:
    writer = proc.spawn([sys.executable, "-c", _WRITER], env=dict(os.environ))
    try:
        assert writer.stdout is not None
        ids = json.loads(writer.stdout.readline())
    finally:
        proc.kill_pids([writer.pid])
        writer.wait(timeout=30)
        proc.terminate(writer)
    state = open_state()
    try:
        store = state.store
        assert sorted(state.interrupted) == sorted(ids["live"])
        for run_id in ids["live"]:
            run = store.get_run(run_id)
            assert run.status == "interrupted" and run.error_code == "server_restarted" and run.ended_at
            with pytest.raises(KirocrewError):
                store.read_prompt(run_id)
        done = store.get_run(ids["done"])
        assert (done.status, done.reply_text) == ("completed", "kept")
        assert [store.get_conversation(c).state for c in ids["convs"]] == ["idle", "idle"]
        assert store.permission_requests(ids["live"][2])[0].state == "cancelled"
    finally:
        state.close()
    again = open_state()  # recovery is idempotent: nothing is left to interrupt
    try:
        assert again.interrupted == []
    finally:
        again.close()


def test_a_version_2_database_migrates_keeping_every_row_and_accepts_needs_attention_expired(
        state_dir: Path) -> None:
    state_paths.ensure_state_dir()
    db = state_paths.database_file()
    with _raw(db) as raw:  # a database as the previous release left it
        raw.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)")
        for version, statements in enumerate(migrations.MIGRATIONS[:2], start=1):
            for statement in statements:
                raw.execute(statement)
            raw.execute("INSERT INTO schema_version VALUES (?, 'then')", (version,))
        raw.execute("INSERT INTO conversations (id, name, state, authority, workspace_strategy, workspace_path,"
                    " workspace_fingerprint, acp_session_id, created_at, updated_at) VALUES ('conv_a', 'a',"
                    " 'active', 'unrestricted', 'shared', '/w', 'ws_1', 'sess-1', 't', 't')")
        raw.execute("INSERT INTO runs (id, conversation_id, seq, status, authority, workspace_strategy, created_at,"
                    " updated_at) VALUES ('run_a', 'conv_a', 1, 'needs_attention', 'unrestricted', 'shared', 't', 't')")
        raw.execute("INSERT INTO prompts (run_id, text) VALUES ('run_a', 'kept prompt')")
        raw.execute("INSERT INTO events (conversation_id, run_id, kind, payload_json, created_at)"
                    " VALUES ('conv_a', 'run_a', 'run_queued', '{}', 't')")
    store = Store.open(db)
    try:
        assert store.read_prompt("run_a").text == "kept prompt", "the rebuilt runs table cascaded nothing"
        assert len(store.list_events("run_a").events) == 1
        assert store.session_ids("conv_a") == ["sess-1"]
        assert store.get_conversation("conv_a").allowed_commands == ()
        run = store.transition_run("run_a", "needs_attention_expired", error_code="attention_deadline_exceeded")
        assert run.terminal and run.status == "needs_attention_expired"
    finally:
        store.close()
    with _raw(db) as raw:
        assert raw.execute("PRAGMA foreign_key_check").fetchall() == []
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_retiring_a_conversation_is_refused_while_runs_are_unfinished_and_blocks_new_ones(store: Store) -> None:
    conv = store.create_conversation(name="wt", workspace=SHARED)
    run = store.enqueue_run(conv.id, "x")
    with pytest.raises(KirocrewError) as busy:
        store.begin_retiring(conv.id)
    assert _code(busy) == "worktree_active"
    store.transition_run(run.id, "cancelled")
    store.begin_retiring(conv.id)
    with pytest.raises(KirocrewError) as blocked:
        store.enqueue_run(conv.id, "y")
    assert _code(blocked) == "conversation_retiring"
    with pytest.raises(KirocrewError) as twice:
        store.begin_retiring(conv.id)
    assert _code(twice) == "conversation_retiring"
    store.end_retiring(conv.id)
    assert store.enqueue_run(conv.id, "z").status == "queued"


def test_every_run_status_of_the_vocabulary_is_in_the_state_machine_and_the_database_check() -> None:
    from kirocrew_conversations import store as store_module
    from kirocrew_conversations.vocabulary import RUN_STATUSES, TERMINAL_RUN_STATUSES

    assert set(store_module.ALLOWED_TRANSITIONS) == set(RUN_STATUSES)
    assert {s for s, nexts in store_module.ALLOWED_TRANSITIONS.items() if not nexts} == set(TERMINAL_RUN_STATUSES)
    conn = sqlite3.connect(":memory:")
    conn.execute("PRAGMA foreign_keys = ON")
    migrations.migrate(conn)
    check = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'runs'").fetchone()[0]
    found = re.search(r"CHECK \(status IN \(([^)]*)\)\)", check)
    assert found is not None, check
    allowed = found.group(1)
    assert tuple(re.findall(r"'([a-z_]+)'", allowed)) == RUN_STATUSES, "a new status needs a migration"


def test_a_conversation_descends_from_whoever_created_or_spawned_it_and_from_their_creators(store: Store) -> None:
    root = store.create_conversation(name="root", workspace=SHARED)
    made = store.create_conversation(name="made", workspace=SHARED, created_by=root.id)
    spawned = store.create_conversation(name="spawned", workspace=SHARED, parent_id=made.id, spawn_batch="b1")
    below = store.create_conversation(name="below", workspace=SHARED, created_by=spawned.id)
    other = store.create_conversation(name="other", workspace=SHARED)
    assert made.created_by == root.id and other.created_by is None
    assert [store.descends_from(c.id, root.id) for c in (made, spawned, below)] == [True, True, True]
    assert store.descends_from(below.id, made.id) and not store.descends_from(made.id, below.id)
    assert not store.descends_from(root.id, root.id), "a conversation is not below itself"
    assert not store.descends_from(other.id, root.id) and not store.descends_from("conv_nowhere", root.id)
    listed, counts = store.summaries(SummaryQuery(within=root.id, limit=50))
    assert sorted(s.conversation.name for s in listed) == ["below", "made", "spawned"]
    assert counts["idle"] == 3
    everything, _ = store.summaries(SummaryQuery(limit=50))
    assert len(everything) == 5


def test_the_ancestry_hook_reads_who_spawned_or_created_a_conversation_nearest_first(store: Store) -> None:
    """kirocrew-core's artifacts scope a session by the topmost conversation above it (its tree)."""
    from kirocrew_conversations.plugin import conversation_ancestry

    root = store.create_conversation(name="root", workspace=SHARED)
    made = store.create_conversation(name="made", workspace=SHARED, created_by=root.id)
    spawned = store.create_conversation(name="spawned", workspace=SHARED, parent_id=made.id, spawn_batch="b1")
    assert conversation_ancestry(spawned.id) == [made.id, root.id]
    assert conversation_ancestry(root.id) == [] and conversation_ancestry("conv_nowhere") == []


def test_a_creator_that_no_longer_exists_leaves_the_conversation_the_persons(store: Store) -> None:
    made = store.create_conversation(name="orphan", workspace=SHARED, created_by="conv_gone")
    assert made.created_by is None


def test_a_version_5_database_migrates_and_its_conversations_are_the_persons(state_dir: Path) -> None:
    state_paths.ensure_state_dir()
    db = state_paths.database_file()
    with _raw(db) as raw:  # a database as the previous release left it
        raw.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)")
        for version, statements in enumerate(migrations.MIGRATIONS[:5], start=1):
            for statement in statements:
                raw.execute(statement)
            raw.execute("INSERT INTO schema_version VALUES (?, 'then')", (version,))
        for cid, parent in (("conv_a", None), ("conv_b", "conv_a")):
            raw.execute("INSERT INTO conversations (id, name, state, authority, workspace_strategy, workspace_path,"
                        " workspace_fingerprint, parent_id, spawn_batch, created_at, updated_at) VALUES (?, ?,"
                        " 'idle', 'unrestricted', 'shared', '/w', 'ws_1', ?, ?, 't', 't')",
                        (cid, cid, parent, "b" if parent else None))
    store = Store.open(db)
    try:
        assert [store.get_conversation(cid).created_by for cid in ("conv_a", "conv_b")] == [None, None]
        assert store.descends_from("conv_b", "conv_a"), "a sub-agent stays in its parent's tree"
    finally:
        store.close()
    with _raw(db) as raw:
        assert raw.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == migrations.LATEST_VERSION


def test_a_version_6_worktree_keeps_its_base_ref_and_says_its_base_commit_is_unknown(state_dir: Path) -> None:
    from kirocrew_conversations.views import workspace_identity

    state_paths.ensure_state_dir()
    db = state_paths.database_file()
    with _raw(db) as raw:  # a database as the release before base commits were kept left it
        raw.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)")
        for version, statements in enumerate(migrations.MIGRATIONS[:6], start=1):
            for statement in statements:
                raw.execute(statement)
            raw.execute("INSERT INTO schema_version VALUES (?, 'then')", (version,))
        raw.execute("INSERT INTO conversations (id, name, state, authority, workspace_strategy, workspace_path,"
                    " workspace_fingerprint, worktree_path, worktree_branch, worktree_base_ref, created_at,"
                    " updated_at) VALUES ('conv_w', 'w', 'idle', 'unrestricted', 'worktree', '/repo', 'ws_1',"
                    " '/state/worktrees/w-1', 'kiro/w-1', 'release', 't', 't')")
    store = Store.open(db)
    try:
        ws = store.get_conversation("conv_w").workspace
        assert (ws.worktree_base_ref, ws.worktree_base_commit) == ("release", None)
        shown = workspace_identity(store.get_conversation("conv_w"))
        assert (shown["baseRef"], shown["baseCommit"]) == ("release", None)
    finally:
        store.close()
    with _raw(db) as raw:
        assert raw.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == migrations.LATEST_VERSION == 7
