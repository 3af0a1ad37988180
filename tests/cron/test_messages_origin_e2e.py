"""send_message(session="origin") from a cron job's run, in a real host: the message names its job and is
injected into the conversation that made the job, as a new turn there (kirocrew-cron answers
``conversation_cron_job()``, kirocrew-conversations ``conversation_deliver()``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from kirocrew_testing.core_sessions import CrewHarness

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cron_e2e import cron_line, eventually


def test_a_jobs_run_injects_its_message_into_the_conversation_that_made_the_job_and_names_the_job(
        cron_crew: CrewHarness, run_async: Any, conversations_rows: Any) -> None:
    from kirocrew_core.messages import store

    send = json.dumps({"text": "Digest ready.", "title": "Digest", "session": "origin"})
    job_script = f"!mcp kirocrew-core send_message {send}\n!result"

    async def main() -> dict[str, Any]:
        async with cron_crew.conversations() as conv:
            made = await cron_crew.delegate(conv, cron_line("cron_add", name="digest", message=job_script, delay=1,
                                                            agent="kirocrew") + "\n!say scheduled", name="maker")
            assert made["status"] == "completed", made
            await eventually("the injected message", lambda: [m for m in store.all_messages()
                                                              if m.outcome == "injected"])
        return made

    made = run_async(main())
    maker = made["conversationId"]
    [(job_id,)] = conversations_rows("SELECT substr(name, 6) FROM conversations WHERE created_by = ? "
                                     "AND name LIKE 'cron-%'", maker)
    [message] = store.all_messages()
    assert message.sender.cron_job == job_id and message.sender.cron_job_name == "digest"
    assert message.sender.target_id != maker  # the job's own run sent it
    replies = run_async(eventually("the injected turn", lambda: [text for (text,) in conversations_rows(
        "SELECT reply_text FROM runs WHERE conversation_id = ? AND status = 'completed' ORDER BY rowid", maker)
        if text and "Digest ready." in text]))
    assert f"cron job {job_id}" in replies[0] and message.id in replies[0]
    # the job's own run ends after the maker's turn may have: wait for it as for the turn
    job_reply = run_async(eventually("the job's run", lambda: conversations_rows(
        "SELECT r.reply_text FROM runs r JOIN conversations c ON c.id = r.conversation_id "
        "WHERE c.name = ? AND r.status = 'completed'", f"cron-{job_id}")))
    assert f"injected into conversation {maker} (which created cron job {job_id})" in job_reply[0][0]
