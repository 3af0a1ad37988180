"""Queueing a run in a conversation from core: the one caller of the ``conversation_deliver`` hook.

Core keeps no conversations (the kirocrew-conversations plugin does), yet two of its features
put text into one: an inbound webhook's delivery (:mod:`kirocrew_core.webhooks.delivery`) and
``send_message(session="origin")`` (:mod:`kirocrew_core.messages.tools`). Both need the same
answer: the queued run's id, or one sentence saying why no run was queued, so they can fall
back to the owner's feed and say so.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

NO_KEEPER = "no plugin keeps conversations"


@dataclass(frozen=True)
class Queued:
    """A run queued (``run_id``), or not (``run_id`` None and ``reason`` why)."""

    run_id: str | None
    reason: str = ""


async def queue_run(conversation_id: str, text: str, *, what: str) -> Queued:
    """Queue ``text`` as ``conversation_id``'s next run through the plugins; never raises for a refusal.

    ``what`` names the caller in the log when a plugin fails unexpectedly (a refusal with a
    :class:`~kirocrew_core.errors.KirocrewError` is the conversation's state, not a failure).
    """
    from kirocrew_core.errors import KirocrewError
    from kirocrew_core.plugins import HookFailedError, acall_hook, get_plugin_manager

    try:
        # fail_closed: the first refusal stops the call, and its own error (the cause) says why.
        call = await acall_hook(get_plugin_manager(), "conversation_deliver", on_error="fail_closed",
                                conversation_id=conversation_id, text=text)
    except HookFailedError as exc:
        cause = exc.__cause__
        if isinstance(cause, KirocrewError):
            return Queued(None, f"{cause.message} ({cause.code})")
        log.error("%s: queueing a run failed: %s", what, exc.message)
        return Queued(None, f"queueing a run failed ({exc.failure.plugin})")
    run_id = next((c.value for c in call.contributions if isinstance(c.value, str)), None)
    return Queued(run_id) if run_id is not None else Queued(None, NO_KEEPER)
