"""ask_question end to end: a conversation's fake kiro-cli asks through the relay and the host; every way to answer.

Each test has its own host (started by the harness's first relay). The run's script calls
``!mcp kirocrew-core ask_question {...}`` and then says ``after``, so the run completes only
once the card is settled; the exchange the consumer recorded is read back from ``kiro_events``.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from kirocrew_testing.core_sessions import CrewHarness, McpClient
from kirocrew_testing.fixtures import kirocrew_argv

from kirocrew_conversations import questions as Q

COLOUR = {"question": "Which colour should the button be?", "header": "DESIGN",
          "options": [{"label": "Blue", "description": "the brand colour"}, {"label": "Green"}]}


def asking(*questions: dict[str, Any], **extra: Any) -> str:
    return f"!mcp kirocrew-core ask_question {json.dumps({'questions': list(questions), **extra})}\n!say after"


async def attention_of(crew: CrewHarness, conv: McpClient, started: dict[str, Any]) -> dict[str, Any]:
    """kiro_wait until the run needs attention (it wakes on the card); the run's entry."""
    target = {"conversationId": started["conversationId"], "runId": started["runId"]}
    for _ in range(20):
        waited = await conv.structured("kiro_wait", targets=[target], mode="all")
        [run] = waited["runs"]
        if run["status"] == "needs_attention":
            return dict(run)
        assert run["status"] in ("queued", "running"), run
    raise AssertionError("the run never asked")


async def question_summaries(conv: McpClient, run: dict[str, Any]) -> list[str]:
    events = await conv.structured("kiro_events", conversationId=run["conversationId"], runId=run["runId"])
    return [e["summary"] for e in events["events"] if e["kind"] == "question"]


def test_a_card_wakes_kiro_wait_and_is_answered_by_the_mcp_client_then_from_the_cli_then_dismissed(
        crew: CrewHarness, run_async: Any) -> None:
    # kiro-cli bounds each MCP request by the entry's timeout: above the card's longest window (540 s).
    assert crew.render_agent()["mcpServers"]["kirocrew-core"]["timeout"] == 600_000

    async def main() -> None:
        async with crew.conversations() as conv:
            # 1. The orchestrating MCP client: kiro_wait wakes on the card, kiro_question_answer answers it.
            started = await crew.spawn(conv, asking(COLOUR), name="by-mcp")
            run = await attention_of(crew, conv, started)
            attention = run["attention"]
            assert attention["kind"] == "question" and attention["title"] == "Kiro asks you a question"
            card = attention["question"]
            assert [q["question"] for q in card["questions"]] == [COLOUR["question"]]
            answered = await conv.structured("kiro_question_answer", conversationId=started["conversationId"],
                                             askId=card["askId"],
                                             answers=[{"question": COLOUR["question"], "answer": "Blue"}])
            assert answered["status"] == "answered"
            done = await crew.wait(conv, started)
            assert done["status"] == "completed" and done["reply"]["text"] == "after"
            summaries = await question_summaries(conv, done)
            assert summaries[:2] == ["asked 1 question on a card", "question card answered"]
            assert '"Which colour should the button be?" -> "Blue"' in summaries[-1]  # the consumer's record

            # 2. The CLI twin, through the host, without naming the card (the conversation has one). A follow-up
            # of the same conversation: its kiro-cli (and session key) is reused.
            cid = started["conversationId"]
            started = await conv.structured("kiro_send", conversationId=cid, message=asking(COLOUR))
            await attention_of(crew, conv, started)
            shown = subprocess.run(kirocrew_argv("conversations", "result", cid, started["runId"]),
                                   env=crew.env, capture_output=True, text=True, timeout=60)
            assert shown.returncode == 0, shown.stderr
            assert "Kiro asks you a question (question card ask_" in shown.stdout
            assert "[DESIGN] Which colour should the button be?  (Blue | Green)" in shown.stdout
            assert f"kirocrew conversations answer {cid} --ask ask_" in shown.stdout
            out = subprocess.run(kirocrew_argv("conversations", "answer", cid,
                                               "--answer", f"{COLOUR['question']}=Green, and darker"),
                                 env=crew.env, capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            assert out.stdout.strip().endswith(": answered")
            done = await crew.wait(conv, started)
            assert done["status"] == "completed"
            assert '-> "Green, and darker"' in (await question_summaries(conv, done))[-1]

            # 3. Dismissed (the CLI's --dismiss): the model reads the dismissal text; the run goes on.
            started = await conv.structured("kiro_send", conversationId=cid, message=asking(COLOUR))
            run = await attention_of(crew, conv, started)
            refused = subprocess.run(kirocrew_argv("conversations", "answer", cid, "--ask",
                                                   run["attention"]["question"]["askId"], "--answer",
                                                   "Not a question=x"),
                                     env=crew.env, capture_output=True, text=True, timeout=60)
            assert refused.returncode != 0 and "answer_not_asked" in refused.stderr
            out = subprocess.run(kirocrew_argv("conversations", "answer", cid, "--dismiss"),
                                 env=crew.env, capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            done = await crew.wait(conv, started)
            assert done["status"] == "completed"
            assert "question card dismissed without an answer" in await question_summaries(conv, done)

    run_async(main(), timeout=150)


def test_an_unanswered_card_expires_and_a_caller_without_a_session_is_refused(
        crew: CrewHarness, run_async: Any) -> None:
    async def main() -> None:
        # The host inherits the first relay's environment: every card's window is 1 s there.
        async with crew.conversations(**{Q.TEST_TIMEOUT_ENV: "1"}) as conv:
            started = await crew.spawn(conv, asking(COLOUR, timeout_secs=300), name="expires")
            done = await _wait_ended(conv, started)
            assert done["status"] == "completed" and done["reply"]["text"] == "after"
            summaries = await question_summaries(conv, done)
            assert "question card expired unanswered and was withdrawn" in summaries
            assert '-> null' in summaries[-1]  # the exchange records no answer

        async with crew.core() as core:  # a plain MCP client: no key kirocrew issued
            text, code = await core.call("ask_question", questions=[COLOUR])
            assert code == "caller_unverified", text

    run_async(main(), timeout=120)


async def _wait_ended(conv: McpClient, started: dict[str, Any]) -> dict[str, Any]:
    """kiro_wait until the run ended, looking past the attention the card holds meanwhile."""
    import asyncio

    target = {"conversationId": started["conversationId"], "runId": started["runId"]}
    while True:
        [run] = (await conv.structured("kiro_wait", targets=[target], mode="all"))["runs"]
        if run["status"] not in ("queued", "running", "needs_attention"):
            return dict(run)
        await asyncio.sleep(0.2)
