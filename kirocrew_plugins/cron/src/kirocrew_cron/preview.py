"""``kirocrew cron preview``: run a command job once, as a real run would, and store nothing.

A preview goes through what a fire goes through (:func:`kirocrew_cron.service.fire_time_check`:
the command vetted again, a session's job narrowed to its conversation's authority, governance,
the authority able to run here), then :func:`kirocrew_cron.runner.run_command`: the authority's
launcher, the job's workspace, its ``timeout``, the output redacted. What it answers is the
outcome and the notification the run would publish (:func:`kirocrew_cron.service.notification_of`);
it writes no history row, no last result, no notification. An agent job is refused
(``not_a_command_job``): its run is a run of a conversation, which would outlive the preview.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from kirocrew_cron.errors import cron_error

if TYPE_CHECKING:
    from kirocrew_cron.model import Job
    from kirocrew_cron.ops import JobHost

#: The name a command given on the command line previews under (its notification's title).
PREVIEW_NAME = "preview"
PREVIEW_ID = "0"


def preview_job(host: JobHost, args: dict[str, Any]) -> Job:
    """The job ``args`` name (``job_id``: the person's view of any job) or make (``command``, with
    ``authority``, ``cwd``, ``timeout``), as a fire would run it now; refusals have the fire's codes."""
    from kirocrew_cron import ops
    from kirocrew_cron.model import Job, Schedule
    from kirocrew_cron.service import fire_time_check

    given = [name for name in ("job_id", "command") if name in args]
    if len(given) != 1:
        raise cron_error("conflicting_arguments", "preview a job (its id) or a --command, one of the two")
    if "job_id" in args:
        job = ops.visible_job(host, ops.Actor.person(), args["job_id"])
        if not job.command:
            raise cron_error("not_a_command_job", f"job {job.id} is an agent job: preview runs command jobs only "
                                                  "(trigger it to run it for real)")
    else:
        from kirocrew_conversations.public import UNRESTRICTED

        from kirocrew_cron.vet import vet_command

        vet_command(args["command"])
        now = time.time()
        job = Job(id=PREVIEW_ID, name=PREVIEW_NAME, schedule=Schedule("at", at_ts=now), command=args["command"],
                  authority=args.get("authority") or UNRESTRICTED, workspace=ops.person_workspace(args.get("cwd")),
                  timeout=int(args.get("timeout", 0)), created_ts=now, updated_ts=now)
    job, refusal = fire_time_check(job)
    if refusal is not None:
        code, message = refusal
        raise cron_error(code, f"a run would be refused: {message}")
    return job


async def run_preview(job: Job) -> dict[str, Any]:
    """Run ``job``'s command once (see the module docstring); the outcome and the notification it would publish."""
    from kirocrew_cron.runner import ActiveRun, run_command
    from kirocrew_cron.service import notification_of

    now = time.time()
    active = ActiveRun(job.id, 0, "manual", started_at=now, deadline=now + job.timeout_secs, reap_at=now)
    outcome = await run_command(job, active)
    notification = None
    if not job.silent:
        card, _ = notification_of(job, outcome, paused_itself=False, removed=False)
        notification = {"title": card.title, "priority": card.priority, "body": card.body, "url": card.url,
                        "group_key": card.group_key}
    return {"job_id": job.id if job.id != PREVIEW_ID else None, "name": job.name, "authority": job.authority,
            "status": outcome.status, "result": outcome.result, "error": outcome.error,
            "duration_ms": max(0, round((time.time() - now) * 1000)), "notification": notification}


def preview_text(report: dict[str, Any]) -> str:
    """What ``kirocrew cron preview`` prints: how the run ended, its result, and the card it would publish."""
    job = f"job {report['job_id']} ({report['name']})" if report["job_id"] else "the command"
    lines = [f"Preview of {job} under {report['authority']}: {report['status']} in "
             f"{report['duration_ms'] / 1000:.1f}s (nothing was stored)"]
    if report["error"]:
        lines.append(f"Error: {report['error']}")
    if report["result"]:
        lines += ["Result:", *(f"  {line}" for line in report["result"].splitlines())]
    card = report["notification"]
    if card is None:
        lines.append("It would publish no notification (the job is silent).")
    else:
        lines.append(f"It would publish: {card['title']}" + (" (critical)" if card["priority"] == "critical" else ""))
        lines += [f"  {line}" for line in card["body"].splitlines()]
    return "\n".join(lines)
