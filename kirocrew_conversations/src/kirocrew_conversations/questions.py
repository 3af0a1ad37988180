"""Pending ``ask_question`` cards: a blocking question from a session to the person who owns it.

A question lives in the host, in the conversations orchestrator's :class:`QuestionBoard`
(never in module state), keyed by a random ask id and addressed to one conversation and
the run that asked it. While it is pending the run is ``needs_attention`` exactly like a
permission request, so ``kiro_wait`` wakes, ``kiro_result``/``kiro_status`` show it and
the conversation's page draws its card. It ends one way: answered, dismissed, expired
(its own window passed) or withdrawn (the run ended, the host stopped, or the tool call
was cancelled); the entry is removed and the attention cleared in every case.

Cheap to import: the core tool module and the service both read it.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal

from kirocrew_core.coretools import directives
from kirocrew_core.coretools.contract import ToolRefused

if TYPE_CHECKING:
    from kirocrew_conversations.directive_effects import DirectiveContext
    from kirocrew_conversations.directive_effects import Outcome as DirectiveOutcome

Outcome = Literal["answered", "dismissed", "expired", "withdrawn"]

MAX_QUESTIONS = 4
QUESTION_MAX_CHARS = 500
HEADER_MAX_CHARS = 50
MAX_OPTIONS = 6
LABEL_MAX_CHARS = 200
DESCRIPTION_MAX_CHARS = 500
ANSWER_MAX_CHARS = 2000
#: The window a model may choose: at least 15 s, at most 540 s, 300 s when it does not say.
TIMEOUT_MIN_SECS, TIMEOUT_MAX_SECS, TIMEOUT_DEFAULT_SECS = 15, 540, 300
#: Pending questions per conversation; one more is refused with ``question_capacity``.
MAX_PENDING_PER_CONVERSATION = 4
#: Room the asked questions must leave in the result for the answers (see :func:`check_fits`).
ANSWER_ROOM_CHARS = 400
#: A test-only override of every window (seconds, float): the host reads it from its environment,
#: so a test can watch a question expire without a schema that lets a model ask for 1 s.
TEST_TIMEOUT_ENV = "KIROCREW_TEST_QUESTION_TIMEOUT_SECS"

TEXT_ANSWERED_EMPTY = "The user answered the question card."
TEXT_DISMISSED = "The user dismissed the question card without answering."
TEXT_EXPIRED = ("The user did not answer the question card in time, so it was withdrawn. Continue without the "
                "answer or ask again.")
TEXT_WITHDRAWN = ("The question card was withdrawn before the user answered. Ask again if you still need the "
                  "answer.")

QUESTIONS_SCHEMA: dict[str, Any] = {
    "type": "array", "minItems": 1, "maxItems": MAX_QUESTIONS,
    "description": f"1 to {MAX_QUESTIONS} questions shown together on one card.",
    "items": {
        "type": "object", "additionalProperties": False, "required": ["question", "options"],
        "properties": {
            "question": {"type": "string", "minLength": 1, "maxLength": QUESTION_MAX_CHARS,
                         "description": "The question, as the user reads it. Distinct within one call."},
            "header": {"type": "string", "minLength": 1, "maxLength": HEADER_MAX_CHARS,
                       "description": "A short badge above the question, e.g. SCOPE."},
            "options": {
                "type": "array", "minItems": 1, "maxItems": MAX_OPTIONS,
                "description": "Clickable choices (labels distinct); the user may also type a free answer.",
                "items": {
                    "type": "object", "additionalProperties": False, "required": ["label"],
                    "properties": {
                        "label": {"type": "string", "minLength": 1, "maxLength": LABEL_MAX_CHARS},
                        "description": {"type": "string", "minLength": 1, "maxLength": DESCRIPTION_MAX_CHARS},
                    },
                },
            },
            "multiSelect": {"type": "boolean", "default": False,
                            "description": "True lets the user pick several options."},
        },
    },
}
INPUT_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["questions"],
    "properties": {
        "questions": QUESTIONS_SCHEMA,
        "timeout_secs": {"type": "integer", "minimum": TIMEOUT_MIN_SECS, "maximum": TIMEOUT_MAX_SECS,
                         "default": TIMEOUT_DEFAULT_SECS,
                         "description": "How long to wait for the answer before the card is withdrawn."},
    },
}


def normalise_questions(raw: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Schema-valid questions in one canonical shape; duplicate questions or labels are refused.

    An answer is keyed by its question's text, so two equal questions could not be told apart,
    nor two equal labels in one question.
    """
    questions: list[dict[str, Any]] = []
    seen: set[str] = set()
    for item in raw:
        text = str(item["question"]).strip()
        if not text:
            raise ToolRefused("a question must not be blank", code="invalid_arguments")
        if text in seen:
            raise ToolRefused(f"two questions have the same text ({_clip(text, 80)!r}); answers are keyed by the "
                              "question, so each must be distinct. Nothing was asked.", code="duplicate_question")
        seen.add(text)
        labels: set[str] = set()
        options = []
        for option in item["options"]:
            label = str(option["label"]).strip()
            if not label or label in labels:
                raise ToolRefused(f"question {_clip(text, 80)!r} repeats (or leaves blank) the option label "
                                  f"{_clip(label, 80)!r}; labels must be distinct. Nothing was asked.",
                                  code="duplicate_option")
            labels.add(label)
            options.append({"label": label, "description": str(option.get("description", ""))})
        questions.append({"question": text, "header": str(item.get("header", "")), "options": options,
                          "multiSelect": bool(item.get("multiSelect", False))})
    return questions


@dataclass
class PendingQuestion:
    """One open card: what was asked, of which run, until when; ``result`` settles it."""

    ask_id: str
    conversation_id: str
    run_id: str
    questions: list[dict[str, Any]]
    asked_at: str
    expires_at: str
    result: asyncio.Future[tuple[Outcome, dict[str, str]]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())

    def view(self) -> dict[str, Any]:
        """What a client sees (the run's attention, the pending list): no session, no key."""
        return {"askId": self.ask_id, "questions": self.questions, "askedAt": self.asked_at,
                "expiresAt": self.expires_at}


class QuestionBoard:
    """The host's pending questions, by ask id; owned by one orchestrator, used on its event loop."""

    def __init__(self) -> None:
        self._pending: dict[str, PendingQuestion] = {}

    def open(self, conversation_id: str, run_id: str, questions: list[dict[str, Any]],
             window_secs: float) -> PendingQuestion:
        """A new pending question; ``question_capacity`` when the conversation already has the cap open."""
        if len(self.of_conversation(conversation_id)) >= MAX_PENDING_PER_CONVERSATION:
            raise ToolRefused(f"this conversation already has {MAX_PENDING_PER_CONVERSATION} unanswered question "
                              "cards; wait for an answer before asking more", code="question_capacity")
        now = time.time()
        pending = PendingQuestion(ask_id=f"ask_{secrets.token_hex(16)}", conversation_id=conversation_id,
                                  run_id=run_id, questions=questions, asked_at=_stamp(now),
                                  expires_at=_stamp(now + window_secs))
        self._pending[pending.ask_id] = pending
        return pending

    def close(self, ask_id: str) -> None:
        self._pending.pop(ask_id, None)

    def of_conversation(self, conversation_id: str) -> list[PendingQuestion]:
        """The conversation's open cards, oldest first."""
        return [p for p in self._pending.values() if p.conversation_id == conversation_id]

    def of_run(self, run_id: str) -> list[PendingQuestion]:
        return [p for p in self._pending.values() if p.run_id == run_id]

    def find(self, conversation_id: str, ask_id: str) -> PendingQuestion:
        """The open card ``ask_id`` of this conversation; ``question_not_found`` for anything else.

        Another conversation's ask id gets the same answer as an unknown one, so an id says
        nothing about conversations the caller did not name.
        """
        pending = self._pending.get(ask_id)
        if pending is None or pending.conversation_id != conversation_id or pending.result.done():
            raise ToolRefused("no pending question with that id for this conversation (already answered, "
                              "dismissed, expired or withdrawn)", code="question_not_found")
        return pending

    def settle(self, pending: PendingQuestion, outcome: Outcome, answers: dict[str, str] | None = None) -> bool:
        """Settle one card (first settlement wins); False when it was already settled."""
        if pending.result.done():
            return False
        pending.result.set_result((outcome, answers or {}))
        return True

    def withdraw_run(self, run_id: str) -> int:
        """The run ended: withdraw its open cards (their tool calls return at once)."""
        return sum(self.settle(p, "withdrawn") for p in self.of_run(run_id))

    def withdraw_all(self) -> int:
        """The host is stopping: withdraw every open card."""
        return sum(self.settle(p, "withdrawn") for p in list(self._pending.values()))


def check_answers(pending: PendingQuestion, answers: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """Schema-valid answers → ``{question: answer}``; refused (never truncated) unless each names an asked question.

    The result must also fit a tool result (``answers_too_long``): the card stays up so the
    person can shorten the answer and submit again.
    """
    asked = {q["question"] for q in pending.questions}
    out: dict[str, str] = {}
    for item in answers:
        question, answer = item["question"], item["answer"]
        if question not in asked:
            raise ToolRefused("an answer names a question this card did not ask; answer with the question's exact "
                              "text", code="answer_not_asked")
        if question in out:
            raise ToolRefused("two answers for the same question", code="answer_not_asked")
        if len(answer) > ANSWER_MAX_CHARS:
            raise ToolRefused(f"answer exceeds {ANSWER_MAX_CHARS} characters; shorten it and submit again",
                              code="answer_too_long")
        out[question] = answer
    try:
        result_text(pending, "answered", out)
    except ToolRefused:
        raise ToolRefused("the answers are too long to deliver to Kiro in one tool result; shorten them and "
                          "submit again", code="answer_too_long") from None
    return out


def check_fits(questions: list[dict[str, Any]]) -> None:
    """Refuse at ask time (``directive_too_large``) questions that would leave no room for their answers."""
    probe = PendingQuestion(ask_id="ask_" + "0" * 32, conversation_id="", run_id="", questions=questions,
                            asked_at="", expires_at="", result=asyncio.get_running_loop().create_future())
    filler = {q["question"]: "x" * (ANSWER_ROOM_CHARS // len(questions)) for q in questions}
    try:
        result_text(probe, "answered", filler)
    except ToolRefused:
        raise ToolRefused("the questions are too long to deliver with their answers in one tool result "
                          f"(limit {directives.MAX_DIRECTIVE_CHARS} characters); shorten them and ask again. "
                          "Nothing was asked.", code="directive_too_large") from None


def format_answers(pending: PendingQuestion, answers: Mapping[str, str]) -> str:
    """One ``"<question>" -> "<answer>"`` line per asked question that has an answer, in asked order."""
    def quoted(text: str) -> str:
        return json.dumps(text, ensure_ascii=False)

    lines = [f"{quoted(q['question'])} -> {quoted(answers[q['question']])}"
             for q in pending.questions if q["question"] in answers]
    return "\n".join(lines) or TEXT_ANSWERED_EMPTY


def result_text(pending: PendingQuestion, outcome: Outcome, answers: Mapping[str, str]) -> str:
    """The tool result: the stable text for ``outcome`` plus the directive marker for the consumer."""
    human = {"answered": lambda: format_answers(pending, answers), "dismissed": lambda: TEXT_DISMISSED,
             "expired": lambda: TEXT_EXPIRED, "withdrawn": lambda: TEXT_WITHDRAWN}[outcome]()
    exchange = [{"question": q["question"], "answer": answers.get(q["question"])} for q in pending.questions]
    payload = {"askId": pending.ask_id, "status": outcome, "exchange": exchange}
    return directives.encode("ask_question", payload, human)


async def apply_exchange(ctx: DirectiveContext, args: dict[str, Any]) -> DirectiveOutcome:
    """The ``ask_question`` directive's applier: record the card's exchange on the run that asked.

    The card itself was settled in the host before the result existed; what the consumer adds
    is the question-and-answer record on its own conversation's events (redacted, bounded).
    """
    from kirocrew_conversations.directive_effects import Outcome as DirectiveOutcome
    from kirocrew_conversations.redact import redact_text

    status = args.get("status")
    exchange = args.get("exchange")
    if status not in ("answered", "dismissed", "expired", "withdrawn") or not isinstance(exchange, list):
        return DirectiveOutcome("refused", "the ask_question marker is malformed")
    pairs = [{"question": redact_text(str(item.get("question", "")), QUESTION_MAX_CHARS),
              "answer": None if item.get("answer") is None else redact_text(str(item["answer"]), ANSWER_MAX_CHARS)}
             for item in exchange[:MAX_QUESTIONS] if isinstance(item, dict)]
    await ctx.orchestrator.record(ctx.conversation_id, ctx.run_id, "question_exchange",
                                  {"askId": str(args.get("askId", ""))[:64], "status": status, "exchange": pairs})
    return DirectiveOutcome("applied", f"question card {status}; the exchange was recorded")


def _stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
