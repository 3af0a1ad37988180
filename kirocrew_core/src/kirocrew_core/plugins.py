"""Building the plugin manager: entry points loaded one by one, defaults, validation.

Policy (see ``docs/plugins/writing-plugins.md``):

* Members of the open edition are ours: if one fails to import or validate,
  loading fails loudly (:class:`PluginLoadError`).
* A third-party plugin that fails is skipped with a warning naming its
  distribution, so a broken install never bricks the command that would
  remove it. ``KIROCREW_STRICT_PLUGINS=1`` makes that fatal too.
* ``KIROCREW_LOAD_PLUGINS=a,b`` loads only the named plugins (distribution or
  entry-point names; empty loads none), ``KIROCREW_DISABLE_PLUGINS=a,b`` blocks
  them. Core built-ins are always registered.
* ``KIROCREW_TRACE_PLUGINS=1`` writes every hook call to stderr.

Hooks are called through :func:`call_hook` (or :func:`collect`), never in load
order: ``tryfirst`` implementations, then plain ones, then ``trylast`` ones,
each tier sorted by plugin name, with a named failure policy and every result
and failure credited to its plugin.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any, Literal

import pluggy

from kirocrew_core import hookspecs
from kirocrew_core.contributions import Contribution
from kirocrew_core.errors import KirocrewError
from kirocrew_core.markers import ENTRY_POINT_GROUP, PROJECT
# The switches' owner is plugin_env (standard library only, for the CLI's command index); named here too.
from kirocrew_core.plugin_env import DISABLE_ENV as DISABLE_ENV
from kirocrew_core.plugin_env import LOAD_ENV as LOAD_ENV
from kirocrew_core.plugin_env import STRICT_ENV as STRICT_ENV
from kirocrew_core.plugin_env import TRACE_ENV as TRACE_ENV
from kirocrew_core.plugin_env import truthy as _truthy

logger = logging.getLogger("kirocrew.plugins")

CORE_DISTRIBUTION = "kirocrew-core"
#: The open edition's members in the order the docs name them: the one list. The root ``pyproject.toml``
#: pins them, ``bootstrap.py`` installs them, and the docs list them; tests/core/test_open_edition.py
#: fails when any of those differs from this.
OPEN_EDITION_MEMBERS: tuple[str, ...] = (
    CORE_DISTRIBUTION,
    "kirocrew-mcp",
    "kirocrew-connections",
    "kirocrew-conversations",
    "kirocrew-computer",
    "kirocrew-cron",
)
OPEN_EDITION = frozenset(OPEN_EDITION_MEMBERS)

# Core features are plugins too, registered through the same path as third-party
# ones and called in the same order (see ordered_hookimpls).
DEFAULT_PLUGINS: tuple[str, ...] = (
    "kirocrew_core.builtin.doctor",
    "kirocrew_core.builtin.agent_file",
    "kirocrew_core.builtin.api",
    "kirocrew_core.builtin.artifacts",
    "kirocrew_core.builtin.coretools",
    "kirocrew_core.builtin.crews",
    "kirocrew_core.builtin.history",
    "kirocrew_core.builtin.knowledge",
    "kirocrew_core.builtin.lessons",
    "kirocrew_core.builtin.messages",
    "kirocrew_core.builtin.notifications",
    "kirocrew_core.builtin.policy",
    "kirocrew_core.builtin.resources",
    "kirocrew_core.builtin.secrets",
    "kirocrew_core.builtin.skills",
    "kirocrew_core.builtin.webhooks",
)


class PluginLoadError(KirocrewError):
    """A plugin that must load (open edition, or strict mode) failed to import or validate."""

    code = "plugin_load_failed"
    exit_code = 1


class PluginWarning(UserWarning):
    """A third-party plugin was skipped or one of its hook implementations failed."""


@dataclass(frozen=True)
class PluginProblem:
    """Something of a loaded plugin kirocrew refused (the plugin still runs): a stable ``code`` and why."""

    code: str
    message: str


@dataclass
class PluginRecord:
    """What ``kirocrew plugins`` reports about one plugin."""

    name: str
    distribution: str
    version: str
    entry_point: str
    status: str  # loaded | skipped | blocked | not-allowed
    builtin: bool = False
    error: str = ""
    hooks: list[str] = field(default_factory=list)
    problems: list[PluginProblem] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "entry_point": self.entry_point,
            "status": self.status,
            "builtin": self.builtin,
            "hooks": list(self.hooks),
        }
        if self.error:
            data["error"] = self.error
        if self.problems:
            data["problems"] = [{"code": p.code, "message": p.message} for p in self.problems]
        return data


def normalize_dist_name(name: str) -> str:
    """PEP 503 normalisation, so ``Kirocrew_MCP`` and ``kirocrew-mcp`` are one name."""
    out = name.strip().lower()
    for ch in "_.":
        out = out.replace(ch, "-")
    while "--" in out:
        out = out.replace("--", "-")
    return out


def _names_from_env(value: str | None) -> frozenset[str] | None:
    if value is None:
        return None
    return frozenset(normalize_dist_name(part) for part in value.split(",") if part.strip())


class KirocrewPluginManager(pluggy.PluginManager):
    """A pluggy manager that remembers where each plugin came from and what failed."""

    def __init__(self, *, strict: bool = False) -> None:
        super().__init__(PROJECT)
        self.records: dict[str, PluginRecord] = {}
        self.problems: dict[str, list[PluginProblem]] = {}  # by plugin name: see add_problem
        self._problems_lock = threading.Lock()
        self.strict_all = strict
        self.trace_enabled = False

    def trace_line(self, message: str) -> None:
        """Write one trace line to stderr when ``KIROCREW_TRACE_PLUGINS`` is on."""
        if self.trace_enabled:
            print(f"kirocrew trace: {message}", file=sys.stderr)

    def is_strict(self, name: str) -> bool:
        return self.strict_all or name not in self.records or self.is_open_edition(name)

    def is_open_edition(self, name: str) -> bool:
        """Whether plugin ``name`` is ours: a core built-in or an entry point of an open-edition member.

        A plugin registered without a record (``pm.register`` in a test) is not: only an installed
        distribution can claim the open edition.
        """
        record = self.records.get(name)
        return record is not None and (record.builtin or normalize_dist_name(record.distribution) in OPEN_EDITION)

    def add_problem(self, name: str, problem: PluginProblem) -> bool:
        """Record ``problem`` against plugin ``name`` once; True when it is new (so the caller logs it once).

        Hooks are collected from several threads in the host (each ``tools/list`` in a worker thread).
        """
        with self._problems_lock:
            known = self.problems.setdefault(name, [])
            if problem in known:
                return False
            known.append(problem)
            return True

    def distribution_of(self, name: str) -> str:
        record = self.records.get(name)
        return record.distribution if record else "?"

    def loaded_records(self) -> list[PluginRecord]:
        """Every plugin record with its implemented hooks and its problems filled in, sorted by name."""
        out = []
        for name in sorted(self.records):
            record = self.records[name]
            plugin = self.get_plugin(name)
            if plugin is not None:
                callers = self.get_hookcallers(plugin) or []
                record.hooks = sorted(caller.name for caller in callers)
            with self._problems_lock:
                record.problems = list(self.problems.get(name, ()))
            out.append(record)
        return out

    # -- failure handling shared by loading and hook calls -----------------

    def plugin_failed(self, name: str, what: str, exc: BaseException) -> None:
        """The loading rule: raise :class:`PluginLoadError` for a plugin that must load, else warn and go on."""
        detail = f"{type(exc).__name__}: {exc}"
        if self.is_strict(name):
            raise PluginLoadError(
                f"plugin {name!r} from distribution {self.distribution_of(name)!r} {what}: {detail}"
            ) from exc
        warnings.warn(
            f"skipped plugin {name!r} from distribution {self.distribution_of(name)!r}: "
            f"{what}: {detail} (set {DISABLE_ENV}={name} to silence, "
            f"{STRICT_ENV}=1 to make this fatal)",
            PluginWarning,
            stacklevel=3,
        )


def _register_checked(pm: KirocrewPluginManager, plugin: object, name: str) -> bool:
    try:
        pm.register(plugin, name=name)
    except pluggy.PluginValidationError as exc:
        pm.records[name].status = "skipped"
        pm.records[name].error = str(exc)
        pm.plugin_failed(name, "failed validation", exc)
        return False
    return True


def _iter_entry_points() -> Iterable[Any]:
    from importlib.metadata import entry_points

    return sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)


def _load_entry_points(pm: KirocrewPluginManager, env: Mapping[str, str]) -> None:
    allow = _names_from_env(env.get(LOAD_ENV))
    block = _names_from_env(env.get(DISABLE_ENV)) or frozenset()
    for ep in _iter_entry_points():
        dist = getattr(ep, "dist", None)
        dist_name = dist.name if dist is not None else "?"
        version = dist.version if dist is not None else "?"
        if ep.name in pm.records:
            continue  # the same distribution seen twice on sys.path
        record = PluginRecord(ep.name, dist_name, version, ep.value, "loaded")
        pm.records[ep.name] = record
        keys = {normalize_dist_name(ep.name), normalize_dist_name(dist_name)}
        if keys & block:
            record.status = "blocked"
            pm.set_blocked(ep.name)
            continue
        if allow is not None and not keys & allow:
            record.status = "not-allowed"
            continue
        try:
            plugin = ep.load()
        except BaseException as exc:  # a plugin's import may raise anything, SystemExit included
            if isinstance(exc, KeyboardInterrupt):
                raise
            record.status = "skipped"
            record.error = f"{type(exc).__name__}: {exc}"
            pm.plugin_failed(ep.name, "failed to import", exc)
            continue
        _register_checked(pm, plugin, ep.name)


def _check_pending(pm: KirocrewPluginManager) -> None:
    """Reject implementations of hooks nobody declared (a typo would be silently ignored)."""
    while True:
        try:
            pm.check_pending()
            return
        except pluggy.PluginValidationError as exc:
            name = pm.get_name(exc.plugin) or "?"
            pm.unregister(exc.plugin)
            if name in pm.records:
                pm.records[name].status = "skipped"
                pm.records[name].error = str(exc)
            pm.plugin_failed(name, "failed validation", exc)


def _enable_tracing(pm: KirocrewPluginManager) -> None:
    def before(hook_name: str, impls: Sequence[pluggy.HookImpl], kwargs: Mapping[str, Any]) -> None:
        names = ", ".join(impl.plugin_name for impl in impls)
        print(f"kirocrew trace: {hook_name}({', '.join(kwargs)}) -> [{names}]", file=sys.stderr)

    def after(outcome: Any, hook_name: str, impls: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        exc = outcome.exception
        shown = f"raised {exc!r}" if exc else f"returned {outcome.get_result()!r}"
        print(f"kirocrew trace: {hook_name} {shown}", file=sys.stderr)

    pm.add_hookcall_monitoring(before, after)
    pm.trace_enabled = True


def make_plugin_manager(
    *, load_entrypoints: bool = True, env: Mapping[str, str] | None = None
) -> KirocrewPluginManager:
    """Build a fresh manager: specs, core built-ins, entry points, then validation.

    ``env`` defaults to ``os.environ`` (tests pass their own mapping).
    """
    env = os.environ if env is None else env
    pm = KirocrewPluginManager(strict=_truthy(env.get(STRICT_ENV)))
    pm.add_hookspecs(hookspecs)
    if _truthy(env.get(TRACE_ENV)):
        _enable_tracing(pm)
    pm.hook.addhooks.call_historic(kwargs={"pluginmanager": pm})
    from kirocrew_core import __version__

    for module_name in DEFAULT_PLUGINS:
        pm.records[module_name] = PluginRecord(
            module_name, CORE_DISTRIBUTION, __version__, module_name, "loaded", builtin=True
        )
        pm.register(import_module(module_name), name=module_name)
    if load_entrypoints:
        _load_entry_points(pm, env)
    _check_pending(pm)
    return pm


_default_manager: KirocrewPluginManager | None = None


def get_plugin_manager() -> KirocrewPluginManager:
    """The process-wide manager the CLI and the gateway share (entry points scanned once)."""
    global _default_manager
    if _default_manager is None:
        _default_manager = make_plugin_manager()
    return _default_manager


def reset_plugin_manager() -> None:
    """Forget the process-wide manager (tests, or after installing a plugin in-process)."""
    global _default_manager
    _default_manager = None


# -- calling hooks -------------------------------------------------------------

OnError = Literal["raise", "skip", "fail_closed"]
"""What :func:`call_hook` does when an implementation raises or its result fails ``check``.

* ``"raise"``: the loading rule. An open-edition plugin's failure (any plugin's
  under ``KIROCREW_STRICT_PLUGINS=1``) raises :class:`PluginLoadError`; a
  third-party plugin's is a :class:`PluginWarning` and its result is skipped.
* ``"skip"``: every failure is logged and skipped and the other plugins still
  run (shutdown, restarts: one broken plugin must not leave the rest running).
* ``"fail_closed"``: the first failure from any plugin raises
  :class:`HookFailedError` and no partial result is returned (a missing
  contribution must withhold, not approve).
"""


class HookFailedError(KirocrewError):
    """A ``fail_closed`` hook call stopped at a failing plugin; ``failure`` says which."""

    code = "plugin_hook_failed"
    exit_code = 1

    def __init__(self, failure: HookFailure) -> None:
        super().__init__(failure.describe())
        self.failure = failure


@dataclass(frozen=True)
class HookFailure:
    """One plugin that failed a hook call: ``error`` is what it raised, or why its result was refused."""

    plugin: str
    distribution: str
    hook: str
    error: str

    def describe(self) -> str:
        return f"plugin {self.plugin!r} from distribution {self.distribution!r} failed in {self.hook}(): {self.error}"


@dataclass
class HookCall:
    """What :func:`call_hook` returns: each plugin's result (``None`` included) and each failure."""

    results: list[Contribution] = field(default_factory=list)
    failures: list[HookFailure] = field(default_factory=list)

    @property
    def contributions(self) -> list[Contribution]:
        """The results that are not ``None``, in call order."""
        return [result for result in self.results if result.value is not None]


def _tier(impl: pluggy.HookImpl) -> int:
    return 0 if impl.tryfirst else 2 if impl.trylast else 1


def ordered_hookimpls(pm: KirocrewPluginManager, hook_name: str) -> list[pluggy.HookImpl]:
    """The implementations of ``hook_name`` in call order.

    ``tryfirst`` implementations, then plain ones, then ``trylast`` ones; within
    a tier, sorted by plugin name (the entry-point name for an installed
    plugin). Load and registration order never matter.
    """
    return sorted(getattr(pm.hook, hook_name).get_hookimpls(), key=lambda impl: (_tier(impl), impl.plugin_name))


class _Call:
    """One call of one hook: arguments, the failure policy, and the outcome so far."""

    def __init__(self, pm: KirocrewPluginManager, hook_name: str, on_error: OnError,
                 check: Callable[[Any], str | None] | None, before_each: Callable[[str], None] | None,
                 kwargs: Mapping[str, Any]) -> None:
        if on_error not in ("raise", "skip", "fail_closed"):
            raise ValueError(f"unknown failure policy {on_error!r}")
        self.pm, self.hook, self.on_error, self.check, self.before_each = pm, hook_name, on_error, check, before_each
        self.kwargs = kwargs
        self.outcome = HookCall()

    def start(self, impl: pluggy.HookImpl) -> list[Any] | None:
        """Announce ``impl`` and return its arguments, or ``None`` when it is refused (a hook wrapper).

        A missing argument is the caller's bug, not the plugin's: its ``KeyError`` propagates.
        """
        args = [self.kwargs[name] for name in impl.argnames]
        if impl.hookwrapper or impl.wrapper:
            self.fail(impl, TypeError("hook wrappers are not supported: kirocrew calls each implementation itself"))
            return None
        if self.before_each is not None:
            self.before_each(impl.plugin_name)
        self.pm.trace_line(f"{self.hook} -> {impl.plugin_name}")
        return args

    def finish(self, impl: pluggy.HookImpl, result: Any) -> None:
        problem = self.check(result) if self.check is not None else None
        if problem:
            self.fail(impl, BadHookResult(problem))
            return
        self.outcome.results.append(Contribution(impl.plugin_name, result))

    def fail(self, impl: pluggy.HookImpl, exc: Exception) -> None:
        name = impl.plugin_name
        error = str(exc) if isinstance(exc, BadHookResult) else f"{type(exc).__name__}: {exc}"
        failure = HookFailure(name, self.pm.distribution_of(name), self.hook, error)
        self.outcome.failures.append(failure)
        self.pm.trace_line(f"{self.hook} <- {name} failed: {error}")
        if self.on_error == "fail_closed":
            raise HookFailedError(failure) from exc
        if self.on_error == "skip":
            logger.error("%s", failure.describe(), exc_info=None if isinstance(exc, BadHookResult) else exc)
            return
        what = "returned a bad result from" if isinstance(exc, BadHookResult) else "raised in"
        self.pm.plugin_failed(name, f"{what} {self.hook}()", exc)


class BadHookResult(ValueError):
    """A result that :func:`call_hook`'s ``check`` refused; a failure reports it by its message alone."""


def call_hook(pm: KirocrewPluginManager, hook_name: str, *, on_error: OnError = "raise",
              check: Callable[[Any], str | None] | None = None,
              before_each: Callable[[str], None] | None = None, **kwargs: Any) -> HookCall:
    """Call every implementation of ``hook_name`` in :func:`ordered_hookimpls` order, crediting each result.

    :param on_error: the failure policy (see :data:`OnError`).
    :param check: called with each result; a message it returns makes that
        result a failure of its plugin, handled by ``on_error``.
    :param before_each: called with the plugin name before its implementation
        runs, to credit side effects (the CLI: which plugin added a command).
    :param kwargs: the hook's arguments by name; each implementation gets the ones it takes.
    """
    call = _Call(pm, hook_name, on_error, check, before_each, kwargs)
    for impl in ordered_hookimpls(pm, hook_name):
        if (args := call.start(impl)) is None:
            continue
        try:
            result = impl.function(*args)
        except Exception as exc:  # noqa: BLE001 - the call's failure policy decides
            call.fail(impl, exc)
            continue
        call.finish(impl, result)
    return call.outcome


async def acall_hook(pm: KirocrewPluginManager, hook_name: str, *, on_error: OnError = "raise",
                     check: Callable[[Any], str | None] | None = None,
                     before_each: Callable[[str], None] | None = None, **kwargs: Any) -> HookCall:
    """:func:`call_hook` for the event loop: an awaitable (or callable) result is awaited first."""
    call = _Call(pm, hook_name, on_error, check, before_each, kwargs)
    for impl in ordered_hookimpls(pm, hook_name):
        if (args := call.start(impl)) is None:
            continue
        try:
            result = await await_me_maybe(impl.function(*args))
        except Exception as exc:  # noqa: BLE001 - the call's failure policy decides
            call.fail(impl, exc)
            continue
        call.finish(impl, result)
    return call.outcome


def collect(pm: KirocrewPluginManager, hook_name: str, **kwargs: Any) -> list[Contribution]:
    """Every plugin's non-``None`` result of ``hook_name``, in call order, with the ``"raise"`` policy."""
    return call_hook(pm, hook_name, **kwargs).contributions


async def await_me_maybe(value: Any) -> Any:
    """If ``value`` is callable, call it; if awaitable, await it; else return it."""
    if callable(value):
        value = value()
    if inspect.isawaitable(value):
        value = await value
    return value
