"""kirocrew core: the small shared heart every kirocrew plugin builds on.

Plugin authors import the markers from here::

    from kirocrew_core import hookimpl

The markers load on first use (PEP 562): the relay (:mod:`kirocrew_core.relay`) lives in
this package and must start without importing pluggy.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs the relay ~7 ms
if TYPE_CHECKING:
    from typing import Any

    from kirocrew_core.markers import PROJECT, hookimpl, hookspec

__all__ = ["PROJECT", "hookimpl", "hookspec", "__version__"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in ("PROJECT", "hookimpl", "hookspec"):
        from kirocrew_core import markers

        return getattr(markers, name)
    raise AttributeError(f"module 'kirocrew_core' has no attribute {name!r}")
