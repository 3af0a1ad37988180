"""The hook kirocrew-computer declares for platform drivers (added through ``addhooks``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core.markers import hookspec

if TYPE_CHECKING:
    from kirocrew_computer.backend import BackendSpec


@hookspec
def computer_backends() -> list[BackendSpec]:
    """Offer computer-use drivers (:class:`kirocrew_computer.backend.BackendSpec`).

    Called once per process by the computer-use chokepoint when the first call
    that needs a driver arrives (never while the keystone is off), and by
    ``kirocrew computer doctor``. Specs from every plugin are concatenated in
    hook call order (``tryfirst``, plain, ``trylast``, each by plugin name); the first whose ``platforms`` include
    ``sys.platform`` and whose backend's ``available()`` is true is used, and
    the others are closed. When none qualifies every call is refused with
    ``unsupported_platform`` and the reasons collected here.

    A backend is a pure driver: keystone, app policy, index freshness,
    password floors and redaction are all enforced before and after it runs.

    :return: a list of specs; ``factory()`` must be cheap to call and must not
        touch the desktop until a method is called.
    """
