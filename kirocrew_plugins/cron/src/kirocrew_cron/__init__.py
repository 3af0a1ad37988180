"""kirocrew-cron: scheduled Kiro work.

Jobs live in the host (one SQLite store in the crew state); the host's scheduler fires them
as runs of a conversation (or, for a ``command`` job, a command under the job's authority).
Sessions manage their own jobs through the ``kirocrew-cron`` MCP server; the owner through
``kirocrew cron …`` and the Cron page. See ``docs/cron.md``.
"""
