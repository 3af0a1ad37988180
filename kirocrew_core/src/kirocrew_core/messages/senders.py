"""Who sent a message, decided from the verified caller, never from the arguments.

A crew session is its conversation (kind and target) and its agent; when that conversation is a cron
job's agent run, the job too (``conversation_cron_job()``, answered by the plugin that runs the jobs):
the owner sees which job spoke, may mute the job, and ``session="origin"`` knows where to inject.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core.messages.store import Sender

if TYPE_CHECKING:
    from kirocrew_core.contributions import CronJobRef
    from kirocrew_core.coretools.contract import CrewSession


def cron_job_of(conversation_id: str) -> CronJobRef | None:
    """The cron job whose run ``conversation_id`` is: the first answer that is not None (blocking)."""
    from kirocrew_core.contributions import CronJobRef
    from kirocrew_core.plugins import call_hook, get_plugin_manager

    call = call_hook(get_plugin_manager(), "conversation_cron_job", on_error="raise",
                     conversation_id=conversation_id)
    for contribution in call.contributions:
        if isinstance(contribution.value, CronJobRef):
            return contribution.value
    return None


def sender_of(session: CrewSession) -> tuple[Sender, CronJobRef | None]:
    """The attribution of a call from ``session``, and its cron job (blocking: a hook call, a store read)."""
    job = cron_job_of(session.target_id) if session.kind == "conversation" else None
    if session.kind == "cron":
        return Sender(session.kind, session.target_id, session.agent, cron_job=session.target_id), None
    return Sender(session.kind, session.target_id, session.agent,
                  cron_job=job.job_id if job else None, cron_job_name=job.name[:100] if job else None), job
