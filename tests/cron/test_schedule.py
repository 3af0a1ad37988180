"""Schedules: validation, due instants across time zones and DST changes, skip dates, catch-up, jitter, words, at_time.

Pure logic on plain instants: no clock, no sleeping. ``cron.timezone`` is set through the real config
file of the test's isolated crew home.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from kirocrew_core.config import set_value
from kirocrew_core.coretools.contract import ToolRefused

from kirocrew_cron import schedule as sched
from kirocrew_cron.model import AT_MAX_TS, SKIP_DATES_MAX, Job, Schedule

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
PARIS = ZoneInfo("Europe/Paris")
UTC = ZoneInfo("UTC")


def at(tz: ZoneInfo, *parts: int, fold: int = 0) -> float:
    return datetime(*parts, tzinfo=tz, fold=fold).timestamp()  # type: ignore[arg-type, misc]


def local(ts: float, tz: ZoneInfo) -> str:
    return datetime.fromtimestamp(ts, tz).strftime("%Y-%m-%d %H:%M %Z")


def every_job(secs: int, created: float = 0.0, **changes: Any) -> Job:
    return replace(Job(id="a1", name="n", schedule=Schedule("every", every_secs=secs), created_ts=created), **changes)


def cron_job(expr: str, tz: str = "", created: float = 0.0, **changes: Any) -> Job:
    job = Job(id="c1", name="n", schedule=Schedule("cron", cron_expr=expr), timezone=tz, created_ts=created)
    return replace(job, **changes)


def at_job(when: float, created: float = 0.0, **changes: Any) -> Job:
    return replace(Job(id="b1", name="n", schedule=Schedule("at", at_ts=when), created_ts=created), **changes)


def walk(job: Job, start: float, end: float) -> list[float]:
    """Every due instant in (start, end] the way a scheduler finds them: next_due from the last one."""
    found: list[float] = []
    t = start
    while (nxt := sched.next_due(job, t)) is not None and nxt <= end:
        assert nxt > t, "next_due must move forward"
        found.append(nxt)
        t = nxt
        assert len(found) < 10_000, "next_due loops"
    return found


class _Refusal:
    def __init__(self, code: str) -> None:
        self.code = code
        self.error: ToolRefused | None = None

    def __enter__(self) -> _Refusal:
        return self

    def __exit__(self, kind: Any, error: Any, tb: Any) -> bool:
        assert isinstance(error, ToolRefused), f"expected a refusal {self.code}, got {error!r}"
        assert error.code == self.code, f"{error.code}: {error}"
        self.error = error
        return True

    @property
    def message(self) -> str:
        return str(self.error)


# -- validation ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("expr", [
    "* * * * *", "*/15 * * * *", "0 9 * * MON-FRI", "0 9 * * mon-fri", "30 2 * * *", "0 0 1 JAN *",
    "0 0 L * *", "0 9 * * 1#2", "0 0 * * 7", "5,35 8-18/2 * * 1-5", "@daily", "@hourly", "@weekly",
    "  0   9 *  * *  ", "0 0 29 2 *",
])
def test_well_formed_cron_expressions_are_accepted(expr: str) -> None:
    checked = sched.validate_schedule(Schedule("cron", cron_expr=expr))
    assert checked.kind == "cron"
    assert sched.next_due(cron_job(checked.cron_expr or ""), 0.0) is not None


def test_a_cron_expression_is_stored_with_single_spaces() -> None:
    assert sched.validate_cron_expr("  0   9 *  * * ") == "0 9 * * *"


@pytest.mark.parametrize(("expr", "why"), [
    ("* * * * * *", "expected 5 fields"),
    ("* * * *", "expected 5 fields"),
    ("", "expected 5 fields"),
    ("@reboot", "@reboot is not a schedule"),
    ("@often", "unknown shorthand"),
    ("60 * * * *", "Bad minute"),
    ("* 24 * * *", "Bad hour"),
    ("0 0 32 * *", "Bad day-of-month"),
    ("* * * 13 *", "Bad month"),
    ("* * * * 8", "Bad day-of-week"),
    ("*/0 * * * *", "Bad minute"),
    ("0 0 30 2 *", "Bad day-of-month"),
    ("? * * * *", "'?' is not supported"),
    ("1-2-3 * * * *", "Bad minute"),
    ("99999999999999999999 * * * *", "Bad minute"),
    ("0 0 * * FOO", "Bad day-of-week"),
])
def test_malformed_cron_expressions_are_refused_with_the_reason(expr: str, why: str) -> None:
    with _Refusal("invalid_schedule") as refusal:
        sched.validate_schedule(Schedule("cron", cron_expr=expr))
    assert refusal.message.startswith("Invalid cron expression: ")
    assert why in refusal.message


@pytest.mark.parametrize(("expr", "where"), [
    ("*/99999999999999999999 * * * *", "the minute step 999999… is wider than its range 0-59"),  # the attack
    ("*/60 * * * *", "the minute step 60 is wider than its range 0-59"),
    ("0-59/1000 * * * *", "the minute step 1000"),
    ("* */25 * * *", "the hour step 25 is wider than its range 0-23"),
    ("0 0 */400 * *", "the day-of-month step 400 is wider than its range 1-31"),
    ("0 0 */31 * *", "the day-of-month step 31"),
    ("0 0 * JAN-MAR/3 *", "the month step 3 is wider than its range 1-3"),
    ("0 0 * * 1/9", "the day-of-week step 9 is wider than its range 1-6"),
    ("0 0 * * */7", "the day-of-week step 7 is wider than its range 0-6"),
    ("5,10-20/15 * * * *", "the minute step 15 is wider than its range 10-20"),
])
def test_a_step_wider_than_its_range_is_refused_not_described_as_every_n(expr: str, where: str) -> None:
    """cronsim accepts ``*/99999999999999999999`` (it matches minute 0 only) and the words said "Every
    99999999999999999999 minutes"; such a step can match only its range's first value."""
    with _Refusal("cron_step_out_of_range") as refusal:
        sched.validate_schedule(Schedule("cron", cron_expr=expr))
    assert refusal.message.startswith(f"Invalid cron expression: {sched._shown(expr)!r}: {where}")
    assert len(refusal.message) < 300


@pytest.mark.parametrize("expr", ["*/59 * * * *", "*/1 * * * *", "0 */23 * * *", "0 0 1-31/30 * *",
                                  "0 0 * JAN-DEC/3 *", "0 9 * * MON-FRI/2", "0 0 * * 0-7/7", "0 0 * * */6"])
def test_a_step_within_its_range_is_accepted(expr: str) -> None:
    assert sched.validate_cron_expr(expr) == expr


@pytest.mark.parametrize("expr", ["* * * * *" + " " * 200, "0 0 * * *\x00", "0\n0 * * *", "١ * * * *",
                                  "0 0 * * *\u202e"])
def test_hostile_cron_input_is_refused_without_echoing_it_whole(expr: str) -> None:
    with _Refusal("invalid_schedule") as refusal:
        sched.validate_cron_expr(expr)
    assert "\x00" not in refusal.message and "\n" not in refusal.message and "\u202e" not in refusal.message
    assert len(refusal.message) < 200


def test_a_cron_expression_that_is_not_a_string_is_refused() -> None:
    with _Refusal("invalid_schedule"):
        sched.validate_cron_expr(["* * * * *"])


@pytest.mark.parametrize(("secs", "message"), [
    (59, "Interval must be >= 60s, got 59"),
    (0, "Interval must be >= 60s, got 0"),
    (-5, "Interval must be >= 60s, got -5"),
    (2_592_001, "Interval must be <= 2592000s (30 days), got 2592001"),
])
def test_intervals_outside_60s_to_30_days_are_refused(secs: int, message: str) -> None:
    with _Refusal("invalid_schedule") as refusal:
        sched.validate_schedule(Schedule("every", every_secs=secs))
    assert refusal.message == message


@pytest.mark.parametrize("secs", [60, 90, 3600, 2_592_000])
def test_intervals_inside_the_limits_are_accepted(secs: int) -> None:
    assert sched.validate_schedule(Schedule("every", every_secs=secs)) == Schedule("every", every_secs=secs)


@pytest.mark.parametrize("value", [True, 60.5, "60", None])
def test_an_interval_must_be_a_whole_number(value: Any) -> None:
    with _Refusal("invalid_schedule"):
        sched.validate_schedule(Schedule("every", every_secs=value))


@pytest.mark.parametrize("value", [-1.0, AT_MAX_TS + 1, float("nan"), float("inf"), None, "soon", True])
def test_a_one_shot_instant_outside_0_to_2100_is_refused(value: Any) -> None:
    with _Refusal("invalid_schedule"):
        sched.validate_schedule(Schedule("at", at_ts=value))


def test_a_schedule_of_two_kinds_is_refused_in_the_references_words() -> None:
    with _Refusal("invalid_schedule") as refusal:
        sched.validate_schedule(Schedule("every", every_secs=60, cron_expr="* * * * *"))
    assert refusal.message == "Cannot specify both cron_expr and every_secs"
    with _Refusal("invalid_schedule"):
        sched.validate_schedule(Schedule("at", at_ts=10.0, every_secs=60))
    with _Refusal("invalid_schedule"):
        sched.validate_schedule(Schedule("yearly"))  # type: ignore[arg-type]


def test_a_past_instant_is_refused_in_the_references_words() -> None:
    assert sched.check_future(1000.0, 999.0) == 1000.0
    with _Refusal("time_in_past") as refusal:
        sched.check_future(1000.0, 1000.0)
    assert refusal.message == "timestamp 1000 is in the past"


@pytest.mark.parametrize("name", ["Mars/Base", "../etc/passwd", "Europe/Paris; rm", "x" * 60, 5])
def test_unknown_time_zones_are_refused(name: Any) -> None:
    with _Refusal("invalid_timezone") as refusal:
        sched.check_timezone(name)
    assert refusal.message.startswith("invalid timezone: ")


def test_known_time_zones_and_the_empty_zone_are_accepted() -> None:
    assert sched.check_timezone("America/New_York") == "America/New_York"
    assert sched.check_timezone("") == ""


def test_skip_dates_come_back_sorted_and_unique() -> None:
    assert sched.check_skip_dates(["2026-12-25", "2026-01-01", "2026-12-25"]) == ("2026-01-01", "2026-12-25")
    assert sched.check_skip_dates([]) == ()


@pytest.mark.parametrize("bad", ["2026-02-30", "2026-1-1", "26-01-01", "tomorrow", "2026-01-01 ", 20260101])
def test_a_skip_date_that_is_not_a_real_date_is_refused(bad: Any) -> None:
    with _Refusal("invalid_skip_date") as refusal:
        sched.check_skip_dates(["2026-01-02", bad])
    assert refusal.message.endswith("(expected YYYY-MM-DD)")
    assert refusal.message.startswith("invalid skip_date: ")


def test_skip_dates_may_come_from_any_iterable() -> None:
    assert sched.check_skip_dates(d for d in ("2026-01-02", "2026-01-01")) == ("2026-01-01", "2026-01-02")


def test_a_config_change_is_seen_at_the_next_call() -> None:
    import kirocrew_cron.settings  # noqa: F401 - declares cron.timezone

    zones = ["Europe/Paris", "Europe/Rome", "Asia/Tokyo", "Europe/Oslo"]  # Paris/Rome/Oslo: same length
    for name in zones:
        set_value("cron.timezone", name)
        assert sched.resolve_zone("").key == name


def test_too_many_skip_dates_or_a_bare_string_are_refused() -> None:
    start = date(2026, 1, 1)
    many = [(start + timedelta(days=i)).isoformat() for i in range(SKIP_DATES_MAX + 1)]
    with _Refusal("invalid_skip_date"):
        sched.check_skip_dates(many)
    with _Refusal("invalid_skip_date"):
        sched.check_skip_dates("2026-01-01")


# -- zones --------------------------------------------------------------------------------------------


def test_a_job_is_evaluated_in_its_zone_then_the_configured_one_then_utc() -> None:
    import kirocrew_cron.settings  # noqa: F401 - declares cron.timezone

    assert sched.resolve_zone("").key == "UTC"
    set_value("cron.timezone", "Europe/Paris")
    assert sched.resolve_zone("").key == "Europe/Paris"
    assert sched.resolve_zone("Asia/Tokyo").key == "Asia/Tokyo"
    set_value("cron.timezone", "America/New_York")
    assert sched.resolve_zone("").key == "America/New_York"
    job = cron_job("0 9 * * *")
    assert local(sched.next_due(job, at(UTC, 2026, 6, 1)) or 0, NEW_YORK) == "2026-06-01 09:00 EDT"


def test_a_stored_job_with_an_unknown_zone_is_refused_not_moved() -> None:
    with _Refusal("invalid_timezone"):
        sched.resolve_zone("Nowhere/Town")


# -- due instants: every and at -------------------------------------------------------------------------


def test_an_interval_is_anchored_at_creation_and_never_drifts() -> None:
    job = every_job(3600, created=1000.0)
    assert sched.next_due(job, 1000.0) == 4600.0
    assert sched.next_due(job, 0.0) == 4600.0
    late = 4600.0 + 1234.5  # the run started late: the next instant stays on the grid
    assert sched.next_due(job, late) == 8200.0
    assert sched.next_due(job, 8200.0) == 11800.0


def test_an_interval_counts_from_the_last_handled_due_instant() -> None:
    job = every_job(600, created=0.0, last_due_ts=5000.0)
    assert sched.next_due(job, 5000.0) == 5600.0
    assert sched.next_due(job, 100.0) == 5600.0


def test_a_one_shot_is_due_once_and_never_after_it_was_handled() -> None:
    job = at_job(5000.0)
    assert sched.next_due(job, 10.0) == 5000.0
    assert sched.next_due(job, 5000.0) is None
    assert sched.next_due(replace(job, last_due_ts=5000.0), 10.0) is None


def test_a_one_shot_on_a_skip_date_never_runs() -> None:
    when = at(UTC, 2026, 5, 1, 12)
    assert sched.next_due(at_job(when, skip_dates=("2026-05-01",)), 0.0) is None


def test_an_interval_skips_the_instants_on_a_skip_date_in_the_jobs_zone() -> None:
    created = at(BERLIN, 2026, 5, 1, 8)
    job = every_job(86_400, created=created, timezone="Europe/Berlin", skip_dates=("2026-05-03", "2026-05-04"))
    assert [local(t, BERLIN) for t in walk(job, created, at(BERLIN, 2026, 5, 7))] == [
        "2026-05-02 08:00 CEST", "2026-05-05 08:00 CEST", "2026-05-06 08:00 CEST"]


def test_skip_dates_are_dates_in_the_jobs_zone_not_utc() -> None:
    # 23:30 UTC on 1 May is already 2 May in Berlin.
    job = cron_job("30 23 * * *", created=0.0)
    berlin = replace(job, timezone="Europe/Berlin", schedule=Schedule("cron", cron_expr="30 1 * * *"),
                     skip_dates=("2026-05-02",))
    assert local(sched.next_due(berlin, at(UTC, 2026, 5, 1, 12)) or 0, BERLIN) == "2026-05-03 01:30 CEST"


def test_a_year_of_skip_dates_is_jumped_not_walked() -> None:
    start = date(2026, 1, 1)
    dates = tuple((start + timedelta(days=i)).isoformat() for i in range(SKIP_DATES_MAX))
    minutely = cron_job("* * * * *", skip_dates=dates)
    assert local(sched.next_due(minutely, at(UTC, 2025, 12, 31, 23, 59)) or 0, UTC) == "2027-01-02 00:00 UTC"
    every = every_job(60, created=at(UTC, 2025, 12, 31, 23, 59), skip_dates=dates)
    assert local(sched.next_due(every, at(UTC, 2025, 12, 31, 23, 59)) or 0, UTC) == "2027-01-02 00:00 UTC"


# -- due instants: cron and DST ---------------------------------------------------------------------------


def test_a_cron_job_follows_its_expression_in_its_zone() -> None:
    job = cron_job("0 9 * * MON-FRI", tz="Europe/Paris")
    # 2026-05-01 is a Friday.
    found = walk(job, at(PARIS, 2026, 5, 1), at(PARIS, 2026, 5, 8, 23))
    assert [local(t, PARIS) for t in found] == [
        "2026-05-01 09:00 CEST", "2026-05-04 09:00 CEST", "2026-05-05 09:00 CEST", "2026-05-06 09:00 CEST",
        "2026-05-07 09:00 CEST", "2026-05-08 09:00 CEST"]


@pytest.mark.parametrize(("tz", "day", "expected"), [
    (BERLIN, (2026, 3, 29), ["2026-03-28 02:30 CET", "2026-03-29 03:00 CEST", "2026-03-30 02:30 CEST"]),
    (NEW_YORK, (2026, 3, 8), ["2026-03-07 02:30 EST", "2026-03-08 03:00 EDT", "2026-03-09 02:30 EDT"]),
])
def test_a_daily_time_inside_the_spring_forward_gap_runs_right_after_it(
        tz: ZoneInfo, day: tuple[int, int, int], expected: list[str]) -> None:
    job = cron_job("30 2 * * *", tz=tz.key)
    start = at(tz, *day) - 86_400
    assert [local(t, tz) for t in walk(job, start, start + 3 * 86_400 - 1)] == expected


@pytest.mark.parametrize(("tz", "day", "expected"), [
    (BERLIN, (2026, 10, 25), ["2026-10-24 02:30 CEST", "2026-10-25 02:30 CEST", "2026-10-26 02:30 CET"]),
    (NEW_YORK, (2026, 11, 1), ["2026-10-31 01:30 EDT", "2026-11-01 01:30 EDT", "2026-11-02 01:30 EST"]),
])
def test_a_daily_time_inside_the_repeated_hour_runs_once(
        tz: ZoneInfo, day: tuple[int, int, int], expected: list[str]) -> None:
    expr = "30 2 * * *" if tz is BERLIN else "30 1 * * *"
    job = cron_job(expr, tz=tz.key)
    start = at(tz, *day) - 86_400
    assert [local(t, tz) for t in walk(job, start, start + 3 * 86_400 - 1)] == expected


@pytest.mark.parametrize(("expr", "spring", "fall"), [
    ("0 1-3 * * *", ["01:00 CET", "03:00 CEST"], ["01:00 CEST", "02:00 CEST", "03:00 CET"]),
    ("30 2,3 * * *", ["03:00 CEST", "03:30 CEST"], ["02:30 CEST", "03:30 CET"]),
    ("*/30 1-3 * * *", ["01:00 CET", "01:30 CET", "03:00 CEST", "03:30 CEST"],
     ["01:00 CEST", "01:30 CEST", "02:00 CEST", "02:30 CEST", "02:00 CET", "02:30 CET", "03:00 CET", "03:30 CET"]),
])
def test_runs_around_the_changed_hour(expr: str, spring: list[str], fall: list[str]) -> None:
    job = cron_job(expr, tz="Europe/Berlin")
    for day, expected in (((2026, 3, 29), spring), ((2026, 10, 25), fall)):
        found = walk(job, at(BERLIN, *day), at(BERLIN, *day) + 86_000)
        assert [local(t, BERLIN)[11:] for t in found] == expected


def test_a_fixed_time_job_asked_during_the_second_pass_of_the_hour_waits_for_the_next_day() -> None:
    job = cron_job("30 1 * * *", tz="America/New_York")
    second_pass = at(NEW_YORK, 2026, 11, 1, 1, 45, fold=1)
    assert local(sched.next_due(job, second_pass) or 0, NEW_YORK) == "2026-11-02 01:30 EST"
    between_passes = at(NEW_YORK, 2026, 11, 1, 1, 10, fold=1)  # after 01:30 EDT ran, before 01:30 EST
    assert local(sched.next_due(job, between_passes) or 0, NEW_YORK) == "2026-11-02 01:30 EST"


@pytest.mark.parametrize(("tz", "spring", "fall"), [
    (BERLIN, (2026, 3, 29), (2026, 10, 25)),
    (NEW_YORK, (2026, 3, 8), (2026, 11, 1)),
])
def test_hourly_and_quarter_hourly_jobs_follow_elapsed_time_across_dst(
        tz: ZoneInfo, spring: tuple[int, int, int], fall: tuple[int, int, int]) -> None:
    for expr, per_hour in (("0 * * * *", 1), ("*/15 * * * *", 4)):
        job = cron_job(expr, tz=tz.key)
        short = walk(job, at(tz, *spring) - 1, at(tz, *spring) + 23 * 3600 - 1)
        long = walk(job, at(tz, *fall) - 1, at(tz, *fall) + 25 * 3600 - 1)
        assert len(short) == 23 * per_hour  # the skipped hour has no runs
        assert len(long) == 25 * per_hour  # the repeated hour runs in both passes
        for found in (short, long):
            assert len(set(found)) == len(found)
            gaps = {b - a for a, b in zip(found, found[1:], strict=False)}
            assert gaps == {3600 / per_hour}  # one run per real hour (quarter): nothing twice, nothing lost


def test_a_year_of_a_daily_job_across_two_dst_changes_runs_every_day_once() -> None:
    for tz in (BERLIN, NEW_YORK):
        job = cron_job("30 2 * * *", tz=tz.key)
        found = walk(job, at(tz, 2026, 1, 1), at(tz, 2027, 1, 1))
        days = [datetime.fromtimestamp(t, tz).date() for t in found]
        assert len(days) == 365 and len(set(days)) == 365


def test_a_cron_job_skips_its_skip_dates() -> None:
    job = cron_job("0 9 * * *", tz="Europe/Paris", skip_dates=("2026-05-02", "2026-05-03"))
    found = walk(job, at(PARIS, 2026, 5, 1), at(PARIS, 2026, 5, 5))
    assert [local(t, PARIS) for t in found] == ["2026-05-01 09:00 CEST", "2026-05-04 09:00 CEST"]


def test_aliases_are_evaluated_as_the_expressions_they_stand_for() -> None:
    job = cron_job("@daily", tz="Europe/Paris")
    assert local(sched.next_due(job, at(PARIS, 2026, 5, 1, 12)) or 0, PARIS) == "2026-05-02 00:00 CEST"


# -- due_between and latest_due ----------------------------------------------------------------------


def test_a_minutely_interval_missed_for_a_year_is_counted_arithmetically() -> None:
    job = every_job(60, created=0.0)
    year = 365 * 86_400
    first, total = sched.due_between(job, 0.0, float(year), 3)
    assert first == [60.0, 120.0, 180.0]
    assert total == year // 60
    assert sched.latest_due(job, 0.0, float(year), 2) == [year - 60.0, float(year)]


def test_an_intervals_count_leaves_out_its_skip_dates() -> None:
    created = at(UTC, 2026, 1, 1)
    job = every_job(60, created=created, skip_dates=("2026-01-02",))
    first, total = sched.due_between(job, created, at(UTC, 2026, 1, 4), 1)
    assert total == 3 * 1440 - 1440
    assert first == [created + 60]


def test_a_long_cron_gap_is_counted_in_bounded_work() -> None:
    job = cron_job("* * * * *")
    start = at(UTC, 2026, 1, 1)
    first, total = sched.due_between(job, start, start + 30 * 86_400, 2)
    assert first == [start + 60, start + 120]
    assert total == 30 * 1440  # estimated past COUNT_SCAN_MAX; exact for an even rate


@pytest.mark.parametrize("job", [
    cron_job("*/20 1-3 * * *", tz="America/New_York"),
    cron_job("0 9 * * MON-FRI", tz="Europe/Paris", skip_dates=("2026-11-02", "2026-11-07", "2026-12-25")),
    cron_job("5,35 8-18 * * 1-5", tz="Europe/Berlin"),
    cron_job("0 12 L * *", tz="Asia/Tokyo"),
    cron_job("0 9 1-7 * 1"),
    cron_job("* 3 * * *", tz="Europe/Berlin", skip_dates=("2026-10-25",)),
], ids=["night-ny", "weekdays-skip", "twice-hourly-office", "last-day", "first-monday-or", "minutely-3am"])
def test_a_long_cron_gap_is_estimated_within_one_percent(job: Job) -> None:
    start, end = at(UTC, 2026, 10, 1, 7, 13), at(UTC, 2027, 1, 9, 16, 41)  # across a DST change, odd hours
    exact = len(walk(job, start, end))
    _, total = sched.due_between(job, start, end, 0)
    assert abs(total - exact) <= max(2, exact // 100)


@pytest.mark.parametrize(("expr", "hours"), [("*/5 9-17 * * *", 4), ("*/5 9-17 * * *", 30), ("*/10 22,23 * * *", 27)])
def test_a_gap_ending_or_starting_mid_day_counts_the_runs_of_those_hours(expr: str, hours: int) -> None:
    job = cron_job(expr, tz="Europe/Paris")
    start = at(PARIS, 2026, 5, 4, 8, 7)
    end = start + hours * 3600
    assert sched.due_between(job, start, end, 0)[1] == len(walk(job, start, end))


def test_decades_of_downtime_are_estimated_without_walking_them() -> None:
    start, end = at(UTC, 2000, 1, 1), at(UTC, 2026, 1, 1)
    assert sched.due_between(cron_job("0 0 1 * *"), start, end, 0)[1] == pytest.approx(26 * 12, abs=3)
    minutes = (end - start) / 60
    assert sched.due_between(cron_job("* * * * *"), start, end, 0)[1] == pytest.approx(minutes, rel=1e-6)


def test_a_short_cron_gap_is_counted_exactly() -> None:
    job = cron_job("0 */2 * * *")
    start = at(UTC, 2026, 1, 1)
    first, total = sched.due_between(job, start, start + 10 * 86_400, 50)
    assert total == 120 and len(first) == 50 and first[0] == start + 7200


def test_an_empty_or_reversed_window_has_no_instants() -> None:
    assert sched.due_between(cron_job("* * * * *"), 100.0, 100.0, 5) == ([], 0)
    assert sched.latest_due(cron_job("* * * * *"), 100.0, 50.0, 5) == []


@pytest.mark.parametrize("job", [
    cron_job("30 2 * * *", tz="Europe/Berlin"),
    cron_job("*/15 0-4 * * *", tz="America/New_York"),
    cron_job("0 * * * *", tz="America/New_York", skip_dates=("2026-11-01",)),
    cron_job("0 9 * * 1-5", tz="Europe/Paris", skip_dates=("2026-10-26", "2026-10-30")),
    every_job(5400, created=at(UTC, 2026, 10, 20), timezone="Europe/Berlin", skip_dates=("2026-10-25",)),
], ids=["daily-berlin", "quarter-ny", "hourly-ny-skip", "weekdays-paris-skip", "every-berlin-skip"])
@pytest.mark.parametrize("window", [((2026, 10, 20), (2026, 11, 5)), ((2026, 3, 1), (2026, 3, 31))],
                         ids=["fall", "spring"])
def test_the_latest_instants_agree_with_walking_forward(
        job: Job, window: tuple[tuple[int, int, int], tuple[int, int, int]]) -> None:
    start, end = at(UTC, *window[0]), at(UTC, *window[1])
    forward = walk(job, start, end)
    first, total = sched.due_between(job, start, end, 300)
    assert first == forward[:300]
    if len(forward) <= sched.COUNT_SCAN_MAX or job.schedule.kind == "every":
        assert total == len(forward)
    else:  # estimated from the rate over the first COUNT_SCAN_MAX: close, not exact (DST days, skip dates)
        assert abs(total - len(forward)) <= len(forward) // 20
    for n in (1, 3, 40):
        assert sched.latest_due(job, start, end, n) == forward[-n:]


# -- catch-up -----------------------------------------------------------------------------------------


def _missed_daily(policy: str, catch_up_max: int = 10) -> tuple[Job, float]:
    created = at(UTC, 2026, 1, 1, 12)
    job = cron_job("0 9 * * *", created=created, last_due_ts=at(UTC, 2026, 1, 2, 9), catch_up=policy,
                   catch_up_max=catch_up_max)
    return job, at(UTC, 2026, 1, 12, 10)  # down from after the 2nd's run until the 12th, 10:00


def test_skip_runs_nothing_and_records_every_missed_instant() -> None:
    job, now = _missed_daily("skip")
    plan = sched.plan_catch_up(job, now, grace=60)
    assert plan == sched.CatchUpPlan([], 10, at(UTC, 2026, 1, 12, 9))


def test_once_runs_the_latest_missed_instant() -> None:
    job, now = _missed_daily("once")
    plan = sched.plan_catch_up(job, now, grace=60)
    assert plan == sched.CatchUpPlan([at(UTC, 2026, 1, 12, 9)], 9, at(UTC, 2026, 1, 12, 9))


def test_all_runs_the_latest_ones_up_to_its_bound_oldest_first() -> None:
    job, now = _missed_daily("all", catch_up_max=3)
    plan = sched.plan_catch_up(job, now, grace=60)
    assert plan.run == [at(UTC, 2026, 1, day, 9) for day in (10, 11, 12)]
    assert plan.missed == 7 and plan.last_due == at(UTC, 2026, 1, 12, 9)
    everything = sched.plan_catch_up(replace(job, catch_up_max=100), now, grace=60)
    assert len(everything.run) == 10 and everything.missed == 0


def test_instants_inside_the_grace_are_not_catch_up() -> None:
    job, _ = _missed_daily("once")
    now = at(UTC, 2026, 1, 3, 9, 0, 30)  # the 3rd's instant is 30 s old: the scheduler runs it as usual
    assert sched.plan_catch_up(job, now, grace=60) == sched.CatchUpPlan([], 0, job.last_due_ts)


def test_a_one_shot_that_passed_while_down_runs_once_or_is_recorded_missed() -> None:
    when = at(UTC, 2026, 1, 5)
    job = at_job(when, created=at(UTC, 2026, 1, 1))
    now = at(UTC, 2026, 1, 6)
    assert sched.plan_catch_up(replace(job, catch_up="once"), now, 60) == sched.CatchUpPlan([when], 0, when)
    assert sched.plan_catch_up(replace(job, catch_up="all"), now, 60) == sched.CatchUpPlan([when], 0, when)
    assert sched.plan_catch_up(replace(job, catch_up="skip"), now, 60) == sched.CatchUpPlan([], 1, when)
    handled = replace(job, last_due_ts=when)
    assert sched.plan_catch_up(handled, now, 60) == sched.CatchUpPlan([], 0, when)


def test_a_minutely_interval_down_for_a_year_plans_in_bounded_work() -> None:
    job = every_job(60, created=0.0, catch_up="all", catch_up_max=100)
    year = 365 * 86_400.0
    plan = sched.plan_catch_up(job, year, grace=0)
    assert len(plan.run) == 100 and plan.run[-1] == year
    assert plan.missed == 525_600 - 100


# -- jitter -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("job", "bound"), [
    (every_job(86_400), 3540),
    (every_job(7200), 300),
    (every_job(3600), 300),
    (every_job(3599), 0),
    (every_job(86_400, strict_schedule=True), 0),
    (at_job(5000.0), 0),
    (cron_job("*/5 * * * *"), 0),
    (cron_job("0,30 * * * *"), 0),
    (cron_job("* 9 * * *"), 0),
    (cron_job("30 9 * * *"), 3540),
    (cron_job("@daily"), 3540),
    (cron_job("0 9-17 * * 1-5"), 300),
    (cron_job("0 */2 * * *"), 300),
    (cron_job("15 * * * *"), 300),
    (cron_job("30 9 * * *", strict_schedule=True), 0),
])
def test_jitter_stays_in_the_references_range_for_each_kind(job: Job, bound: int) -> None:
    assert sched.jitter_max(job) == bound
    values = [sched.jitter(replace(job, id=f"{i:x}"), 1_000_000.0) for i in range(200)]
    assert all(0 <= v <= bound for v in values)
    if bound:
        assert len(set(values)) > 50  # jobs due together spread out


def test_jitter_is_the_same_for_the_same_job_and_instant() -> None:
    job = every_job(86_400)
    assert sched.jitter(job, 1_000_000.0) == sched.jitter(job, 1_000_000.0)
    assert sched.fire_time(job, 1_000_000.0) == 1_000_000.0 + sched.jitter(job, 1_000_000.0)
    assert {sched.jitter(job, 1_000_000.0 + 86_400 * i) for i in range(20)} != {sched.jitter(job, 1_000_000.0)}


# -- words --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("secs", "words"), [(7200, "every 2h"), (90, "every 90s"), (3600, "every 1h"),
                                             (5400, "every 1h 30m"), (86_400, "every 24h")])
def test_an_interval_in_words(secs: int, words: str) -> None:
    assert sched.describe(every_job(secs), 0.0) == words


def test_a_one_shot_in_words_names_the_date_unless_it_is_today() -> None:
    job = at_job(at(PARIS, 2026, 3, 28, 17), timezone="Europe/Paris")
    assert sched.describe(job, at(PARIS, 2026, 3, 1)) == "at 05:00 PM CET, Mar 28"
    assert sched.describe(job, at(PARIS, 2026, 3, 28, 9)) == "at 05:00 PM CET"
    assert sched.describe(job, at(PARIS, 2025, 12, 1)) == "at 05:00 PM CET, Mar 28 2026"


def test_a_job_whose_zone_became_unknown_is_described_not_failed() -> None:
    words = sched.describe(cron_job("0 9 * * *", tz="Gone/Away"), 0.0)
    assert words == "At 09:00 (UTC) [unknown time zone 'Gone/Away']"


def test_a_huge_interval_is_refused_without_printing_it() -> None:
    with _Refusal("invalid_schedule") as refusal:
        sched.validate_schedule(Schedule("every", every_secs=10**400))
    assert refusal.message == "Interval must be <= 2592000s (30 days), got a larger number"


def test_a_cron_expression_in_words_names_its_zone() -> None:
    assert sched.describe(cron_job("0 9 * * MON-FRI", tz="Europe/Paris"), 0.0) == (
        "At 09:00, Monday through Friday (Europe/Paris)")
    assert sched.describe(cron_job("*/15 * * * *"), 0.0) == "Every 15 minutes (UTC)"


# -- at_time ------------------------------------------------------------------------------------------

# Saturday 28 March 2026, 12:00 in Paris; the clocks go forward that night (02:00 -> 03:00).
NOW = at(PARIS, 2026, 3, 28, 12)


@pytest.mark.parametrize(("text", "expected"), [
    ("5pm", "2026-03-28 17:00 CET"),
    ("5 pm", "2026-03-28 17:00 CET"),
    ("5:30pm", "2026-03-28 17:30 CET"),
    ("5:30 PM", "2026-03-28 17:30 CET"),
    ("17:00", "2026-03-28 17:00 CET"),
    ("at 17:00", "2026-03-28 17:00 CET"),
    ("9am", "2026-03-29 09:00 CEST"),  # passed today: tomorrow (after the DST change)
    ("12am", "2026-03-29 00:00 CET"),
    ("12pm", "2026-03-29 12:00 CEST"),
    ("tomorrow 9am", "2026-03-29 09:00 CEST"),
    ("  Tomorrow   at 9:30AM ", "2026-03-29 09:30 CEST"),
    ("tomorrow 2:30am", "2026-03-29 03:00 CEST"),  # inside the gap: the first minute after it
    ("2026-03-28 14:00", "2026-03-28 14:00 CET"),
    ("2026-03-28T14:00", "2026-03-28 14:00 CET"),
    ("2026-03-28 14:00:30", "2026-03-28 14:00 CET"),
    ("2026-10-25 02:30", "2026-10-25 02:30 CEST"),  # repeated: the first pass
    ("in 30 minutes", "2026-03-28 12:30 CET"),
    ("in 2 hours", "2026-03-28 14:00 CET"),
    ("in 2h", "2026-03-28 14:00 CET"),
    ("in an hour", "2026-03-28 13:00 CET"),
    ("in 1.5 hours", "2026-03-28 13:30 CET"),
    ("in 1 day", "2026-03-29 13:00 CEST"),  # 24 h of elapsed time
    ("in 2 weeks", "2026-04-11 13:00 CEST"),
])
def test_human_times_resolve_in_the_configured_zone(text: str, expected: str) -> None:
    assert local(sched.parse_at_time(text, NOW, PARIS), PARIS) == expected


def test_an_in_form_counts_seconds_exactly() -> None:
    assert sched.parse_at_time("in 90 seconds", NOW, PARIS) == NOW + 90
    assert sched.parse_at_time("in 45 mins", NOW, PARIS) == NOW + 2700


@pytest.mark.parametrize("text", ["blah", "25:00", "13pm", "0pm", "12:60", "2026-02-30 10:00", "tomorrow",
                                  "in 5 fortnights", "at", "tomorrow 2026-03-29 10:00", "5", ""])
def test_unreadable_times_are_refused_with_the_references_examples(text: str) -> None:
    with _Refusal("unparseable_time") as refusal:
        sched.parse_at_time(text, NOW, PARIS)
    assert refusal.message == (f"could not parse time '{text}'. Examples: '5pm', 'in 30 minutes', 'tomorrow 9am'")


def test_a_resolved_time_in_the_past_is_refused_in_the_references_words() -> None:
    with _Refusal("time_in_past") as refusal:
        sched.parse_at_time("2026-03-28 11:00", NOW, PARIS)
    assert refusal.message == "resolved time 11:00 AM CET is in the past"
    with _Refusal("time_in_past"):
        sched.parse_at_time("in 0 minutes", NOW, PARIS)


def test_hostile_times_are_refused_cleanly() -> None:
    with _Refusal("unparseable_time") as refusal:
        sched.parse_at_time("5pm" + "x" * 200, NOW, PARIS)
    assert "longer than 100" in refusal.message
    with _Refusal("unparseable_time") as refusal:
        sched.parse_at_time("5pm\x00\x1b[2J", NOW, PARIS)
    assert "\x00" not in refusal.message and "\x1b" not in refusal.message
    with _Refusal("unparseable_time"):
        sched.parse_at_time(17, NOW, PARIS)  # type: ignore[arg-type]
    with _Refusal("invalid_schedule"):
        sched.parse_at_time("in 999999999 weeks", NOW, PARIS)
