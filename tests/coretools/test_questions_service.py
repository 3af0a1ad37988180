"""ask_question's card in the host's conversations service: a real fake-kiro run blocked on it, every way it ends.

The kirocrew-core server and the relay are exercised by test_questions_e2e.py; here the tool's
handler half (:func:`kirocrew_conversations.ask_tool.ask_on`) runs against an in-process
service whose run is a real fake kiro-cli turn, so attention, waits, answers and the result
texts are checked without a host.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kirocrew_core.coretools import directives
from kirocrew_core.coretools.contract import CrewSession, ToolCall, ToolRefused
from kirocrew_core.errors import KirocrewError

from kirocrew_conversations import ask_tool
from kirocrew_conversations import questions as Q
from kirocrew_conversations.service import ConversationsService, ServiceConfig
from kirocrew_conversations.store import open_state

T = TypeVar("T")

QUESTION = {"question": "Which colour should the button be?", "header": "DESIGN",
            "options": [{"label": "Blue", "description": "the brand colour"}, {"label": "Green"}]}
SECOND = {"question": "Ship it today?", "options": [{"label": "Yes"}, {"label": "No"}], "multiSelect": False}


@pytest.fixture(autouse=True)
def _fake(fake_kiro_cli: Any, lean_kirocrew_agent: Path) -> Any:
    return fake_kiro_cli


def run(coro: Awaitable[T]) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, 60)

    return asyncio.run(bounded())


class Scene:
    """A started service with one conversation whose run is busy in the fake kiro-cli."""

    def __init__(self, service: ConversationsService, tmp_path: Path) -> None:
        self.service, self.tmp_path = service, tmp_path

    async def busy(self, name: str, script: str = "!say working\n!hang") -> tuple[str, str]:
        """A new conversation whose run is executing ``script``; (conversation id, run id) once it runs."""
        from kirocrew_conversations.store import Workspace

        workspace = self.tmp_path / name
        workspace.mkdir()
        store, orchestrator = self.service.store, self.service.orchestrator
        cid = store.create_conversation(name=name, workspace=Workspace("shared", str(workspace), f"ws_{name}")).id
        rid = (await orchestrator.submit(cid, script)).id
        for _ in range(600):
            if orchestrator._current(rid) is not None and store.get_run(rid).status == "running":
                return cid, rid
            await asyncio.sleep(0.02)
        raise AssertionError("the run never started")

    async def result(self, cid: str, rid: str) -> dict[str, Any]:
        return await self.service.call("kiro_result", {"conversationId": cid, "runId": rid})

    async def events(self, cid: str, rid: str) -> list[dict[str, Any]]:
        return (await self.service.call("kiro_events", {"conversationId": cid, "runId": rid}))["events"]

    def ask(self, cid: str, *questions: dict[str, Any], window: float = 30) -> asyncio.Task[str]:
        session = CrewSession(key="kcs1-test", kind="conversation", target_id=cid)
        prepared = ask_tool.prepare({"questions": list(questions)}, session)
        return asyncio.ensure_future(ask_tool.ask_on(self.service, prepared, session, window))

    async def card(self, cid: str) -> dict[str, Any]:
        for _ in range(200):
            cards = self.service.pending_questions(cid)
            if cards:
                return cards[0]
            await asyncio.sleep(0.02)
        raise AssertionError("no card was opened")

    async def answer(self, cid: str, ask_id: str | None = None, **args: Any) -> dict[str, Any]:
        return await self.service.call("kiro_question_answer", {"conversationId": cid,
                                                                **({"askId": ask_id} if ask_id else {}), **args})


async def _scene(tmp_path: Path) -> AsyncIterator[Scene]:
    # Built directly rather than through start(): no sandbox preflights or archive sweeper, which these
    # tests do not need and which cost seconds on a shared machine.
    service = ConversationsService(await asyncio.to_thread(open_state, tmp_path / "state"),
                                   ServiceConfig(state_dir=tmp_path / "state"))
    try:
        yield Scene(service, tmp_path)
    finally:
        await service.aclose()


def scene_test(body: Any, tmp_path: Path) -> None:
    async def main() -> None:
        async for scene in _scene(tmp_path):
            await body(scene)

    run(main())


def marker_of(text: str) -> dict[str, Any]:
    payload = directives.decode(text, "ask_question")
    assert payload is not None, text
    return payload


def test_a_question_holds_the_run_in_attention_until_answered_then_returns_one_line_per_question(tmp_path):
    async def body(scene: Scene) -> None:
        cid, rid = await scene.busy("answered")
        asking = scene.ask(cid, QUESTION, SECOND)
        card = await scene.card(cid)
        waited = await scene.service.call("kiro_wait", {"targets": [{"conversationId": cid, "runId": rid}],
                                                        "mode": "all"})
        shown = waited["runs"][0]
        assert not waited["waitExpired"] and shown["status"] == "needs_attention"
        assert shown["attention"]["kind"] == "question" and shown["attention"]["permissionRequestId"] is None
        assert shown["attention"]["question"]["askId"] == card["askId"]
        assert shown["attention"]["question"]["questions"][0] == {
            "question": QUESTION["question"], "header": "DESIGN", "multiSelect": False,
            "options": [{"label": "Blue", "description": "the brand colour"}, {"label": "Green", "description": ""}]}
        assert shown["attention"]["title"] == "Kiro asks you 2 questions"

        out = await scene.answer(cid, card["askId"], answers=[{"question": QUESTION["question"], "answer": "Blue"},
                                                              {"question": SECOND["question"], "answer": "No"}])
        assert out == {"conversationId": cid, "askId": card["askId"], "status": "answered"}
        text = await asking
        assert directives.strip_markers(text) == ('"Which colour should the button be?" -> "Blue"\n'
                                                  '"Ship it today?" -> "No"')
        payload = marker_of(text)
        assert payload["askId"] == card["askId"] and payload["status"] == "answered"
        assert payload["exchange"] == [{"question": QUESTION["question"], "answer": "Blue"},
                                       {"question": SECOND["question"], "answer": "No"}]
        assert "kcs1-test" not in text  # the marker never carries the session key
        assert scene.service.pending_questions(cid) == []
        after = await scene.result(cid, rid)
        assert after["status"] == "running" and after["attention"] is None
        summaries = [e["summary"] for e in await scene.events(cid, rid) if e["kind"] == "question"]
        assert summaries == ["asked 2 questions on a card", "question card answered"]
        await scene.service.call("kiro_cancel", {"conversationId": cid, "runId": rid})

    scene_test(body, tmp_path)


def test_dismissing_expiring_and_cancelling_each_end_the_card_with_their_own_text(tmp_path):
    async def body(scene: Scene) -> None:
        cid, rid = await scene.busy("endings")
        asking = scene.ask(cid, QUESTION)
        await scene.card(cid)
        assert (await scene.answer(cid, dismissed=True))["status"] == "dismissed"  # the only card: no id needed
        text = await asking
        assert directives.strip_markers(text) == Q.TEXT_DISMISSED
        assert marker_of(text)["status"] == "dismissed"

        expiring = scene.ask(cid, QUESTION, window=0.3)
        assert directives.strip_markers(await expiring) == Q.TEXT_EXPIRED
        assert scene.service.pending_questions(cid) == []
        assert (await scene.result(cid, rid))["status"] == "running"

        cancelled = scene.ask(cid, QUESTION)
        card = await scene.card(cid)
        await scene.service.call("kiro_cancel", {"conversationId": cid, "runId": rid})
        text = await cancelled
        assert directives.strip_markers(text) == Q.TEXT_WITHDRAWN and marker_of(text)["status"] == "withdrawn"
        assert scene.service.pending_questions(cid) == []
        with pytest.raises(KirocrewError) as late:
            await scene.answer(cid, card["askId"], dismissed=True)
        assert late.value.code == "question_not_found"
        kinds = [e["summary"] for e in await scene.events(cid, rid) if e["kind"] == "question"]
        assert kinds[1] == "question card dismissed without an answer"
        assert kinds[3] == "question card expired unanswered and was withdrawn"
        assert kinds[-1].startswith("question card withdrawn")

    scene_test(body, tmp_path)


def test_a_cancelled_tool_call_withdraws_its_card_and_clears_the_attention(tmp_path):
    async def body(scene: Scene) -> None:
        cid, rid = await scene.busy("mcp-cancel")
        asking = scene.ask(cid, QUESTION)
        await scene.card(cid)
        # the card is listed a moment before its run turns needs_attention: wait on the run, as a client does
        waited = await scene.service.call("kiro_wait", {"targets": [{"conversationId": cid, "runId": rid}],
                                                        "mode": "all"})
        assert not waited["waitExpired"] and waited["runs"][0]["status"] == "needs_attention"
        asking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asking
        assert scene.service.pending_questions(cid) == []
        after = await scene.result(cid, rid)
        assert after["status"] == "running" and after["attention"] is None
        await scene.service.call("kiro_cancel", {"conversationId": cid, "runId": rid})

    scene_test(body, tmp_path)


def test_a_conversation_without_a_run_to_block_is_refused_at_once(tmp_path):
    async def body(scene: Scene) -> None:
        for missing in ("conv_doesnotexist",):
            with pytest.raises(KirocrewError) as caught:
                await scene.ask(missing, QUESTION)
            assert caught.value.code == "conversation_not_found"
        cid, rid = await scene.busy("idle", "!say done")
        assert (await scene.service.orchestrator.wait([rid], timeout=30)).runs[0].status == "completed"
        with pytest.raises(ToolRefused) as ended:
            await scene.ask(cid, QUESTION)
        assert ended.value.code == "conversation_ended"
        await scene.service.call("kiro_archive", {"conversationId": cid})
        with pytest.raises(ToolRefused) as archived:
            await scene.ask(cid, QUESTION)
        assert archived.value.code == "conversation_ended"
        assert scene.service.pending_questions(cid) == []

    scene_test(body, tmp_path)


def test_bad_answers_are_refused_with_their_codes_and_leave_the_card_open(tmp_path):
    async def body(scene: Scene) -> None:
        cid, rid = await scene.busy("bad-answers")
        other, other_run = await scene.busy("other")
        asking = scene.ask(cid, QUESTION)
        card = await scene.card(cid)

        async def refused(code: str, conversation: str, ask_id: str | None, **args: Any) -> None:
            with pytest.raises(KirocrewError) as caught:
                await scene.answer(conversation, ask_id, **args)
            assert caught.value.code == code, caught.value.message
            assert scene.service.pending_questions(cid) == [card]  # nothing changed

        good = [{"question": QUESTION["question"], "answer": "Green"}]
        await refused("answer_not_asked", cid, card["askId"], answers=[{"question": "Another?", "answer": "x"}])
        await refused("answer_not_asked", cid, card["askId"], answers=good * 2)
        await refused("invalid_arguments", cid, card["askId"],
                      answers=[{"question": QUESTION["question"], "answer": "x" * (Q.ANSWER_MAX_CHARS + 1)}])
        await refused("answer_too_long", cid, card["askId"],
                      answers=[{"question": QUESTION["question"], "answer": "x" * Q.ANSWER_MAX_CHARS}])
        await refused("question_not_found", cid, "ask_unknown", answers=good)
        await refused("question_not_found", other, card["askId"], answers=good)  # another conversation's card
        await refused("question_not_found", other, None, dismissed=True)  # that one has no card at all
        await refused("invalid_arguments", cid, card["askId"], answers=[])
        assert (await scene.result(cid, rid))["status"] == "needs_attention"

        await scene.answer(cid, card["askId"], answers=good)
        assert directives.strip_markers(await asking) == '"Which colour should the button be?" -> "Green"'
        for conversation, run_id in ((cid, rid), (other, other_run)):
            await scene.service.call("kiro_cancel", {"conversationId": conversation, "runId": run_id})

    scene_test(body, tmp_path)


def test_a_conversation_holds_at_most_four_cards_and_an_unnamed_answer_needs_exactly_one(tmp_path):
    async def body(scene: Scene) -> None:
        cid, rid = await scene.busy("capacity")
        asks = [scene.ask(cid, {**QUESTION, "question": f"Question {i}?"})
                for i in range(Q.MAX_PENDING_PER_CONVERSATION)]
        for _ in range(200):
            if len(scene.service.pending_questions(cid)) == Q.MAX_PENDING_PER_CONVERSATION:
                break
            await asyncio.sleep(0.02)
        with pytest.raises(ToolRefused) as full:
            await scene.ask(cid, QUESTION)
        assert full.value.code == "question_capacity"
        with pytest.raises(KirocrewError) as ambiguous:
            await scene.answer(cid, dismissed=True)
        assert ambiguous.value.code == "question_ambiguous"
        assert len(scene.service.pending_questions(cid)) == Q.MAX_PENDING_PER_CONVERSATION
        await scene.service.call("kiro_cancel", {"conversationId": cid, "runId": rid})
        texts = await asyncio.gather(*asks)
        assert {directives.strip_markers(t) for t in texts} == {Q.TEXT_WITHDRAWN}

    scene_test(body, tmp_path)


@pytest.mark.parametrize("questions, code", [
    ([QUESTION, dict(QUESTION)], "duplicate_question"),
    ([{**QUESTION, "options": [{"label": "Blue"}, {"label": "Blue"}]}], "duplicate_option"),
    ([{"question": f"{i}" + "q" * 499, "options": [{"label": "l" * 200, "description": "d" * 500}]} for i in range(4)],
     "directive_too_large"),
])
def test_questions_that_cannot_be_answered_unambiguously_or_delivered_are_refused_before_asking(questions, code):
    async def main() -> None:
        with pytest.raises(ToolRefused) as caught:
            ask_tool.prepare({"questions": questions}, CrewSession("kcs1-x", "conversation", "conv_x"))
        assert caught.value.code == code

    run(main())


def test_a_caller_without_a_session_and_a_cron_session_cannot_ask():
    async def main() -> None:
        with pytest.raises(ToolRefused) as unverified:
            await ask_tool.ask_question({"questions": [QUESTION]},
                                        ToolCall("ask_question", None, None, "strict"))
        assert unverified.value.code == "caller_unverified"
        cron = CrewSession("kcs1-y", "cron", "job_1")
        with pytest.raises(ToolRefused) as refused:
            await ask_tool.ask_question({"questions": [QUESTION]}, ToolCall("ask_question", cron, None, "strict"))
        assert refused.value.code == "conversation_not_found"

    run(main())


def test_the_test_window_override_shortens_every_window_but_the_schema_keeps_its_bounds(monkeypatch):
    assert ask_tool.window_secs({}) == Q.TIMEOUT_DEFAULT_SECS
    assert ask_tool.window_secs({"timeout_secs": 60}) == 60
    monkeypatch.setenv(Q.TEST_TIMEOUT_ENV, "0.5")
    assert ask_tool.window_secs({"timeout_secs": 60}) == 0.5
    monkeypatch.setenv(Q.TEST_TIMEOUT_ENV, "nonsense")
    assert ask_tool.window_secs({}) == Q.TIMEOUT_DEFAULT_SECS
    schema = ask_tool.tool().input_schema["properties"]["timeout_secs"]
    assert (schema["minimum"], schema["maximum"], schema["default"]) == (15, 540, 300)


def test_the_host_stopping_withdraws_every_open_card(tmp_path):
    async def main() -> None:
        service = ConversationsService(await asyncio.to_thread(open_state, tmp_path / "state"),
                                       ServiceConfig(state_dir=tmp_path / "state"))
        scene = Scene(service, tmp_path)
        try:
            cid, _ = await scene.busy("stopping")
            asking = scene.ask(cid, QUESTION)
            await scene.card(cid)
        finally:
            await service.aclose()
        text = await asking
        assert directives.strip_markers(text) == Q.TEXT_WITHDRAWN and marker_of(text)["status"] == "withdrawn"
        assert service.orchestrator.questions.of_conversation(cid) == []
        with pytest.raises(ToolRefused) as refused:  # and nothing new is asked of a stopped host
            await service.orchestrator.ask(cid, [QUESTION], 30)
        assert refused.value.code == "conversation_ended"

    run(main())
