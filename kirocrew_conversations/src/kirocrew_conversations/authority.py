"""Execution authorities, resolved through the ``authority_backends()`` hook.

A backend's ``factory`` turns the base :class:`~kirocrew_core.acp_runtime.AcpOptions`
of a run into the options that launch kiro-cli under that authority::

    factory(options: AcpOptions, *, workspace: str) -> AcpOptions

``unrestricted`` (registered by this plugin) runs kiro-cli as it is. No authority
trusts every tool: kiro-cli asks before each call its agent file does not already
allow, and the permission policy answers (:mod:`kirocrew_conversations.gatekeeper`).
A sandboxing backend wraps the binary, narrows the environment, pre-trusts only the
tools the policy allows whatever their input (:func:`pretrusted`), and raises when
it cannot establish the sandbox; the run then fails. An authority without an
available backend is refused with ``authority_unavailable`` — never silently run
unrestricted.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import TYPE_CHECKING, Any

from kirocrew_core.contributions import AuthorityBackend

from kirocrew_conversations.errors import conversation_error
from kirocrew_conversations.vocabulary import AUTHORITY_RANK, UNRESTRICTED

if TYPE_CHECKING:
    from kirocrew_core.acp_runtime import AcpOptions



def unrestricted_options(options: AcpOptions, *, workspace: str) -> AcpOptions:
    """The host process as is: inherited environment and network; no tool trusted, the policy answers."""
    return dataclasses.replace(options, trust_all_tools=False, trust_tools=None)


def pretrusted(candidates: tuple[str, ...], authority: str) -> tuple[str, ...]:
    """The ``candidates`` a sandbox may pass to ``--trust-tools``: those the policy allows whatever their input.

    A tool a rule could refuse (the built-in protections make every file read one) is left to ask,
    so the gate sees the call; fails closed to none when the policy cannot be read.
    """
    from kirocrew_core.gate.policy_file import current_policy

    try:
        return current_policy().trusted_tools(candidates, authority)
    except Exception:  # noqa: BLE001 - a policy that cannot be read trusts nothing
        return ()


UNRESTRICTED_BACKEND = AuthorityBackend(
    name=UNRESTRICTED,
    description="Kiro runs directly on the host with the inherited environment, network access and "
                "workspace read/write; the permission policy answers each tool call (by default it allows "
                "what it does not protect).",
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


def installed(pm: Any = None) -> dict[str, AuthorityBackend]:
    """:func:`backends`, with the built-in ``unrestricted`` where no plugin provides it: every authority a run
    may name here."""
    found = backends(pm)
    found.setdefault(UNRESTRICTED, UNRESTRICTED_BACKEND)
    return found


def escalates(wanted: str, own: str) -> bool:
    """Whether work given ``wanted`` could do more than a session running as ``own``: a crew session gives work
    its own authority or a narrower one. An authority outside the built-in order counts only when it is ``own``."""
    return wanted != own and AUTHORITY_RANK.get(wanted, 99) > AUTHORITY_RANK.get(own, -1)


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


def launch(name: str, workspace: str, pm: Any = None) -> tuple[list[str], dict[str, str]]:
    """The argv prefix and environment a command (not kiro-cli) runs with under the authority ``name``: its
    backend's launcher, and the environment a kiro-cli would get (the augmented ``PATH``, unless the backend
    gives its own). ``authority_unavailable`` when it cannot run here: never run unrestricted instead.
    """
    import os

    from kirocrew_core.acp_runtime import AcpOptions
    from kirocrew_core.search_path import with_search_path

    backend = require(name, installed(pm))
    options = backend.factory(AcpOptions(), workspace=workspace)
    # As kiro-cli gets it: the search path the MCP commands resolve on (the host may lack ~/.local/bin).
    env = dict(options.env) if options.env is not None else with_search_path(os.environ)
    return [str(part) for part in options.launcher], env
