"""The knowledge library: folders and files the owner adds, chunked into an FTS5 index sessions search.

``chunks.py`` splits a text into located chunks, ``files.py`` reads a source's files safely,
``store.py`` keeps the library (SQLite in the crew home) and searches it, ``service.py`` keeps it
current in the host, ``tools.py`` holds ``local_knowledge_search`` / ``knowledge_dedup`` and
``cli.py`` ``kirocrew knowledge``.
"""
