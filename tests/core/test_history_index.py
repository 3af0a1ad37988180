"""The history index over kiro-cli's three stores: what it keeps, how it updates, how it answers.

Real files in the documented forms (kirocrew_testing.kiro_store_files), a real SQLite index, the
tool handlers called as the server calls them (the MCP path end to end: test_history_e2e.py).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core.contributions import HistoryMessage, HistorySession, HistorySource
from kirocrew_core.coretools.contract import CrewSession, Origin, ToolCall, ToolRefused
from kirocrew_core.errors import KirocrewError
from kirocrew_core.history import tools
from kirocrew_core.history.index import KEY_PATTERN, HistoryIndex, Scope
from kirocrew_core.history.text import SNIPPET_MAX

from kirocrew_testing.kiro_store_files import append_flat, write_flat, write_tui, write_v3

WS_A = "/srv/project"
WS_B = "/srv/project-b"  # shares WS_A's text as a prefix: must not be inside it


@pytest.fixture
def stores(isolated_homes: Any, tmp_path: Path) -> dict[str, Any]:
    kiro = isolated_homes.kiro_home
    flat = write_flat(kiro, "0f0e0d0c-1111-2222-3333-444455556666", title="Fix the flaky parser", cwd=WS_A,
                      messages=[("user", "why does the parser drop unicode quotes?"),
                                ("assistant", "The tokenizer splits on quotes before normalising them.")])
    v3 = write_v3(kiro, "sess_abc123", title="", workspace=WS_B,
                  messages=[("user", "plan the release notes for version nine"),
                            ("assistant", "Here is a plan for the release notes.")])
    tui = tmp_path / "data" / "kiro-cli" / "data.sqlite3"
    write_tui(tui, "tui-conv-1", cwd=WS_A + "/sub", messages=[("user", "compare the benchmark figures"),
                                                            ("assistant", "The median went from 30 ms to 12 ms.")])
    index = HistoryIndex(tmp_path / "index" / "index.sqlite3", tui_database=tui, sources=lambda: [])
    return {"index": index, "flat": flat, "v3": v3, "tui": tui, "kiro": kiro}


def titles(index: HistoryIndex, scope: Scope | None = None) -> dict[str, tuple[str, str, int]]:
    rows = index.sessions(scope or Scope.everything(), limit=100)
    return {row.title: (row.source, row.workspace, row.messages) for row in rows}


def test_all_three_forms_are_indexed_with_opaque_keys_and_scoped_by_workspace(stores: dict[str, Any]) -> None:
    index: HistoryIndex = stores["index"]
    first = index.refresh()
    assert (first.sessions_changed, first.messages_added, first.bad_lines, first.problems) == (3, 6, 0, [])
    assert titles(index) == {
        "Fix the flaky parser": ("kiro-cli", WS_A, 2),
        "plan the release notes for version nine": ("kiro-v3", WS_B, 2),  # no title: its first prompt
        "compare the benchmark figures": ("kiro-tui", WS_A + "/sub", 2)}
    rows = index.sessions(Scope.everything(), limit=10)
    for row in rows:
        assert KEY_PATTERN.match(row.key)
        assert "0f0e0d0c" not in row.key and "abc123" not in row.key and "tui-conv" not in row.key
    # the key names the same session in another index on the same secret, never in one with another
    again = HistoryIndex(index.path, tui_database=stores["tui"], sources=lambda: [])
    assert {r.key for r in again.sessions(Scope.everything(), limit=10)} == {r.key for r in rows}
    assert set(titles(index, Scope((WS_A,)))) == {"Fix the flaky parser", "compare the benchmark figures"}
    assert set(titles(index, Scope((WS_B,)))) == {"plan the release notes for version nine"}
    assert titles(index, Scope(("",))) == {}  # no session here lacks a workspace
    assert index.sessions(Scope.everything(), limit=10, source="kiro-cli")[0].resume == (
        "cd /srv/project && kiro-cli chat --resume-id 0f0e0d0c-1111-2222-3333-444455556666")


def test_updates_read_only_what_changed_and_skip_corrupt_lines(stores: dict[str, Any]) -> None:
    index: HistoryIndex = stores["index"]
    flat: Path = stores["flat"]
    index.refresh()
    unchanged = index.refresh()
    assert (unchanged.sessions_changed, unchanged.messages_added) == (0, 0)

    append_flat(flat, "user", "and what about smart quotes in titles?")
    with open(flat, "ab") as fh:
        fh.write(b"{not json\n")
        fh.write(b'{"version":"v1","kind":"Prompt","data":{"content":[{"kind":"text","data":"half a li')
    grown = index.refresh()
    assert (grown.sessions_changed, grown.messages_added, grown.bad_lines) == (1, 1, 1)
    [row] = index.sessions(Scope.everything(), limit=10, source="kiro-cli")
    assert (row.messages, row.bad_lines) == (3, 1)
    assert [m.text for m in index.messages(row.key, limit=1)] == ["and what about smart quotes in titles?"]

    with open(flat, "ab") as fh:  # the half-written line is finished: only now is it indexed
        fh.write(b'ne"}]}}\n')
    finished = index.refresh()
    assert (finished.messages_added, finished.bad_lines) == (1, 0)
    assert index.messages(row.key, limit=1)[0].text == "half a line"

    # rewritten shorter (a repair): read again from the start, the corrupt count with it
    write_flat(stores["kiro"], "0f0e0d0c-1111-2222-3333-444455556666", title="Fix the flaky parser", cwd=WS_A,
               messages=[("user", "only this remains")])
    index.refresh()
    [row] = index.sessions(Scope.everything(), limit=10, source="kiro-cli")
    assert (row.messages, row.bad_lines) == (1, 0)
    assert [m.text for m in index.messages(row.key, limit=10)] == ["only this remains"]

    # TUI: a changed row is re-read, the others are not; a removed store drops its sessions
    write_tui(stores["tui"], "tui-conv-1", cwd=WS_A, messages=[("user", "new question")], updated_ms=1_764_000_200_000)
    tui_update = index.refresh()
    assert (tui_update.sessions_changed, tui_update.messages_added) == (1, 1)
    flat.unlink()
    flat.with_suffix(".json").unlink()
    dropped = index.refresh()
    assert dropped.sessions_dropped == 1 and "Fix the flaky parser" not in titles(index)


def test_hostile_files_are_not_followed_and_long_lines_are_read_in_chunks(
        stores: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from kirocrew_core.history import ingest
    from kirocrew_testing.kiro_store_files import flat_line

    flat_dir = stores["kiro"] / "sessions" / "cli"
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(flat_line("user", "private words from elsewhere"))
    (flat_dir / "linked.jsonl").symlink_to(outside)
    weird = write_flat(stores["kiro"], "a$(id)", title="", cwd="/srv/x y", messages=[("user", "quoted id")])
    (flat_dir / "a$(id).json").unlink()
    (flat_dir / "a$(id).json").symlink_to(tmp_path / "meta-elsewhere.json")
    (tmp_path / "meta-elsewhere.json").write_text('{"title": "stolen", "cwd": "/srv/x y"}')
    monkeypatch.setattr(ingest, "READ_CHUNK", 64)
    monkeypatch.setattr(ingest, "MAX_LINE_BYTES", 200)
    long_one = write_flat(stores["kiro"], "cccccccc-0000-0000-0000-000000000001", title="Chunks", cwd=WS_A,
                          messages=[("user", f"line {n} of a transcript read in small chunks") for n in range(5)])
    with open(long_one, "ab") as fh:
        fh.write(flat_line("assistant", "x" * 1000) + flat_line("assistant", "after the long one"))
    index: HistoryIndex = stores["index"]
    index.refresh()
    rows = {row.title: row for row in index.sessions(Scope.everything(), limit=20)}
    assert "private words from elsewhere" not in {r.title for r in rows.values()} and "stolen" not in rows
    assert rows["quoted id"].workspace == "" and rows["quoted id"].resume == "kiro-cli chat --resume-id 'a$(id)'"
    assert weird.exists()
    chunks = rows["Chunks"]
    assert (chunks.messages, chunks.bad_lines) == (6, 1)
    assert [m.text for m in index.messages(chunks.key, limit=2)] == [
        "after the long one", "line 4 of a transcript read in small chunks"]
    append_flat(long_one, "user", "appended later")
    assert index.refresh().messages_added == 1


def test_search_marks_the_match_after_redaction_and_honours_dates(stores: dict[str, Any],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "tok-9f8e7d6c5b4a39281706"
    monkeypatch.setenv("DEPLOY_API_TOKEN", secret)
    long_text = ("lorem ipsum " * 40) + "the migration needle sits here " + ("dolor sit " * 40)
    write_flat(stores["kiro"], "aaaaaaaa-0000-0000-0000-000000000001", title=f"deploy with {secret}", cwd=WS_A,
               messages=[("user", f"deploy using {secret} please"), ("assistant", long_text)],
               updated="2026-11-20T09:00:00Z")
    index: HistoryIndex = stores["index"]
    index.refresh()
    everything = Scope.everything()

    found = tools.search_text(index, everything, "needle", 10, "", "")
    assert found.startswith("🔎 Chat history matches (snippets only — use get_chat_session to read a full thread):")
    snippet = found.split("\n> ", 1)[1]
    assert "<<<needle>>>" in snippet and snippet.startswith("…") and snippet.endswith("…")
    assert len(snippet) <= SNIPPET_MAX + len("<<<>>>") + 2
    assert secret not in found and "<redacted>" in found  # the title is redacted too

    # a match only a secret held is neither shown nor betrayed
    assert tools.search_text(index, everything, secret, 10, "", "") == (
        "No matching conversations found. Try different keywords.")
    # dates: updated on 2026-11-20; the kiro-cli fixture on 2026-11-01
    assert "needle" in tools.search_text(index, everything, "needle", 10, "2026-11-20T00:00:00+00:00", "")
    assert tools.search_text(index, everything, "needle", 10, "", "2026-11-20T00:00:00+00:00").startswith("No ")
    assert tools.search_text(index, Scope((WS_B,)), "needle", 10, "", "").startswith("No ")
    assert "The <<<tokenizer>>> splits" in tools.search_text(index, everything, "TOKENIZER quotes", 10, "", "")
    # FTS5 syntax in a query is text, never an operator
    assert tools.search_text(index, everything, 'needle" OR "parser', 10, "", "").startswith("No ")


def test_both_search_plans_answer_alike(stores: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A common word walks the sessions newest first; a rare one groups its matches: the same sessions either way."""
    from kirocrew_core.history import index as index_module

    index: HistoryIndex = stores["index"]
    for n in range(6):
        write_flat(stores["kiro"], f"bbbbbbbb-0000-0000-0000-00000000000{n}", title=f"s{n}", cwd=WS_A,
                   messages=[("user", f"the parser question {n}"), ("assistant", "filler"),
                             ("assistant", f"the parser answer {n}" if n % 2 else "nothing")],
                   updated=f"2026-11-1{n}T00:00:00Z")
    index.refresh()
    queries = ["parser", "parser answer", "the", "quotes", "unicode quotes", "nowhere"]
    scopes = [Scope.everything(), Scope((WS_A,)), Scope((WS_B,))]

    def answers() -> list[list[tuple[str, tuple[str, ...]]]]:
        return [[(hit.session.title, hit.texts) for hit in index.search(q, scope, limit=4)]
                for q in queries for scope in scopes]

    grouped = answers()
    monkeypatch.setattr(index_module, "COMMON_WORD_MESSAGES", -1)
    assert answers() == grouped
    assert [title for title, _ in grouped[queries.index("parser answer") * 3]] == ["s5", "s3", "s1"]
    assert grouped[0][0] == ("s5", ("the parser question 5", "the parser answer 5"))


def _call(handler: Any, args: dict[str, Any], session: CrewSession | None, origin: Origin = "session") -> str:
    return str(asyncio.run(handler(args, ToolCall(handler.__name__, session, None, "lenient", origin))))


def _refused(handler: Any, args: dict[str, Any], session: CrewSession | None, origin: Origin = "session") -> str:
    with pytest.raises(KirocrewError) as caught:
        _call(handler, args, session, origin)
    return f"{caught.value.code}: {caught.value.message}"


def test_the_tools_scope_fail_closed_and_never_echo_a_key(stores: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    from kirocrew_core.history import index as index_module

    index: HistoryIndex = stores["index"]
    monkeypatch.setattr(index_module, "shared", lambda: index)
    monkeypatch.setattr(index_module, "index_path", lambda: index.path)
    in_a = CrewSession("kcs1-" + "1" * 32, "conversation", "conv-a", workspace=WS_A)
    in_none = CrewSession("kcs1-" + "2" * 32, "conversation", "conv-n", workspace=None)

    listed = _call(tools.list_sessions, {}, in_a)
    assert listed.startswith("🗂️ Sessions in this workspace (2, newest first):")
    assert "**Fix the flaky parser**" in listed and "release notes" not in listed
    assert "_source=kiro-cli  ·  ~2 msgs  ·  created 2026-11-01 10:00_" in listed
    assert _call(tools.list_sessions, {}, in_none) == "No sessions found in this workspace yet."
    assert _refused(tools.list_sessions, {"all_workspaces": True}, in_a).startswith("scope_denied: ")
    assert _refused(tools.list_sessions, {}, None, "person").startswith("workspace_unknown: ")
    assert _refused(tools.list_sessions, {"all_workspaces": True}, None, "host").startswith("caller_unverified: ")
    assert "(3, newest first)" in _call(tools.list_sessions, {"all_workspaces": True}, None, "person")

    keys = {row.title: row.key for row in index.sessions(Scope.everything(), limit=10)}
    mine = _call(tools.get_chat_session, {"session_key": keys["Fix the flaky parser"], "max_messages": 1}, in_a)
    assert mine.splitlines()[0] == "**Fix the flaky parser**  ·  newest 1 of 2 messages, oldest first"
    assert mine.endswith("**Assistant:** The tokenizer splits on quotes before normalising them.")
    other = keys["plan the release notes for version nine"]
    assert _refused(tools.get_chat_session, {"session_key": other}, in_a) == (
        "scope_denied: Access denied: that conversation belongs to a different workspace.")
    for bad in ("../etc/passwd", "a\\b", "..", "."):
        assert _refused(tools.get_chat_session, {"session_key": bad}, in_a) == "invalid_arguments: Invalid session_key."
    raw = "0f0e0d0c-1111-2222-3333-444455556666"  # kiro's own id is no key
    answer = _refused(tools.get_chat_session, {"session_key": raw}, in_a)
    assert answer.startswith("session_not_found: No conversation found for that session_key (fp:") and raw not in answer
    assert _refused(tools.search_chat_history, {"query": "parser", "after": "2026-02-30"}, in_a) == (
        "invalid_date: Invalid 'after' date — use a real calendar date (YYYY-MM-DD).")
    assert _refused(tools.search_chat_history, {"query": "?!"}, in_a).startswith("invalid_arguments: ")


def test_a_stopped_refresh_keeps_what_it_has_and_the_host_service_builds_the_index(
        stores: dict[str, Any], plugin_manager: Any) -> None:
    import threading
    import time

    from kirocrew_core.history.index import shared
    from kirocrew_core.plugins import collect

    index: HistoryIndex = stores["index"]
    index.refresh()
    stopped = threading.Event()
    stopped.set()
    stores["flat"].unlink()  # gone, but a stopped look cannot know it
    report = index.refresh(stopped)
    assert report.interrupted and report.sessions_dropped == 0
    assert len(index.sessions(Scope.everything(), limit=10)) == 3

    from kirocrew_core.contributions import flatten

    [service] = [c.value for c in flatten(collect(plugin_manager, "host_services")) if c.value.name == "history"]

    async def host_life() -> int:
        await service.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the start did not wait for it: the index fills meanwhile
            if shared().count(Scope.everything()) == 1:  # the V3 session (no TUI database in this home)
                break
            await asyncio.sleep(0.02)
        await service.stop()
        return shared().count(Scope.everything())

    assert asyncio.run(host_life()) == 1


def test_a_plugin_source_is_reindexed_only_when_its_version_changes(isolated_homes: Any, tmp_path: Path) -> None:
    reads: list[str] = []
    version = ["1"]

    def messages() -> list[HistoryMessage]:
        reads.append(version[0])
        return [HistoryMessage("assistant", f"reply number {version[0]}")]

    def sessions() -> list[HistorySession]:
        return [HistorySession("conv_x", "Nightly report", WS_A, "2026-11-03T00:00:00+00:00",
                               "2026-11-03T01:00:00+00:00", version[0], messages)]

    broken = HistorySource("broken", "fails", lambda: (_ for _ in ()).throw(OSError("disk gone")))
    index = HistoryIndex(tmp_path / "i.sqlite3", tui_database=tmp_path / "none.sqlite3",
                         sources=lambda: [HistorySource("kirocrew", "conversations", sessions), broken])
    report = index.refresh()
    assert report.problems == ["history source broken could not be read: disk gone"]
    index.refresh()
    version[0] = "2"
    index.refresh()
    assert reads == ["1", "2"]
    [row] = index.sessions(Scope((WS_A,)), limit=5)
    assert (row.title, row.source, row.messages) == ("Nightly report", "kirocrew", 1)
    assert [m.text for m in index.messages(row.key, limit=5)] == ["reply number 2"]


def test_an_unusable_index_or_key_file_is_refused_untouched(isolated_homes: Any, tmp_path: Path) -> None:
    garbage = tmp_path / "bad" / "index.sqlite3"
    garbage.parent.mkdir()
    garbage.write_bytes(b"this is not a database" * 100)
    with pytest.raises(KirocrewError) as caught:
        HistoryIndex(garbage, sources=lambda: [])
    assert caught.value.code == "history_index_unusable"
    assert garbage.read_bytes() == b"this is not a database" * 100
    keyed = tmp_path / "k" / "index.sqlite3"
    keyed.parent.mkdir()
    (keyed.parent / "key").write_bytes(b"short")
    with pytest.raises(KirocrewError) as caught:
        HistoryIndex(keyed, sources=lambda: [])
    assert caught.value.code == "history_index_unusable" and (keyed.parent / "key").read_bytes() == b"short"
    # damaged after it opened: a read is refused with the code, never an internal error
    damaged = HistoryIndex(tmp_path / "d" / "index.sqlite3", sources=lambda: [])
    for n in range(100):
        write_flat(isolated_homes.kiro_home, f"dddddddd-0000-0000-0000-{n:012d}", title=f"d{n}", cwd=WS_A,
                   messages=[("user", "filler words " * 50)])
    damaged.refresh()
    damaged.close()
    for suffix in ("-wal", "-shm"):
        Path(str(damaged.path) + suffix).unlink(missing_ok=True)
    with open(damaged.path, "r+b") as fh:
        fh.seek(8192)
        fh.write(b"\xff" * 65536)
    reopened = HistoryIndex(damaged.path, sources=lambda: [])  # its schema pages are intact
    with pytest.raises(KirocrewError) as caught:
        reopened.search("filler", Scope.everything(), limit=5)
        reopened.sessions(Scope.everything(), limit=500)
    assert caught.value.code == "history_index_unusable" and "move" in caught.value.message
    fresh = HistoryIndex(tmp_path / "f" / "index.sqlite3", sources=lambda: [])
    assert oct(os.stat(fresh.path).st_mode & 0o777) == "0o600"
    assert oct(os.stat(fresh.path.parent / "key").st_mode & 0o777) == "0o600"
    assert json.dumps(ToolRefused("x", code="y").as_dict()) == '{"error": "x", "code": "y"}'
