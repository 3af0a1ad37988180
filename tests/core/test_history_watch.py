"""The history index kept fresh by the host's session watcher: an answer re-reads only what changed.

Real kiro-cli store files (kirocrew_testing.kiro_store_files), a real SQLite index and the real
watcher (watchfiles' native thread). What each refresh did is read from its report (whether it
scanned every session file, how many sessions it looked at), never from how long it took.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import kiro_sessions
from kirocrew_core.history.index import HistoryIndex, Scope

from kirocrew_testing.kiro_store_files import append_flat, write_flat, write_tui, write_v3

WS = "/srv/project"


@pytest.fixture
def watched(isolated_homes: Any, tmp_path: Path) -> Any:
    kiro = isolated_homes.kiro_home
    flat = write_flat(kiro, "0f0e0d0c-1111-2222-3333-444455556666", title="Fix the flaky parser", cwd=WS,
                      messages=[("user", "why does the parser drop unicode quotes?")])
    v3 = write_v3(kiro, "sess_abc123", title="Release notes", workspace=WS,
                  messages=[("user", "plan the release notes for version nine")])
    tui = tmp_path / "data" / "kiro-cli" / "data.sqlite3"
    write_tui(tui, "tui-conv-1", cwd=WS, messages=[("user", "compare the benchmark figures")])
    index = HistoryIndex(tmp_path / "index" / "index.sqlite3", tui_database=tui, sources=lambda: [])
    assert index.watch()
    first = index.refresh()
    assert (first.full_scan, first.why, first.sessions_changed) == (True, "the watcher started", 3)
    yield {"index": index, "kiro": kiro, "flat": flat, "v3": v3, "tui": tui}
    index.close()


def found(index: HistoryIndex, word: str) -> list[str]:
    return [hit.session.title for hit in index.search(word, Scope.everything(), limit=10)]


def test_an_appended_message_is_found_by_the_next_search_reading_only_its_session(watched: dict[str, Any]) -> None:
    index: HistoryIndex = watched["index"]
    quiet = index.refresh()
    assert (quiet.full_scan, quiet.sessions_looked_at, quiet.sessions_changed) == (False, 0, 0)

    append_flat(watched["flat"], "assistant", "the tokenizer splits on zebra quotes")
    report = index.refresh()  # at once: no wait for the notification
    assert (report.full_scan, report.sessions_looked_at, report.messages_added) == (False, 1, 1)
    assert found(index, "zebra") == ["Fix the flaky parser"]

    with open(watched["v3"], "ab") as fh:
        fh.write(b'{"payload": {"type": "assistant", "content": "nine giraffes"}}\n')
    report = index.refresh()
    assert (report.full_scan, report.sessions_looked_at, report.messages_added) == (False, 1, 1)
    assert found(index, "giraffes") == ["Release notes"]

    write_tui(watched["tui"], "tui-conv-2", cwd=WS, messages=[("user", "a walrus in the terminal")])
    report = index.refresh()
    assert (report.full_scan, report.sessions_looked_at, report.messages_added) == (False, 0, 1)
    assert found(index, "walrus") == ["a walrus in the terminal"]


def test_a_session_in_a_v3_workspace_folder_made_after_the_watcher_started_is_found(
        watched: dict[str, Any]) -> None:
    index: HistoryIndex = watched["index"]
    write_v3(watched["kiro"], "sess_new1", title="Brand new workspace", workspace="/srv/elsewhere",
             messages=[("user", "where do the okapis live?")])
    report = index.refresh()
    assert (report.full_scan, report.sessions_looked_at, report.messages_added) == (False, 1, 1)
    assert found(index, "okapis") == ["Brand new workspace"]
    # a file written into the new folder afterwards (the folder is watched now) is found too
    v3_dir = next(p for p in (watched["kiro"] / "sessions").iterdir() if (p / "sess_new1").is_dir())
    with open(v3_dir / "sess_new1" / "messages.jsonl", "ab") as fh:
        fh.write(b'{"payload": {"type": "assistant", "content": "okapis live in the Ituri forest"}}\n')
    assert index.refresh().messages_added == 1
    assert "forest" in " ".join(m.text for m in index.messages(index.sessions(
        Scope(("/srv/elsewhere",)), limit=1)[0].key, limit=5))


def test_a_deleted_session_disappears_without_a_full_scan(watched: dict[str, Any]) -> None:
    index: HistoryIndex = watched["index"]
    flat: Path = watched["flat"]
    flat.unlink()
    flat.with_suffix(".json").unlink()
    report = index.refresh()
    assert (report.full_scan, report.sessions_dropped) == (False, 1)
    assert found(index, "parser") == []
    assert kiro_sessions.remove_session("sess_abc123")  # kirocrew's delete: renamed aside, then removed
    report = index.refresh()
    assert (report.full_scan, report.sessions_dropped) == (False, 1)
    assert found(index, "release") == []
    assert [row.source for row in index.sessions(Scope.everything(), limit=10)] == ["kiro-tui"]


def test_with_the_watcher_stopped_a_full_scan_still_finds_everything(watched: dict[str, Any]) -> None:
    index: HistoryIndex = watched["index"]
    index.unwatch()
    append_flat(watched["flat"], "user", "what about the pelican test?")
    write_flat(watched["kiro"], "aaaabbbb-1111-2222-3333-444455556666", title="Another one", cwd=WS,
               messages=[("user", "a pelican again")])
    report = index.refresh()
    assert (report.full_scan, report.sessions_looked_at, report.messages_added) == (True, 3, 2)
    assert sorted(found(index, "pelican")) == ["Another one", "Fix the flaky parser"]


def test_lost_events_a_replaced_root_or_a_root_made_later_lead_to_a_full_rescan(
        watched: dict[str, Any], tmp_path: Path) -> None:
    index: HistoryIndex = watched["index"]
    assert index.watcher is not None
    index.watcher.lost("the kernel dropped events")  # the watcher's public lost-events signal
    report = index.refresh()
    assert (report.full_scan, report.why, report.sessions_looked_at) == (True, "the kernel dropped events", 2)
    assert not index.refresh().full_scan

    sessions = watched["kiro"] / "sessions"
    sessions.rename(tmp_path / "old-sessions")  # the watched root replaced: nothing under it is watched now
    write_flat(watched["kiro"], "ccccdddd-1111-2222-3333-444455556666", title="After the move", cwd=WS,
               messages=[("user", "a narwhal appears")])
    report = index.refresh()
    assert report.full_scan and report.why == f"{sessions} was created, removed or replaced"
    assert found(index, "narwhal") == ["After the move"] and report.sessions_dropped == 2
    append_flat(sessions / "cli" / "ccccdddd-1111-2222-3333-444455556666.jsonl", "assistant", "narwhal tusks")
    report = index.refresh()  # the new root is watched again
    assert (report.full_scan, report.sessions_looked_at, report.messages_added) == (False, 1, 1)
    shutil.rmtree(sessions)  # removed and made again: the new folder may even get the old one's inode
    write_flat(watched["kiro"], "eeeeffff-1111-2222-3333-444455556666", title="Again", cwd=WS,
               messages=[("user", "a second narwhal")])
    report = index.refresh()
    assert report.full_scan and report.sessions_dropped == 1 and found(index, "narwhal") == ["Again"]
    append_flat(sessions / "cli" / "eeeeffff-1111-2222-3333-444455556666.jsonl", "assistant", "narwhal song")
    report = index.refresh()
    assert (report.full_scan, report.sessions_looked_at, report.messages_added) == (False, 1, 1)

    late_root = tmp_path / "late-kiro" / "sessions"
    later = HistoryIndex(tmp_path / "later" / "index.sqlite3", kiro_root=late_root,
                         tui_database=tmp_path / "no-tui" / "data.sqlite3", sources=lambda: [])
    try:
        assert later.watch()
        assert later.refresh().full_scan
        assert not later.refresh().full_scan
        write_v3(tmp_path / "late-kiro", "sess_late", title="Late root", workspace=WS,
                 messages=[("user", "the root came later with a quokka")])
        report = later.refresh()
        assert report.full_scan and report.why == f"{late_root} was created, removed or replaced"
        assert found(later, "quokka") == ["Late root"]
    finally:
        later.close()


def test_a_full_scan_comes_again_after_its_period_whatever_the_notifications_said(
        watched: dict[str, Any]) -> None:
    index: HistoryIndex = watched["index"]
    assert index.watcher is not None
    assert not index.refresh().full_scan
    index.watcher.full_scan_seconds = 0  # the safety net's period, elapsed at once
    report = index.refresh()
    assert (report.full_scan, report.why, report.sessions_looked_at) == (True, "the periodic full scan", 2)


def test_a_broken_barrier_folder_means_a_full_scan_at_every_answer(watched: dict[str, Any]) -> None:
    index: HistoryIndex = watched["index"]
    assert index.watcher is not None
    barriers = Path(index.watcher.barriers)
    shutil.rmtree(barriers)
    barriers.write_text("not a folder")  # the watcher can neither make its barrier nor restart
    append_flat(watched["flat"], "user", "a lemur in the barrier")
    report = index.refresh()
    assert report.full_scan and "barrier" in report.why  # seen as a replaced root, or when the barrier fails
    assert found(index, "lemur") == ["Fix the flaky parser"]
    again = index.refresh()
    assert (again.full_scan, again.why) == (True, "the watcher could not start")


def _threads() -> int:
    """This process's threads as the OS counts them (the watcher's is native, unseen by ``threading``)."""
    import psutil

    return psutil.Process().num_threads()


def test_the_host_service_watches_while_the_host_runs_and_leaves_no_thread(
        isolated_homes: Any, plugin_manager: Any) -> None:
    from kirocrew_core.contributions import flatten
    from kirocrew_core.history.index import shared
    from kirocrew_core.plugins import collect

    flat = write_flat(isolated_homes.kiro_home, "0f0e0d0c-1111-2222-3333-444455556666", title="Hosted", cwd=WS,
                      messages=[("user", "hello")])
    [service] = [c.value for c in flatten(collect(plugin_manager, "host_services")) if c.value.name == "history"]
    before = _threads()

    async def host_life() -> tuple[bool, int]:
        await service.start()
        deadline = time.monotonic() + 30
        while shared().watcher is None or shared().count(Scope.everything()) == 0:
            assert time.monotonic() < deadline, "the host service never watched nor built the index"
            await asyncio.sleep(0.02)
        append_flat(flat, "assistant", "a hosted capybara")
        report = await asyncio.to_thread(shared().refresh)
        await service.stop()
        return report.full_scan, report.messages_added

    full_scan, added = asyncio.run(host_life())
    assert (full_scan, added) == (False, 1) and shared().watcher is None
    deadline = time.monotonic() + 10
    while _threads() > before:  # the watcher's native thread ends soon after it is closed
        assert time.monotonic() < deadline, f"{_threads() - before} thread(s) left after the host stopped"
        time.sleep(0.02)
