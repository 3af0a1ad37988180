"""The knowledge library: folders, files, artifacts and lessons the owner adds, in an FTS5 index sessions search.

``chunks.py`` splits a text into located chunks, ``files.py`` reads a source's files safely,
``store.py`` keeps the library (SQLite in the crew home) and searches it, ``service.py`` keeps it
current in the host, ``tools.py`` holds ``local_knowledge_search`` / ``knowledge_dedup`` and
``cli.py`` ``kirocrew knowledge``.
"""
