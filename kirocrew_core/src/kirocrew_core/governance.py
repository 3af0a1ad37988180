"""The governance ceiling: which tool references may keep a blanket auto-approve.

``allowedTools`` and ``autoApprove`` are kiro-cli's blanket grants, and a call
they cover never reaches the approval gate, where per-argument rules apply. So
every writer of such a grant asks :func:`may_auto_approve` first: a reference the
ceiling has an opinion about loses its blanket grant (it stays mounted, and its
calls go through the gate), and so does one the permission policy
(:mod:`kirocrew_core.gate`) does not allow whatever its input; the rest are kept.

The ceiling is ``governance.ceiling`` from ``config.toml`` plus every plugin's
``governance_ceiling()`` contribution. A pattern is ``@server`` or
``@server/tool``; ``*``, ``?`` and ``[...]`` globs work in the server part
(``@git*``). Matching is case-insensitive and by server, at any granularity:
``@srv`` and ``@srv/delete`` alike withhold ``@srv`` and every ``@srv/tool``,
but not ``@other``. A server the ceiling governs is governed as a whole because
its rules are per argument and only the gate sees arguments; the tool part of a
pattern matters to the gate, not here.

A reference without ``@`` (a builtin such as ``fs_read``, or a bare server
name) is read as ``@fs_read``, so the pattern ``@fs_read`` withholds it. A
reference whose server part is itself a glob (``@*``) is withheld when it could
cover a governed server; two globs are assumed to overlap.

The predicate fails closed: if the config cannot be read or parsed, or a
plugin's hook raises or returns something that is not a list of patterns,
nothing is auto-approved.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from fnmatch import fnmatchcase

from kirocrew_core.config import load_config
from kirocrew_core.errors import KirocrewError
from kirocrew_core.plugins import HookFailedError, KirocrewPluginManager, PluginWarning, call_hook, get_plugin_manager
from kirocrew_core.tool_patterns import pattern_problem

_GLOB_CHARS = frozenset("*?[")


class CeilingUnavailableError(KirocrewError):
    """The ceiling could not be assembled (a plugin failed); treat every grant as withheld."""

    code = "governance_ceiling_unavailable"
    exit_code = 1


def _split(ref: str) -> tuple[str, str | None]:
    """``(server, tool or None)``, case-folded; ``ValueError`` for an empty part."""
    body = ref.strip().casefold()
    body = body.removeprefix("@")
    server, sep, tool = body.partition("/")
    if not server or (sep and not tool):
        raise ValueError(f"not a tool reference: {ref!r}")
    return server, tool if sep else None


def _has_glob(part: str) -> bool:
    return not _GLOB_CHARS.isdisjoint(part)


def _may_overlap(a: str, b: str) -> bool:
    if fnmatchcase(a, b) or fnmatchcase(b, a):
        return True
    return _has_glob(a) and _has_glob(b)


def _names(pattern: tuple[str, str | None], ref: tuple[str, str | None]) -> bool:
    """True when ``pattern`` governs the server ``ref`` belongs to (tool parts do not narrow it)."""
    return _may_overlap(pattern[0], ref[0])


def _contribution_problem(result: object) -> str | None:
    """Why a ``governance_ceiling()`` result is unusable, or ``None`` (nothing, or a list of patterns)."""
    if result is None:
        return None
    if not isinstance(result, (list, tuple)):
        return f"expected a list of patterns, got {type(result).__name__}"
    return next(filter(None, map(pattern_problem, result)), None)


def _plugin_patterns(pm: KirocrewPluginManager) -> list[str]:
    # Fail closed, not the usual skip of a failing third-party plugin: a missing contribution must withhold.
    try:
        call = call_hook(pm, "governance_ceiling", on_error="fail_closed", check=_contribution_problem)
    except HookFailedError as exc:
        warnings.warn(f"{exc.message}; nothing is auto-approved until it is fixed", PluginWarning, stacklevel=3)
        raise CeilingUnavailableError(exc.message) from exc
    return [pattern for contribution in call.contributions for pattern in contribution.value]


def ceiling_patterns(pm: KirocrewPluginManager | None = None) -> list[str]:
    """Every ceiling pattern: ``governance.ceiling`` first, then plugins in hook call order.

    Raises :class:`~kirocrew_core.errors.KirocrewError` (a malformed or
    unreadable config, :class:`CeilingUnavailableError` for a failing plugin)
    instead of returning a partial ceiling.
    """
    patterns: list[str] = load_config().get("governance.ceiling")
    return patterns + _plugin_patterns(pm if pm is not None else get_plugin_manager())


def _withholds(patterns: list[tuple[str, str | None]], ref: str) -> bool:
    try:
        parsed = _split(ref)
    except ValueError:
        return True  # a reference we cannot read is never blanket-approved
    return any(_names(pattern, parsed) for pattern in patterns)


def _parsed(patterns: list[str]) -> list[tuple[str, str | None]]:
    return [_split(pattern) for pattern in patterns]


def governs(patterns: Iterable[str], ref: str) -> bool:
    """Whether the ceiling ``patterns`` name ``ref``'s server at any granularity (an unreadable one: True)."""
    try:
        parsed = _parsed(list(patterns))
    except ValueError:
        return True
    return _withholds(parsed, ref)


def may_auto_approve(ref: str, *, pm: KirocrewPluginManager | None = None) -> bool:
    """True when ``ref`` (``@srv``, ``@srv/tool``, ``fs_read``) may keep a blanket auto-approve.

    False when any ceiling pattern names the same server at any granularity, when the
    permission policy could refuse some call of it, and whenever either cannot be read
    (fail closed); see :func:`auto_approve_verdicts`.
    """
    return auto_approve_verdicts([ref], pm)[0][1] is None


#: Why a blanket grant was withheld: the ceiling names its server, or the permission policy could refuse a call.
WITHHELD_BY_CEILING = "governance_ceiling"
WITHHELD_BY_POLICY = "permission_policy"


def auto_approve_verdicts(refs: Iterable[str], pm: KirocrewPluginManager | None = None) -> list[tuple[str, str | None]]:
    """Each of ``refs`` with why it may not keep a blanket grant (:data:`WITHHELD_BY_CEILING`,
    :data:`WITHHELD_BY_POLICY`), or None when it may.

    A grant is kept only when the ceiling is silent about its server **and** the permission
    policy allows the tool whatever its input under every authority
    (:meth:`kirocrew_core.gate.engine.Policy.may_auto_approve`), so every call a rule could refuse
    reaches the gate. Fails closed: a ceiling or a policy that cannot be read withholds everything.
    """
    refs = list(refs)
    try:
        patterns = _parsed(ceiling_patterns(pm))
    except Exception:  # noqa: BLE001 - fail closed
        return [(ref, WITHHELD_BY_CEILING) for ref in refs]
    try:
        from kirocrew_core.gate.policy_file import current_policy

        policy = current_policy(pm)
    except Exception:  # noqa: BLE001 - fail closed
        policy = None
    out: list[tuple[str, str | None]] = []
    for ref in refs:
        if _withholds(patterns, ref):
            out.append((ref, WITHHELD_BY_CEILING))
        elif policy is None or not policy.may_auto_approve(ref):
            out.append((ref, WITHHELD_BY_POLICY))
        else:
            out.append((ref, None))
    return out


def filter_auto_approve(
    refs: Iterable[str], pm: KirocrewPluginManager | None = None
) -> tuple[list[str], list[str]]:
    """Split ``refs`` into ``(kept, withheld)``, order kept, reading the ceiling and the policy once.

    For writers of ``allowedTools`` and ``autoApprove``: keep the first list,
    record the second (SEL ``mcp_auto_approve_withheld``); see :func:`auto_approve_verdicts`.
    """
    verdicts = auto_approve_verdicts(refs, pm)
    return [ref for ref, why in verdicts if why is None], [ref for ref, why in verdicts if why is not None]


#: The capability switches a crew session's tools consult (``governance.<name>`` in ``config.toml``).
CAPABILITIES = ("memory_writes", "messaging", "cron", "hooks")


def capability_allowed(name: str) -> bool:
    """Whether crew sessions may use the capability ``name`` (``memory_writes``, ``messaging``, ``cron``, ``hooks``).

    ``governance.<name>`` is ``"allow"`` (the default) or ``"deny"``. Fails closed: a config
    that cannot be read or parsed denies, because a switch the owner may have set to
    ``deny`` must not read as ``allow`` while the file is broken.
    """
    if name not in CAPABILITIES:
        raise ValueError(f"unknown governance capability {name!r}")
    try:
        return load_config().get(f"governance.{name}") == "allow"
    except Exception:  # noqa: BLE001 - any failure to read the policy denies (fail closed)
        return False


def require_capability(name: str, what: str) -> None:
    """Raise :class:`GovernanceDenied` unless :func:`capability_allowed` says yes; ``what`` names it in the error."""
    if not capability_allowed(name):
        raise GovernanceDenied(f"{what} blocked by governance policy (governance.{name} is not \"allow\")")


class GovernanceDenied(KirocrewError):
    """A capability switch (``governance.memory_writes``, ``governance.messaging``, ``governance.cron``,
    ``governance.hooks``) denied a session's call (or a webhook delivery to one)."""

    code = "governance_denied"
    exit_code = 1
