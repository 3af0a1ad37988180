"""The environment switches that decide which plugins load (see :mod:`kirocrew_core.plugins`).

Standard library only: the CLI's command index (:mod:`kirocrew_core.command_index`) keys on
them without importing pluggy.
"""

LOAD_ENV = "KIROCREW_LOAD_PLUGINS"
DISABLE_ENV = "KIROCREW_DISABLE_PLUGINS"
STRICT_ENV = "KIROCREW_STRICT_PLUGINS"
TRACE_ENV = "KIROCREW_TRACE_PLUGINS"


def truthy(value: str | None) -> bool:
    """An on/off switch's value read as on (``1``, ``true``, ``yes``, ``on``)."""
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}
