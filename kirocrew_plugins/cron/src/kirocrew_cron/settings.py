"""kirocrew-cron's config keys (``config.toml``), declared when the plugin loads.

``cron.timezone`` is the zone a job without its own ``timezone`` is evaluated in (and the
zone ``at_time`` is read in); empty means UTC. ``governance.cron`` (a core capability
switch) gates what sessions may schedule.
"""

from __future__ import annotations

from typing import Any

from kirocrew_core.config import ConfigKey, load_config, register_key

TIMEZONE_KEY = "cron.timezone"


def _check_zone(value: Any) -> str | None:
    if value == "":
        return None
    from kirocrew_cron.zones import zone_problem

    return zone_problem(value)


register_key(
    ConfigKey(
        TIMEZONE_KEY,
        str,
        "",
        "IANA time zone (e.g. Europe/Paris) for cron jobs without their own timezone, and for at_time; "
        'empty means UTC.',
        _check_zone,
    )
)


def configured_timezone() -> str:
    """``cron.timezone``, or ``""`` when unset or the config cannot be read (UTC then)."""
    try:
        value = load_config().get(TIMEZONE_KEY)
    except Exception:  # noqa: BLE001 - a broken config must not stop jobs: they fall back to UTC, as documented
        return ""
    return value if isinstance(value, str) else ""
