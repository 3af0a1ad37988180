"""The conversations as a history source: names, workspaces and run replies, read from a real store read-only."""

from __future__ import annotations

from pathlib import Path

from kirocrew_core.history.index import HistoryIndex, Scope

from kirocrew_conversations.history_source import conversations, history_source
from kirocrew_conversations.store import Store, Workspace


def test_replies_are_searchable_and_a_conversation_is_reread_only_after_its_runs_change(
        isolated_homes: object, tmp_path: Path) -> None:
    database = tmp_path / "orchestrator.sqlite"
    assert conversations(database) == []  # conversations never ran here
    store = Store.open(database)
    try:
        conv = store.create_conversation(name="release-notes", workspace=Workspace("shared", "/srv/app", "ws_1"))
        first = store.enqueue_run(conv.id, "draft the notes")
        store.transition_run(first.id, "running")
        store.record_reply(first.id, "Drafted: the parser now keeps smart quotes.")
        store.transition_run(first.id, "completed")
        index = HistoryIndex(tmp_path / "index.sqlite3", kiro_root=tmp_path / "none",
                             tui_database=tmp_path / "none.sqlite3", sources=lambda: [history_source(database)])
        assert index.refresh().messages_added == 1
        [row] = index.sessions(Scope(("/srv/app",)), limit=5)
        assert (row.title, row.source, row.messages, row.resume) == ("release-notes", "kirocrew", 1, "")
        assert conv.id not in row.key
        assert index.refresh().sessions_changed == 0  # no run changed: not read again

        second = store.enqueue_run(conv.id, "and the migration guide")
        store.transition_run(second.id, "running")
        store.record_reply(second.id, "Wrote the migration guide.")
        assert index.refresh().messages_added == 2  # its replies, read again whole
        [hit] = index.search("migration guide", Scope.everything(), limit=5)
        assert hit.session.key == row.key and hit.texts == ("Wrote the migration guide.",)
        assert [m.text for m in index.messages(row.key, limit=5, newest_first=False)] == [
            "Drafted: the parser now keeps smart quotes.", "Wrote the migration guide."]
    finally:
        store.close()
