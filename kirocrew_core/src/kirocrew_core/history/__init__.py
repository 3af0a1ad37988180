"""History: every past session, searchable.

:mod:`~kirocrew_core.history.kiro_stores` reads kiro-cli's own session stores (read only:
the 2.x flat files, the V3 session folders, the TUI's SQLite database);
:mod:`~kirocrew_core.history.index` keeps the SQLite FTS5 index over them and over the
plugins' ``history_sources()`` (kirocrew-conversations' conversations) and searches it;
:mod:`~kirocrew_core.history.ingest` updates it incrementally;
:mod:`~kirocrew_core.history.watch` tells the host's updates what changed, from file-change notifications;
:mod:`~kirocrew_core.history.text` makes snippets, dates and redacted views;
:mod:`~kirocrew_core.history.tools` the ``list_sessions``, ``get_chat_session`` and
``search_chat_history`` tools of ``kirocrew-core``; :mod:`~kirocrew_core.history.cli`
``kirocrew history``; :mod:`~kirocrew_core.history.page` the History page. Registered by the
core builtin plugin :mod:`kirocrew_core.builtin.history`.
"""
