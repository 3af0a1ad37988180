"""Execution authorities, resolved through the ``authority_backends()`` hook.

A backend's ``factory`` turns the base :class:`~kirocrew_core.acp_runtime.AcpOptions`
of a run into the options that launch kiro-cli under that authority::

    factory(options: AcpOptions, *, workspace: str) -> AcpOptions

``unrestricted`` (registered by this plugin) only adds ``--trust-all-tools``.
A sandboxing backend wraps the binary, narrows the environment and the trust
flags, and raises when it cannot establish the sandbox; the run then fails. An
authority without an available backend is refused with ``authority_unavailable``
— never silently run unrestricted.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING, Any

from kirocrew_core.contributions import AuthorityBackend

from kirocrew_conversations.errors import conversation_error
from kirocrew_conversations.vocabulary import UNRESTRICTED

if TYPE_CHECKING:
    from kirocrew_core.acp_runtime import AcpOptions



def unrestricted_options(options: AcpOptions, *, workspace: str) -> AcpOptions:
    """The host process as is: inherited environment, network, and every Kiro tool trusted."""
    return dataclasses.replace(options, trust_all_tools=True, trust_tools=None)


UNRESTRICTED_BACKEND = AuthorityBackend(
    name=UNRESTRICTED,
    description="Kiro runs directly on the host with the inherited environment, network access, "
                "workspace read/write and all tools trusted.",
    available=lambda: (True, ""),
    factory=unrestricted_options,
)


def backends(pm: Any = None) -> dict[str, AuthorityBackend]:
    """Every installed backend for this platform by name; for one name the first plugin (by name) wins."""
    from kirocrew_core.contributions import flatten
    from kirocrew_core.plugins import collect, get_plugin_manager

    found: dict[str, AuthorityBackend] = {}
    for contribution in flatten(collect(pm or get_plugin_manager(), "authority_backends")):
        value = contribution.value
        if isinstance(value, AuthorityBackend) and (not value.platforms or sys.platform in value.platforms):
            found.setdefault(value.name, value)
    return found


def availability(name: str, installed: dict[str, AuthorityBackend]) -> tuple[bool, str | None]:
    """Whether ``name`` can run here, and why not. A backend whose check raises is unavailable."""
    backend = installed.get(name)
    if backend is None:
        return False, f"no installed plugin provides the {name} authority on this host"
    try:
        ok, reason = backend.available()
    except Exception as exc:  # noqa: BLE001 - a broken check must fail closed, not crash the caller
        return False, f"the {name} availability check failed: {type(exc).__name__}"
    return bool(ok), None if ok else (reason or f"the {name} authority is unavailable on this host")


def require(name: str, installed: dict[str, AuthorityBackend]) -> AuthorityBackend:
    """The backend for ``name``, or ``authority_unavailable`` (nothing runs unrestricted instead)."""
    ok, reason = availability(name, installed)
    if not ok:
        raise conversation_error("authority_unavailable", f"authority {name} is unavailable: {reason}")
    return installed[name]
