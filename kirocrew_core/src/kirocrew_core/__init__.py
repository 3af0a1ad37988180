"""kirocrew core: the small shared heart every kirocrew plugin builds on.

Plugin authors import the markers from here::

    from kirocrew_core import hookimpl
"""

from kirocrew_core.markers import PROJECT, hookimpl, hookspec

__all__ = ["PROJECT", "hookimpl", "hookspec", "__version__"]
__version__ = "0.1.0"
