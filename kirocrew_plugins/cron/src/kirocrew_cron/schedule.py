"""When a job is due: schedule validation, due instants, jitter, skip dates, catch-up, ``at_time``, words.

Pure functions of a :class:`~kirocrew_cron.model.Job` and instants (Unix seconds): no clock, no
store, no I/O except reading ``cron.timezone`` (cached on the config file's signature). The tools,
the CLI and the page validate with it; the scheduler plans with it.

- ``every`` is anchored: instants are ``anchor + k * every`` (the anchor is the job's last handled due
  instant, else its creation), so a late run never drifts the ones after it.
- ``cron`` expressions are evaluated by cronsim (5 fields, Debian cron's day and DST semantics) in
  the job's zone: a wall time inside a spring-forward gap runs at the first minute after the gap,
  a fixed wall time inside a repeated fall-back hour runs once (its first pass), and expressions
  with ``*`` in the minute or hour field follow elapsed time (every real hour, both passes).
- ``skip_dates`` are dates in the job's zone; a run of them is jumped over day by day, never instant
  by instant, so a year of skipped dates costs at most 366 steps.
- Due instants never include jitter; :func:`fire_time` adds the job's deterministic jitter.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta, timezone
from functools import lru_cache
from typing import TYPE_CHECKING

from cronsim import CronSim
from kirocrew_core.coretools.contract import ToolRefused

from kirocrew_cron.errors import cron_error
from kirocrew_cron.model import (
    AT_MAX_TS,
    AT_TIME_MAX,
    CRON_EXPR_MAX,
    EVERY_MAX_SECS,
    EVERY_MIN_SECS,
    SKIP_DATES_MAX,
    Job,
    Schedule,
)
from kirocrew_cron.zones import zone, zone_problem

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

#: A cron expression's instants are counted one by one when about this many or fewer are due; a longer
#: gap (a minutely job missed for a month) is estimated day by day, so host start stays fast with many jobs.
COUNT_SCAN_MAX = 16
#: Shorthands cron users write, as the 5-field expressions they stand for (``@reboot`` is refused:
#: a job runs on a clock, not at host start).
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
#: Jitter bounds in seconds (the reference's): daily-ish jobs spread over most of an hour, hourly ones 5 min.
DAILY_JITTER_MAX = 3_540
HOURLY_JITTER_MAX = 300

_CRON_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
#: Each field's values for ``*`` (day-of-week 7, a second Sunday, is left out: ``*/7`` matches Sunday only).
_FIELD_BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
#: The names a field takes (month and day-of-week), upper-cased, as numbers.
_NAMES: tuple[dict[str, int], ...] = (
    {}, {}, {}, {name.upper(): n for n, name in enumerate(_MONTHS, start=1)},
    {name: n for n, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))})
_SKIP_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# Bounds every loop over instants: each pass either yields or jumps over at least one skipped date.
_MAX_STEPS = 4 * SKIP_DATES_MAX + 64


# -- validation ---------------------------------------------------------------------------------------


def _shown(text: str, limit: int = 40) -> str:
    """``text`` safe to quote in an error: printable, and cut (hostile input is echoed only in part)."""
    clean = "".join(ch if ch.isprintable() else "?" for ch in text[:limit])
    return clean + ("…" if len(text) > limit else "")


def cron_fields(expr: str) -> list[str]:
    """The 5 fields of ``expr`` (an alias expanded); ValueError saying what is wrong."""
    text = expr.strip()
    if text.startswith("@"):
        if text.lower() == "@reboot":
            raise ValueError("@reboot is not a schedule here: jobs run on the clock, not when the host starts")
        if text.lower() not in ALIASES:
            raise ValueError(f"unknown shorthand (known: {', '.join(ALIASES)})")
        text = ALIASES[text.lower()]
    fields = text.split()
    if len(fields) != 5:
        raise ValueError(f"expected 5 fields ({' '.join(_CRON_FIELDS)}), got {len(fields)}")
    return fields


@lru_cache(maxsize=1024)
def _expression(expr: str) -> str:
    return " ".join(cron_fields(expr))


def _field_value(text: str, index: int) -> int | None:
    if text.isdigit():
        return int(text)
    return _NAMES[index].get(text.upper())


def _check_steps(expr: str, fields: list[str]) -> None:
    """``cron_step_out_of_range`` for a step wider than its range (cronsim accepts ``*/99999999999999999999``).

    Such a step can match only the first value of its range, yet reads (and is described) as
    "every N": ``*/60`` in the minute field runs once an hour, not every 60 minutes.
    """
    for index, text in enumerate(fields):
        low, high = _FIELD_BOUNDS[index]
        for part in text.split(","):
            base, slash, step_text = part.partition("/")
            if not slash:
                continue
            start_text, dash, end_text = base.partition("-")
            start = low if base == "*" else _field_value(start_text, index)
            end = _field_value(end_text, index) if dash else high
            if start is None or end is None or not step_text.isdigit():
                continue  # not a plain range (cronsim has judged it)
            step = int(step_text)
            if step > end - start:
                shown = step_text if len(step_text) <= 6 else step_text[:6] + "…"
                raise cron_error("cron_step_out_of_range",
                                 f"Invalid cron expression: {_shown(expr)!r}: the {_CRON_FIELDS[index]} step {shown} "
                                 f"is wider than its range {start}-{end}, so it would match {start} only; use a "
                                 f"step of at most {max(1, end - start)}, or the value itself")


def validate_cron_expr(expr: object) -> str:
    """``expr`` normalised (single spaces), or ``cron_error("invalid_schedule", "Invalid cron expression: …")``.

    cronsim judges the fields (ranges, names, steps, ``L``/``W``/``#``); an expression that can never
    match (``0 0 30 2 *``) is refused here rather than left to never run, and a step wider than its
    range (``*/60`` in minutes) with ``cron_step_out_of_range`` (:func:`_check_steps`).
    """
    if not isinstance(expr, str):
        raise cron_error("invalid_schedule", "Invalid cron expression: must be a string")
    if len(expr) > CRON_EXPR_MAX:
        raise cron_error("invalid_schedule", f"Invalid cron expression: longer than {CRON_EXPR_MAX} characters")
    if not expr.isascii() or any(not ch.isprintable() and ch not in " \t" for ch in expr):
        raise cron_error("invalid_schedule",
                         f"Invalid cron expression: {_shown(expr)!r}: only printable ASCII is allowed")
    try:
        fields = cron_fields(expr)
        if any("?" in part for part in fields):
            raise ValueError("'?' is not supported; use '*'")
        normal = " ".join(fields)
        first = next(CronSim(normal, datetime(2000, 1, 1, tzinfo=timezone.utc)), None)
    except Exception as exc:  # noqa: BLE001 - hostile input must end in invalid_schedule, whatever cronsim raises
        raise cron_error("invalid_schedule", f"Invalid cron expression: {_shown(expr)!r}: {exc}") from None
    _check_steps(expr, fields)
    if first is None:
        raise cron_error("invalid_schedule", f"Invalid cron expression: {_shown(expr)!r}: it never matches")
    return expr.strip() if expr.strip().startswith("@") else normal


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)  # type: ignore[arg-type]


def validate_schedule(s: Schedule) -> Schedule:
    """``s`` checked and normalised; ``cron_error("invalid_schedule", …)`` in the reference's words."""
    if s.kind == "every":
        if s.cron_expr is not None:
            raise cron_error("invalid_schedule", "Cannot specify both cron_expr and every_secs")
        if s.at_ts is not None:
            raise cron_error("invalid_schedule", "Cannot specify both at and every_secs")
        every = s.every_secs
        if not _is_int(every):
            raise cron_error("invalid_schedule", "Must provide every_secs, at_ts, or cron_expr")
        assert every is not None
        if every < EVERY_MIN_SECS:
            shown = every if every > -(10**12) else "a smaller number"
            raise cron_error("invalid_schedule", f"Interval must be >= {EVERY_MIN_SECS}s, got {shown}")
        if every > EVERY_MAX_SECS:
            shown = every if every < 10**12 else "a larger number"
            raise cron_error("invalid_schedule", f"Interval must be <= {EVERY_MAX_SECS}s (30 days), got {shown}")
        return Schedule("every", every_secs=every)
    if s.kind == "at":
        if s.cron_expr is not None or s.every_secs is not None:
            raise cron_error("invalid_schedule", "A one-shot (at) schedule takes no every_secs or cron_expr")
        at = s.at_ts
        if not _is_number(at):
            raise cron_error("invalid_schedule", "Must provide every_secs, at_ts, or cron_expr")
        assert at is not None
        if not 0 <= at <= AT_MAX_TS:
            raise cron_error("invalid_schedule", f"timestamp {at} is outside 0..{AT_MAX_TS} (2100-01-01)")
        return Schedule("at", at_ts=float(at))
    if s.kind == "cron":
        if s.every_secs is not None:
            raise cron_error("invalid_schedule", "Cannot specify both cron_expr and every_secs")
        if s.at_ts is not None:
            raise cron_error("invalid_schedule", "Cannot specify both cron_expr and at")
        if s.cron_expr is None:
            raise cron_error("invalid_schedule", "Must provide every_secs, at_ts, or cron_expr")
        return Schedule("cron", cron_expr=validate_cron_expr(s.cron_expr))
    raise cron_error("invalid_schedule", f"unknown schedule kind {_shown(str(s.kind))!r} (every, at or cron)")


def check_future(at_ts: float, now: float) -> float:
    """``at_ts`` when it is after ``now``; else ``cron_error("time_in_past", "timestamp N is in the past")``."""
    if at_ts <= now:
        shown = int(at_ts) if float(at_ts).is_integer() else at_ts
        raise cron_error("time_in_past", f"timestamp {shown} is in the past")
    return at_ts


def check_timezone(name: object) -> str:
    """``name`` when it is empty or a known IANA zone; else ``cron_error("invalid_timezone", …)``."""
    if name == "":
        return ""
    if zone_problem(name) is not None:
        shown = _shown(name) if isinstance(name, str) else type(name).__name__
        raise cron_error("invalid_timezone", f"invalid timezone: {shown!r}")
    assert isinstance(name, str)
    return name


def check_skip_dates(dates: Iterable[str]) -> tuple[str, ...]:
    """The dates sorted and unique; ``cron_error("invalid_skip_date", …)`` for one that is not a real date."""
    if isinstance(dates, (str, bytes)) or not isinstance(dates, Iterable):
        raise cron_error("invalid_skip_date", "skip_dates must be a list of YYYY-MM-DD dates")
    dates = list(dates)
    if len(dates) > SKIP_DATES_MAX:
        raise cron_error("invalid_skip_date", f"at most {SKIP_DATES_MAX} skip_dates, got {len(dates)}")
    seen: set[str] = set()
    for value in dates:
        if not isinstance(value, str) or not _SKIP_DATE.match(value):
            shown = _shown(value) if isinstance(value, str) else value
            raise cron_error("invalid_skip_date", f"invalid skip_date: {shown!r} (expected YYYY-MM-DD)")
        try:
            date.fromisoformat(value)
        except ValueError:
            raise cron_error("invalid_skip_date", f"invalid skip_date: {value!r} (expected YYYY-MM-DD)") from None
        seen.add(value)
    return tuple(sorted(seen))


# -- zones --------------------------------------------------------------------------------------------

_configured: tuple[tuple[str, int, int, int], str] | None = None


@lru_cache(maxsize=16)
def _config_path(*environment: str | None) -> str:
    from kirocrew_core.home import config_file

    return str(config_file())


def _configured_zone_name() -> str:
    """``cron.timezone``, re-read only when the config file changes (a plan pass asks once per job: one stat)."""
    global _configured
    # The config file's path follows these variables (home.py); building it is ~30 µs, a stat ~2 µs.
    path = _config_path(*(os.environ.get(name) for name in ("HOME", "KIRO_HOME", "KIROCREW_HOME")))
    try:
        info = os.stat(path)
        signature = (path, info.st_ino, info.st_mtime_ns, info.st_size)  # a rewrite replaces the file: new inode
    except OSError:
        signature = (path, -1, -1, -1)
    if _configured is None or _configured[0] != signature:
        from kirocrew_cron.settings import configured_timezone

        _configured = (signature, configured_timezone())
    return _configured[1]


@lru_cache(maxsize=512)
def _job_zone(name: str) -> ZoneInfo:
    try:
        return zone(check_timezone(name))
    except (KeyError, ValueError, OSError):
        raise cron_error("invalid_timezone", f"invalid timezone: {_shown(name)!r}") from None


def resolve_zone(job_tz: str) -> ZoneInfo:
    """The zone a job is evaluated in: its own, else config ``cron.timezone``, else UTC.

    A job's own zone that is unknown raises ``invalid_timezone`` (it was valid when stored; guessing
    another zone would move its runs). A configured zone that is unknown falls back to UTC, as the
    config key documents.
    """
    if job_tz:
        return _job_zone(job_tz)
    configured = _configured_zone_name()
    if configured and zone_problem(configured) is None:
        return zone(configured)
    return zone("UTC")


# -- due instants -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    """What the instant arithmetic needs from a job, computed once per call."""

    job: Job
    tz: ZoneInfo
    skip: frozenset[str] = field(default_factory=frozenset)

    @property
    def cron_tz(self) -> ZoneInfo | timezone:
        # cronsim runs its fast path for the stdlib UTC object only.
        return timezone.utc if self.tz.key == "UTC" else self.tz


def _plan(job: Job) -> _Plan:
    return _Plan(job, resolve_zone(job.timezone), frozenset(job.skip_dates))


def _local_date(ts: float, tz: ZoneInfo) -> date:
    return datetime.fromtimestamp(ts, tz).date()


def _day_start(day: date, tz: ZoneInfo) -> float:
    """The first instant of ``day`` in ``tz`` (a midnight inside a DST gap: the end of the gap)."""
    return datetime(day.year, day.month, day.day, tzinfo=tz).timestamp()


def _skipped(plan: _Plan, ts: float) -> date | None:
    """The job-local date of ``ts`` when it is a skip date, else None."""
    if not plan.skip:
        return None
    day = _local_date(ts, plan.tz)
    return day if day.isoformat() in plan.skip else None


def _next_free_day(plan: _Plan, day: date) -> date:
    day += timedelta(days=1)
    while day.isoformat() in plan.skip:
        day += timedelta(days=1)
    return day


def _anchor(job: Job) -> float:
    return job.last_due_ts if job.last_due_ts is not None else job.created_ts


def _at_pending(job: Job) -> float | None:
    at = job.schedule.at_ts
    if at is None or (job.last_due_ts is not None and job.last_due_ts >= at):
        return None
    return at


def _every_k(anchor: float, step: int, after: float) -> int:
    """The smallest k >= 1 with ``anchor + k * step > after``."""
    k = max(1, math.floor((after - anchor) / step) + 1)
    while anchor + (k - 1) * step > after and k > 1:
        k -= 1
    while anchor + k * step <= after:
        k += 1
    return k


def _iter_every(plan: _Plan, after: float) -> Iterator[float]:
    job = plan.job
    step = job.schedule.every_secs or EVERY_MIN_SECS
    anchor = _anchor(job)
    k = _every_k(anchor, step, after)
    while anchor + k * step <= AT_MAX_TS:
        ts = anchor + k * step
        day = _skipped(plan, ts)
        if day is None:
            yield ts
            k += 1
        else:
            k = max(k + 1, _every_k(anchor, step, _day_start(_next_free_day(plan, day), plan.tz) - 1e-6))


def _iter_at(plan: _Plan, after: float) -> Iterator[float]:
    at = _at_pending(plan.job)
    if at is not None and at > after and _skipped(plan, at) is None:
        yield at


def _cron_sim(plan: _Plan, after: float, *, reverse: bool = False) -> CronSim:
    return CronSim(_expression(plan.job.schedule.cron_expr or ""), datetime.fromtimestamp(after, plan.cron_tz),
                   reverse=reverse)


def _iter_cron(plan: _Plan, after: float) -> Iterator[float]:
    sim = _cron_sim(plan, after)
    last = after
    stalls = 0
    while True:
        try:
            ts = next(sim).timestamp()
        except StopIteration:  # cronsim gives up after 50 years without a match
            return
        if ts <= last:
            # cronsim walks fixed wall times naively: inside a repeated hour it can name the first pass
            # of a time already behind us; step on.
            stalls += 1
            if stalls > _MAX_STEPS:
                return
            continue
        stalls = 0
        day = _skipped(plan, ts)
        if day is None:
            last = ts
            yield ts
            continue
        resume = max(ts, _day_start(_next_free_day(plan, day), plan.tz) - 1)
        last = ts
        sim = _cron_sim(plan, resume)


def _iter_due(job: Job, after: float, plan: _Plan | None = None) -> Iterator[float]:
    """The job's due instants strictly after ``after``, increasing, skip dates left out."""
    plan = plan or _plan(job)
    kind = job.schedule.kind
    if kind == "every":
        return _iter_every(plan, after)
    if kind == "at":
        return _iter_at(plan, after)
    return _iter_cron(plan, after)


def next_due(job: Job, after: float) -> float | None:
    """The first scheduled instant after ``after`` (no jitter), skip dates left out; None: never again.

    ``every``: ``anchor + k * every`` (anchor = ``last_due_ts``, else ``created_ts``). ``at``: its
    instant, unless already handled (``last_due_ts >= at_ts``), past, or on a skip date.
    """
    return next(_iter_due(job, after), None)


def due_between(job: Job, start: float, end: float, limit: int) -> tuple[list[float], int]:
    """The first ``limit`` due instants in ``(start, end]``, oldest first, and how many there are in all.

    Bounded work whatever the gap: ``every`` counts arithmetically (minus the skipped dates'
    instants); a cron expression's instants are counted one by one when there are at most
    :data:`COUNT_SCAN_MAX` of them, else estimated day by day (:func:`_cron_estimate`).
    """
    first, total, _ = _scan(job, start, end, limit)
    return first, total


def _scan(job: Job, start: float, end: float, limit: int) -> tuple[list[float], int, list[float] | None]:
    """:func:`due_between`, plus every instant when they were walked (a cron expression's few, a one-shot's
    one), so catch-up need not walk them again; None when they were counted or estimated instead.
    """
    if end <= start:
        return [], 0, []
    plan = _plan(job)
    wanted = max(0, limit)
    if job.schedule.kind == "every":
        first, total = _every_between(plan, start, end, wanted)
        return first, total, None
    if job.schedule.kind == "cron":
        estimate = _cron_estimate(plan, start, end)
        if estimate > COUNT_SCAN_MAX:
            head: list[float] = []
            for ts in _iter_due(job, start, plan) if wanted else ():
                if ts > end:
                    break
                head.append(ts)
                if len(head) >= wanted:
                    break
            return head, max(estimate, len(head)), None
    walked: list[float] = []
    for ts in _iter_due(job, start, plan):
        if ts > end:
            break
        walked.append(ts)
        if len(walked) > max(2 * COUNT_SCAN_MAX, wanted):  # the estimate was far off: stop walking
            return walked[:wanted], max(len(walked), _cron_estimate(plan, start, end)), None
    return walked[:wanted], len(walked), walked


@lru_cache(maxsize=256)
def _fields(expr: str) -> CronSim:
    """The expression parsed (its field sets), for counting; never iterated."""
    return CronSim(_expression(expr), datetime(2000, 1, 1, tzinfo=timezone.utc))


@lru_cache(maxsize=1024)
def _matching_days(expr: str, year: int) -> tuple[int, ...]:
    """The ordinals of the dates in ``year`` the expression's day and month fields match (dates have no zone)."""
    sim = _fields(expr)
    day, found = date(year, 1, 1), []
    while day.year == year:
        if day.month in sim.months and sim.match_day(day):
            found.append(day.toordinal())
        day += timedelta(days=1)
    return tuple(found)


def _matching_between(expr: str, first: date, stop: date) -> int:
    """How many dates in ``[first, stop)`` the expression's day and month fields match."""
    low, high, count = first.toordinal(), stop.toordinal(), 0
    for year in range(first.year, stop.year + 1):
        days = _matching_days(expr, year)
        count += bisect.bisect_left(days, high) - bisect.bisect_left(days, low)
    return count


@lru_cache(maxsize=256)
def _minutes_of_day(expr: str) -> tuple[int, ...]:
    """The wall-clock minutes of a day (``hour * 60 + minute``) the expression runs at, sorted."""
    sim = _fields(expr)
    return tuple(sorted(hour * 60 + minute for hour in sim.hours for minute in sim.minutes))


def _cron_estimate(plan: _Plan, after: float, end: float) -> int:
    """About how many instants of the job's expression lie in ``(after, end]``: its runs on the matching days
    (skip dates left out), whole days times the runs per day, the first and last day by their wall-clock
    minutes. Off only by the runs a DST change adds or removes. Each expression's matching days are
    worked out once per year and cached, so a year or a decade costs a few look-ups.
    """
    expr = plan.job.schedule.cron_expr or ""
    sim = _fields(expr)
    minutes = _minutes_of_day(expr)
    tz = plan.tz

    def matches(day: date) -> bool:
        return day.isoformat() not in plan.skip and day.month in sim.months and sim.match_day(day)

    def runs_until(moment: datetime) -> int:
        """The day's runs at or before ``moment``'s wall-clock minute."""
        return bisect.bisect_right(minutes, moment.hour * 60 + moment.minute)

    start_at, end_at = datetime.fromtimestamp(after, tz), datetime.fromtimestamp(end, tz)
    first, last = start_at.date(), end_at.date()
    if first >= last:
        return max(0, runs_until(end_at) - runs_until(start_at)) if matches(first) else 0
    total = (len(minutes) - runs_until(start_at)) if matches(first) else 0
    total += runs_until(end_at) if matches(last) else 0
    whole_first, whole_stop = first + timedelta(days=1), last  # the whole days: [whole_first, whole_stop)
    if whole_first < whole_stop:
        days = _matching_between(expr, whole_first, whole_stop)
        days -= sum(1 for text in plan.skip if whole_first <= (skipped := date.fromisoformat(text)) < whole_stop
                    and skipped.month in sim.months and sim.match_day(skipped))
        total += days * len(minutes)
    return max(0, total)


def _every_count(anchor: float, step: int, start: float, end: float) -> int:
    """How many ``anchor + k * step`` (k >= 1) lie in ``(start, end]``."""
    if end <= start:
        return 0
    low = _every_k(anchor, step, start)
    high = _every_k(anchor, step, end) - 1
    return max(0, high - low + 1)


def _every_between(plan: _Plan, start: float, end: float, limit: int) -> tuple[list[float], int]:
    job = plan.job
    step = job.schedule.every_secs or EVERY_MIN_SECS
    anchor = _anchor(job)
    total = _every_count(anchor, step, start, end)
    for text in plan.skip:
        day = date.fromisoformat(text)
        low, high = _day_start(day, plan.tz), _day_start(day + timedelta(days=1), plan.tz)
        total -= _every_count(anchor, step, max(start, low - 1e-6), min(end, high - 1e-6))
    first: list[float] = []
    if limit > 0:
        for ts in _iter_every(plan, start):
            if ts > end or len(first) >= limit:
                break
            first.append(ts)
    return first, max(total, len(first))


def latest_due(job: Job, start: float, end: float, limit: int) -> list[float]:
    """The last ``limit`` due instants in ``(start, end]``, oldest first (what catch-up runs)."""
    if end <= start or limit <= 0:
        return []
    plan = _plan(job)
    kind = job.schedule.kind
    found: list[float] = []
    if kind == "at":
        return [ts for ts in _iter_at(plan, start) if ts <= end][:limit]
    if kind == "every":
        step = job.schedule.every_secs or EVERY_MIN_SECS
        anchor = _anchor(job)
        k = _every_k(anchor, step, end) - 1
        for _ in range(limit + _MAX_STEPS):
            ts = anchor + k * step
            if k < 1 or ts <= start or len(found) >= limit:
                break
            day = _skipped(plan, ts)
            if day is None:
                found.append(ts)
                k -= 1
            else:
                k = min(k - 1, _every_k(anchor, step, _day_start(day, plan.tz) - 1e-6) - 1)
        return found[::-1]
    # cron: walk backwards from the end (reverse cronsim yields instants before its start, strictly).
    sim = _cron_sim(plan, math.floor(end) + 1, reverse=True)
    last = math.inf
    for _ in range(limit + _MAX_STEPS + limit):
        try:
            ts = next(sim).timestamp()
        except StopIteration:
            break
        if ts > end or ts >= last:
            continue
        if ts <= start or len(found) >= limit:
            break
        day = _skipped(plan, ts)
        if day is None:
            found.append(ts)
            last = ts
        else:
            sim = _cron_sim(plan, min(ts, _day_start(day, plan.tz)), reverse=True)
            last = ts
    return found[::-1]


# -- catch-up -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CatchUpPlan:
    """What to do about the due instants a job missed while no scheduler ran.

    ``run``: instants to run now, oldest first; ``missed``: instants not run (recorded as missed);
    ``last_due``: what ``job.last_due_ts`` becomes (unchanged when nothing was due).
    """

    run: list[float]
    missed: int
    last_due: float | None


def plan_catch_up(job: Job, now: float, grace: float) -> CatchUpPlan:
    """The job's policy applied to its instants in ``(last_due_ts or created_ts, now - grace]``.

    ``skip`` runs none, ``once`` the latest, ``all`` the latest ``catch_up_max`` (oldest first: the
    most recent ones matter most; the older rest are missed). Whether a paused job catches up is
    the caller's decision: this plans from the job as given.
    """
    start = _anchor(job)
    end = now - grace
    _, total, walked = _scan(job, start, end, 0)
    if total == 0:
        return CatchUpPlan([], 0, job.last_due_ts)
    keep = {"skip": 0, "once": 1}.get(job.catch_up, max(1, job.catch_up_max))
    wanted = max(1, min(keep, total))
    latest = walked[-wanted:] if walked is not None else latest_due(job, start, end, wanted)
    if not latest:  # an estimate said "some" but none is there: nothing to do
        return CatchUpPlan([], 0, job.last_due_ts)
    run = latest[-keep:] if keep else []
    return CatchUpPlan(run, max(0, total - len(run)), latest[-1])


# -- jitter -------------------------------------------------------------------------------------------


def jitter_max(job: Job) -> int:
    """The upper bound of the job's jitter in seconds (0: it runs on the due instant)."""
    schedule = job.schedule
    if job.strict_schedule or schedule.kind == "at":
        return 0
    if schedule.kind == "every":
        every = schedule.every_secs or 0
        if every >= 86_400:
            return DAILY_JITTER_MAX
        return HOURLY_JITTER_MAX if every >= 3_600 else 0
    try:
        minute, hour = cron_fields(schedule.cron_expr or "")[:2]
    except ValueError:
        return 0
    if minute == "*" or "/" in minute or "," in minute:
        return 0
    if hour.isdigit():
        return DAILY_JITTER_MAX
    return HOURLY_JITTER_MAX


def jitter(job: Job, due: float) -> float:
    """Seconds added to ``due``: uniform in ``[0, jitter_max(job)]`` from blake2b(job id, due), so the same
    instant always gets the same jitter (a re-plan never moves a run) and jobs due together spread out.
    """
    bound = jitter_max(job)
    if bound <= 0:
        return 0.0
    digest = hashlib.blake2b(f"{job.id}\0{round(due * 1000)}".encode(), digest_size=8).digest()
    return float(int.from_bytes(digest, "big") % (bound + 1))


def fire_time(job: Job, due: float) -> float:
    """When the scheduler starts the run for the due instant ``due``: ``due`` plus the job's jitter."""
    return due + jitter(job, due)


# -- words --------------------------------------------------------------------------------------------


def _interval_words(secs: int) -> str:
    if secs < 3_600:
        return f"every {secs}s"
    hours, rest = divmod(secs, 3_600)
    minutes, seconds = divmod(rest, 60)
    parts = [f"{hours}h"] + ([f"{minutes}m"] if minutes else []) + ([f"{seconds}s"] if seconds else [])
    return "every " + " ".join(parts)


def _clock_words(moment: datetime) -> str:
    hour = moment.hour % 12 or 12
    return f"{hour:02d}:{moment.minute:02d} {'AM' if moment.hour < 12 else 'PM'} {moment.tzname()}"


@lru_cache(maxsize=512)
def cron_words(expr: str) -> str:
    """A cron expression in English ("At 09:00, Monday through Friday"); the expression itself if that fails."""
    try:
        from cron_descriptor import ExpressionDescriptor, Options

        options = Options(locale_code="en_US", use_24hour_time_format=True)
        return str(ExpressionDescriptor(_expression(expr), options).get_description())
    except Exception:  # noqa: BLE001 - words are a courtesy: a describer failure shows the expression
        return f"cron {expr}"


def describe(job: Job, now: float) -> str:
    """The schedule in words: "every 2h", "every 90s", "at 05:00 PM CET, Mar 28", or the cron expression in
    words with its zone ("At 09:00, Monday through Friday (Europe/Paris)").
    """
    schedule = job.schedule
    if schedule.kind == "every":
        return _interval_words(int(schedule.every_secs or 0))
    try:
        tz = resolve_zone(job.timezone)
    except ToolRefused:  # a view says so rather than failing the whole list
        return f"{describe(replace(job, timezone='UTC'), now)} [unknown time zone {_shown(job.timezone)!r}]"
    if schedule.kind == "at":
        moment = datetime.fromtimestamp(schedule.at_ts or 0.0, tz)
        text = f"at {_clock_words(moment)}"
        today = datetime.fromtimestamp(now, tz).date()
        if moment.date() != today:
            text += f", {_MONTHS[moment.month - 1]} {moment.day}"
            if moment.year != today.year:
                text += f" {moment.year}"
        return text
    return f"{cron_words(schedule.cron_expr or '')} ({tz.key})"


# -- at_time ------------------------------------------------------------------------------------------

_UNITS = {
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3_600, "hr": 3_600, "hrs": 3_600, "hour": 3_600, "hours": 3_600,
    "d": 86_400, "day": 86_400, "days": 86_400,
    "w": 604_800, "wk": 604_800, "wks": 604_800, "week": 604_800, "weeks": 604_800,
}
_IN = re.compile(r"^in\s+(an?|\d{1,9}(?:\.\d{1,6})?)\s*([a-z]+)$")
_TOMORROW = re.compile(r"^tomorrow(?:\s+at)?\s+(.+)$")
_AT = re.compile(r"^at\s+(.+)$")
_TWELVE = re.compile(r"^(\d{1,2})(?::(\d{2}))?\s?([ap])m$")  # %I%p, %I:%M%p, %I %p, %I:%M %p
_TWENTY_FOUR = re.compile(r"^(\d{1,2}):(\d{2})$")  # %H:%M
_ISO = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[ t](\d{1,2}):(\d{2})(?::(\d{2}))?$")
AT_TIME_EXAMPLES = "Examples: '5pm', 'in 30 minutes', 'tomorrow 9am'"


def _unparseable(text: str) -> Exception:
    return cron_error("unparseable_time", f"could not parse time '{_shown(text, AT_TIME_MAX)}'. {AT_TIME_EXAMPLES}")


def wall_time_instant(naive: datetime, tz: ZoneInfo) -> float:
    """The instant of a wall-clock time in ``tz``: a repeated (fall-back) time is its first pass, a time
    inside a spring-forward gap the first minute after the gap (as cron runs it).
    """
    for _ in range(24 * 60):
        ts = datetime(naive.year, naive.month, naive.day, naive.hour, naive.minute, naive.second,
                      tzinfo=tz).timestamp()
        if datetime.fromtimestamp(ts, tz).replace(tzinfo=None) == naive:
            return ts
        naive = (naive + timedelta(minutes=1)).replace(second=0)
    raise ValueError("no such wall time")  # pragma: no cover - no zone has a day-long gap


def _clock(text: str) -> tuple[int, int] | None:
    """Hour and minute of a time-of-day form, or None when ``text`` is not one."""
    if match := _TWELVE.match(text):
        hour, minute = int(match[1]), int(match[2] or 0)
        if not 1 <= hour <= 12 or minute > 59:
            return None
        return (hour % 12) + (12 if match[3] == "p" else 0), minute
    if match := _TWENTY_FOUR.match(text):
        hour, minute = int(match[1]), int(match[2])
        return (hour, minute) if hour <= 23 and minute <= 59 else None
    return None


def _checked(ts: float, now: float, tz: ZoneInfo) -> float:
    if ts <= now:
        moment = datetime.fromtimestamp(ts, tz)
        raise cron_error("time_in_past", f"resolved time {_clock_words(moment)} is in the past")
    if ts > AT_MAX_TS:
        raise cron_error("invalid_schedule", f"resolved time is after 2100-01-01 (timestamp {int(ts)})")
    return ts


def parse_at_time(text: str, now: float, tz: ZoneInfo) -> float:
    """A human time as an instant, read in ``tz`` (the configured zone), in the reference's order:

    1. ``in N <unit>`` (seconds … weeks; ``in an hour``): N units of elapsed time from ``now``;
    2. an optional ``tomorrow`` prefix, a leading ``at`` dropped, then ``5pm``, ``5:30pm``, ``17:00``,
       ``5 pm``, ``5:30 pm``: today, or tomorrow when that time has passed (always tomorrow after
       ``tomorrow``);
    3. ``2026-03-28 14:00`` (also with ``T`` and ``:SS``).

    Refusals: ``unparseable_time`` (the reference's text with examples), ``time_in_past``.
    """
    if not isinstance(text, str):
        raise cron_error("unparseable_time", f"at_time must be a string. {AT_TIME_EXAMPLES}")
    if len(text) > AT_TIME_MAX:
        raise cron_error("unparseable_time", f"at_time is longer than {AT_TIME_MAX} characters. {AT_TIME_EXAMPLES}")
    words = " ".join(text.lower().split())
    if match := _IN.match(words):
        amount = 1.0 if match[1] in ("a", "an") else float(match[1])
        unit = _UNITS.get(match[2])
        if unit is None:
            raise _unparseable(text)
        return _checked(now + amount * unit, now, tz)
    tomorrow = False
    if match := _TOMORROW.match(words):
        tomorrow, words = True, match[1]
    elif match := _AT.match(words):
        words = match[1]
    clock = _clock(words)
    if clock is not None:
        today = datetime.fromtimestamp(now, tz).date()
        day = today + timedelta(days=1) if tomorrow else today
        ts = wall_time_instant(datetime(day.year, day.month, day.day, *clock), tz)
        if ts <= now and not tomorrow:
            day += timedelta(days=1)
            ts = wall_time_instant(datetime(day.year, day.month, day.day, *clock), tz)
        return _checked(ts, now, tz)
    if not tomorrow and (match := _ISO.match(words)):
        try:
            naive = datetime(int(match[1]), int(match[2]), int(match[3]), int(match[4]), int(match[5]),
                             int(match[6] or 0))
        except ValueError:
            raise _unparseable(text) from None
        return _checked(wall_time_instant(naive, tz), now, tz)
    raise _unparseable(text)
