"""``ask_question``: the kirocrew-core tool a session calls to ask its owner and block until answered.

Contributed by :func:`kirocrew_conversations.plugin.core_mcp_tools`; imported only when the host
builds kirocrew-core's tool list. Identity is ``strict``: the question is addressed to the
conversation the caller's session key names, never to one the arguments could name. The card
lives in the host's conversations orchestrator (:mod:`kirocrew_conversations.questions`), so
this module holds no state.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from kirocrew_core.contributions import CoreMcpTool
from kirocrew_core.coretools.contract import CrewSession, ToolCall, ToolRefused

from kirocrew_conversations import questions as Q

if TYPE_CHECKING:
    from kirocrew_conversations.service import ConversationsService

DESCRIPTION = (
    "Ask the user who owns this session up to 4 questions on one card and WAIT for the answer. The card appears "
    "on the conversation's dashboard page and to whoever orchestrates this conversation (kiro_wait wakes on it); "
    "each question has an optional short header badge, 1-6 clickable options (label + optional description; "
    "multiSelect allows several) and the user may type a free answer instead. The result is one line per "
    'question, "<question>" -> "<answer>"; or says the user dismissed the card, or that it expired after '
    f"timeout_secs (default {Q.TIMEOUT_DEFAULT_SECS} s) and was withdrawn: then continue without the answer or "
    "ask again. Use it only for decisions you cannot make yourself; it blocks this turn while it waits."
)


def tool() -> CoreMcpTool:
    return CoreMcpTool("ask_question", DESCRIPTION, Q.INPUT_SCHEMA, ask_question, identity="strict")


def window_secs(args: dict[str, Any]) -> float:
    """The card's window: the model's ``timeout_secs``, or the host's test override (see questions.py)."""
    override = os.environ.get(Q.TEST_TIMEOUT_ENV, "").strip()
    if override:
        try:
            value = float(override)
        except ValueError:
            value = 0.0
        if 0 < value <= Q.TIMEOUT_MAX_SECS:
            return value
    return float(args.get("timeout_secs", Q.TIMEOUT_DEFAULT_SECS))


async def ask_question(args: dict[str, Any], call: ToolCall) -> str:
    """Open a card on the caller's own conversation, wait, and return the stable result text plus the marker."""
    from kirocrew_conversations.hosted import hosted

    session = call.require_session()
    questions = prepare(args, session)
    return await ask_on(await hosted().ready(), questions, session, window_secs(args))


def prepare(args: dict[str, Any], session: CrewSession) -> list[dict[str, Any]]:
    if session.kind != "conversation":
        raise ToolRefused("ask_question needs a conversation's session (a person who can answer); this session "
                          f"is a {session.kind} run: say what you need in your reply instead",
                          code="conversation_not_found")
    questions = Q.normalise_questions(args["questions"])
    Q.check_fits(questions)
    return questions


async def ask_on(service: ConversationsService, questions: list[dict[str, Any]], session: CrewSession,
                 window: float) -> str:
    """Ask on ``service``'s orchestrator for ``session``'s conversation; the tool's result text."""
    pending, outcome, answers = await service.orchestrator.ask(session.target_id, questions, window)
    return Q.result_text(pending, outcome, answers)
