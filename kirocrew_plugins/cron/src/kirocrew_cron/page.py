"""The dashboard's Cron pages: every job (``/cron``) and one job with its history (``/cron/{job_id}``).

Both are rendered on the server from the same functions as their JSON twins
(:func:`kirocrew_cron.api.listing` is ``GET /api/cron/jobs``, :func:`kirocrew_cron.api.detail` is
``GET /api/cron/jobs/{id}``); every string is escaped by the templates. ``static/cron.js`` sends
every change through the ``/api/cron…`` routes and swaps in the page's fresh server-rendered
regions, and redraws them every :data:`REFRESH_SECONDS` (a poll, as the conversations page does:
an open event stream would keep an auto-started host alive). The add and edit forms carry the
tools' argument names; which fields the edit form may change comes from ``cron_update``'s schema.
Starlette is imported inside functions.
"""

from __future__ import annotations

import asyncio
import re
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from kirocrew_core.errors import KirocrewError

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

PACKAGE = "kirocrew_cron"
#: How often an open Cron page redraws its jobs (and a job's page its history).
REFRESH_SECONDS = 10
#: History statuses shown red and green.
BAD_STATUSES = frozenset({"failure", "timeout", "denied"})
GOOD_STATUSES = frozenset({"success"})
#: The schedule kinds the form offers, by the argument each one fills.
SCHEDULE_CHOICES = (("every", "Every"), ("cron_expr", "Cron expression"), ("at_time", "At a time (words)"),
                    ("delay", "In N seconds"), ("at", "At an instant"))
EVERY_UNITS = (("60", "minutes"), ("3600", "hours"), ("86400", "days"), ("1", "seconds"))
#: The tool arguments the job forms carry (the schedule's own inputs are offered by their radio choice).
FORM_FIELDS = ("name", "message", "command", "timezone", "skip_dates", "agent", "model", "authority", "cwd",
               "timeout_secs", "timeout", "catch_up", "catch_up_max", "persistent_session", "minimal_context",
               "silent", "strict_schedule")


def status_class(status: str | None) -> str:
    """The shell's colour class for a run status (``ok``, ``fail``, ``warn``) or none."""
    if status in BAD_STATUSES:
        return "fail"
    if status in GOOD_STATUSES:
        return "ok"
    return "warn" if status in ("missed", "cancelled", "running") else ""


def utc_stamp(ts: float | None) -> str:
    """``2026-03-28T14:00:00Z`` for a ``<time datetime>`` (the page's script shows it in local time)."""
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def utc_text(ts: float | None) -> str:
    """``2026-03-28 14:00 UTC``: what a ``<time>`` says before (or without) the script."""
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def state_of(job: dict[str, Any]) -> str:
    """``running``, ``auto-paused``, ``paused`` or ``active``: the one word the jobs table shows."""
    if job.get("running"):
        return "running"
    if job.get("auto_paused"):
        return "auto-paused"
    if job.get("user_paused"):
        return "paused"
    return "active"


def owner_of(job: dict[str, Any]) -> tuple[str, str]:
    """``(text, link)`` for a job's owner: "you" for the person's jobs, else the session (its page)."""
    from urllib.parse import quote

    owner = str(job.get("owner") or "")
    if not owner:
        return "you", ""
    kind, _, target = owner.partition(":")
    if kind == "conversation" and target:
        return f"conversation {target}", f"/conversations/{quote(target, safe='')}"
    if kind == "cron" and target:
        return f"cron job {target}", f"/cron/{quote(target, safe='')}"
    return owner, ""


def duration_text(ms: int | None) -> str:
    """``40 ms``, ``1.2 s``, ``3 min 4 s``, or ``""`` while running."""
    if ms is None:
        return ""
    if ms < 1_000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(round(ms / 1000), 60)
    return f"{minutes} min {seconds} s"


def form_values(job: dict[str, Any] | None) -> dict[str, Any]:
    """What the add form (``job`` None: the tool's defaults) or a job's edit form shows in each field."""
    from kirocrew_cron import model

    if job is None:
        return {"id": "", "name": "", "kind": "agent", "message": "", "command": "", "schedule": "every",
                "every": "", "every_unit": "60", "cron_expr": "", "at": "", "timezone": "", "skip_dates": "",
                "agent": "", "model": "", "authority": "unrestricted", "cwd": "",
                "timeout_secs": model.TIMEOUT_SECS_DEFAULT, "timeout": 0, "catch_up": "once",
                "catch_up_max": model.CATCH_UP_MAX_DEFAULT, "persistent_session": True, "minimal_context": False,
                "silent": False, "strict_schedule": False}
    schedule = job["schedule"]
    every = schedule.get("every_secs") or 0
    whole_minutes = every % 60 == 0
    kinds = {"cron": "cron_expr", "at": "at", "every": "every"}
    return {**{name: job[name] for name in ("id", "name", "message", "command", "timezone", "agent", "model",
                                             "authority", "timeout_secs", "timeout", "catch_up",
                                             "catch_up_max", "persistent_session", "minimal_context", "silent",
                                             "strict_schedule")},
            "kind": "command" if job["command"] else "agent", "schedule": kinds.get(schedule["kind"], "every"),
            "every": (every // 60 if whole_minutes else every) or "", "every_unit": "60" if whole_minutes else "1",
            "cron_expr": schedule.get("cron_expr") or "", "at": schedule.get("at_ts") or "",
            "skip_dates": " ".join(job["skip_dates"]), "cwd": job["workspace"]}


def _authorities() -> list[dict[str, Any]]:
    """The execution authorities a person's job may choose (cron_add's), each with whether it can run here."""
    from kirocrew_conversations.public import AUTHORITIES, authority_availability, installed_authorities

    installed = installed_authorities()
    out = []
    for name in AUTHORITIES:
        ok, reason = authority_availability(name, installed)
        out.append({"name": name, "available": ok, "reason": reason or ""})
    return out


def _update_fields() -> frozenset[str]:
    """The arguments ``cron_update`` accepts: the edit form offers only these."""
    from kirocrew_cron.tools import tools_by_name

    properties = tools_by_name()["cron_update"].input_schema.get("properties", {})
    return frozenset(name for name in properties if name not in ("job_id", "json"))


def _context() -> dict[str, Any]:
    from kirocrew_cron import model
    from kirocrew_cron.settings import configured_timezone

    return {"status_class": status_class, "utc_stamp": utc_stamp, "utc_text": utc_text, "state_of": state_of,
            "owner_of": owner_of, "duration_text": duration_text, "schedule_choices": SCHEDULE_CHOICES,
            "every_units": EVERY_UNITS, "form_fields": FORM_FIELDS, "catch_ups": model.CATCH_UPS, "limits": model,
            "default_timezone": configured_timezone() or "UTC", "refresh_seconds": REFRESH_SECONDS,
            "form_values": form_values}


async def list_page(request: Request) -> Response:
    """``GET /cron``: the jobs table, the add form, and how else a job is made."""
    from kirocrew_core.gateway.shell import render_page

    from kirocrew_cron.api import host_of, listing

    jobs, problem = None, None
    try:
        jobs = await asyncio.to_thread(listing, host_of(request))
    except KirocrewError as exc:
        problem = exc
    authorities = await asyncio.to_thread(_authorities)
    return render_page(request, f"{PACKAGE}/cron.html", title="Cron", status_code=200 if problem is None else 503,
                       listing=jobs, problem=problem, authorities=authorities, job=None, editable=None,
                       **_context())


async def job_page(request: Request) -> Response:
    """``GET /cron/{job_id}``: the job, its history (links to the runs), its actions and the edit form."""
    from kirocrew_core.gateway.shell import render_page

    from kirocrew_cron.api import detail, host_of, status_of
    from kirocrew_cron.model import JOB_ID_PATTERN
    from kirocrew_cron.ops import not_found

    job_id = request.path_params["job_id"]
    try:
        host = host_of(request)
        if not re.fullmatch(JOB_ID_PATTERN, job_id):
            raise not_found(job_id[:40])  # a page address, not an argument: any id that names no job is 404
        shown = await asyncio.to_thread(detail, host, job_id)
    except KirocrewError as exc:
        return render_page(request, f"{PACKAGE}/job.html", title="Cron job not available",
                           status_code=status_of(exc.code), shown=None, problem=exc, **_context())
    authorities, editable = await asyncio.gather(asyncio.to_thread(_authorities), asyncio.to_thread(_update_fields))
    title = shown["job"]["name"] if shown["job"] is not None else shown["removed"]["name"]
    return render_page(request, f"{PACKAGE}/job.html", title=title, shown=shown, problem=None,
                       authorities=authorities, job=shown["job"], editable=editable, **_context())
