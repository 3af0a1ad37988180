"""The one dispatch every computer-use call goes through (MCP server and CLI alike).

Order (reference §1.1): schema → keystone → caller identity → app policy →
index freshness and drift → input-target policy → the driver in a worker
thread → a refreshed state after a short settle → redaction. Every call, run
or refused, leaves one SEL record (``computer_use.call``), plus
``computer_use.pointer`` when the real pointer moves. Refusals are replies
whose text starts ``Error: `` and whose stable code is in the audit record.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kirocrew_core import audit
from kirocrew_core.host.caller import current_caller

from kirocrew_computer import policy, render
from kirocrew_computer.backend import BackendError, ComputerBackend, Node, WindowState
from kirocrew_computer.errors import Refusal
from kirocrew_computer.index import Budget, Entry, SnapshotIndex, check_drift, window_key
from kirocrew_computer.keystone import Keystone, read_keystone
from kirocrew_computer.redact import redact
from kirocrew_computer.schemas import TOOLS_BY_NAME, validate
from kirocrew_computer.unsupported import UnsupportedBackend

if TYPE_CHECKING:
    from kirocrew_core.plugins import KirocrewPluginManager

log = logging.getLogger(__name__)

SETTLE_SECONDS = 0.15
SESSION_ENV = "KIROCREW_SESSION_KEY"
_SESSION_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")


REFUSAL_PREFIX = "Error: "


@dataclass(frozen=True)
class Reply:
    """One call's answer: ``text`` for the model, ``code`` ("ok" or the refusal code) for the audit.

    A refusal's ``text`` is ``Error: <message>`` (the gateway's and the CLI's form); the MCP server
    sends ``code`` and :attr:`message` as the kirocrew error result instead.
    """

    tool: str
    text: str
    code: str = "ok"

    @property
    def ok(self) -> bool:
        return self.code == "ok"

    @property
    def message(self) -> str:
        """The text without the ``Error: `` that marks a refusal."""
        return self.text.removeprefix(REFUSAL_PREFIX)


def caller_identity(env: dict[str, str] | None = None) -> str:
    """Who calls: the session key, else ``unresolved:<pid>`` (honest empty attribution, never a refusal).

    Inside the host the key is the one the caller's relay stamped (its verified caller
    block) and the pid is the relay's, so each client keeps its own audit actor and
    snapshots; in a process of its own (the standalone server, the CLI) it is
    ``KIROCREW_SESSION_KEY`` and that process's pid.
    """
    if env is None:
        caller = current_caller()
        if caller is not None:
            key = caller.session_key
            return key if _SESSION_KEY.match(key) else f"unresolved:{caller.relay_pid}"
    value = (os.environ if env is None else env).get(SESSION_ENV, "")
    return value if _SESSION_KEY.match(value) else f"unresolved:{os.getpid()}"


def choose_backend(pm: KirocrewPluginManager | None = None) -> tuple[ComputerBackend, list[str]]:
    """The first offered backend for this platform that is available, and why the others were not."""
    from kirocrew_core.contributions import flatten
    from kirocrew_core.plugins import collect, get_plugin_manager

    pm = pm or get_plugin_manager()
    reasons: list[str] = []
    for contribution in flatten(collect(pm, "computer_backends")):
        spec = contribution.value
        if sys.platform not in spec.platforms:
            reasons.append(f"{spec.name} ({contribution.plugin}): not for {sys.platform}")
            continue
        backend = spec.factory()
        ok, why = backend.available()
        if ok:
            return backend, reasons
        reasons.append(f"{spec.name} ({contribution.plugin}): {why}")
        backend.close()
    reason = "; ".join(reasons) if reasons else f"no computer-use driver is installed for {sys.platform}"
    return UnsupportedBackend(reason), reasons


class Chokepoint:
    """Holds the driver and the snapshot index for one process; calls are serialised."""

    def __init__(self, backend_factory: Callable[[], ComputerBackend] | None = None, *,
                 index: SnapshotIndex | None = None, settle_seconds: float = SETTLE_SECONDS,
                 screenshot_default: bool = True) -> None:
        self._factory = backend_factory or (lambda: choose_backend()[0])
        self._backend: ComputerBackend | None = None
        self.index = index or SnapshotIndex()
        self.settle_seconds = settle_seconds
        self.screenshot_default = screenshot_default
        self._lock = asyncio.Lock()
        self._closed = False

    # -- plumbing -----------------------------------------------------------------------------
    async def _driver(self) -> ComputerBackend:
        if self._closed:
            raise BackendError("computer use has stopped in this process", code="driver_closed")
        if self._backend is None:
            self._backend = await asyncio.to_thread(self._factory)
        return self._backend

    async def _call(self, operation: str, /, *args: Any, **kwargs: Any) -> Any:
        backend = await self._driver()
        return await asyncio.to_thread(getattr(backend, operation), *args, **kwargs)

    def close(self) -> None:
        if self._backend is not None:
            backend, self._backend = self._backend, None
            backend.close()

    async def aclose(self) -> None:
        """Close the driver once no call is using it; every later call is refused (``driver_closed``).

        For a chokepoint shared by many clients (the host's): a client still connected while
        the host stops must neither see its call's driver closed under it nor start a new one.
        """
        async with self._lock:
            self._closed = True
            await asyncio.to_thread(self.close)

    # -- the dispatch -------------------------------------------------------------------------
    async def call(self, tool: str, arguments: Any, *, session: str | None = None) -> Reply:
        """Run one call through every check; never raises for a refusal or a driver failure."""
        session = session or caller_identity()
        name = tool if isinstance(tool, str) and tool in TOOLS_BY_NAME else "unknown"
        fields: dict[str, Any] = {"tool": name}
        if isinstance(arguments, dict):
            for key in ("app", "element_index", "click_method", "action", "direction"):
                if isinstance(arguments.get(key), (str, int)) and not isinstance(arguments.get(key), bool):
                    fields[key] = arguments[key] if not isinstance(arguments[key], str) else arguments[key][:256]
        async with self._lock:
            try:
                args = validate(tool, arguments)
                keystone = await asyncio.to_thread(read_keystone)
                if not keystone.enabled:
                    raise Refusal(keystone.reason, "keystone_off")
                text, code, outcome = await self._run(name, args, keystone, session, fields), "ok", "ok"
            except Refusal as exc:
                text, code, outcome = f"{REFUSAL_PREFIX}{exc.message}", exc.code, "refused"
            except BackendError as exc:
                text, code, outcome = f"{REFUSAL_PREFIX}{redact(str(exc))}", exc.code, "failed"
            except Exception:  # the model gets a code, stderr the traceback
                log.exception("computer-use tool %s failed unexpectedly", name)
                text, code, outcome = f"{REFUSAL_PREFIX}{name} failed unexpectedly", "internal_error", "failed"
        try:
            await asyncio.to_thread(audit.record, "computer_use.call", actor=session, outcome=outcome,
                                    code=code, **fields)
        except Exception as exc:  # noqa: BLE001 - an unaudited call must not look like a success
            log.error("computer-use audit record failed: %s", exc)
            return Reply(name, f"{REFUSAL_PREFIX}the call could not be audited ({exc})", "audit_failed")
        return Reply(name, text, code)

    async def run_calls(self, calls: Iterable[tuple[str, Any]], *, session: str | None = None) -> list[Reply]:
        """Sequential calls in one process (the CLI harness); an error never stops the rest."""
        return [await self.call(tool, args, session=session) for tool, args in calls]

    async def _run(self, tool: str, args: dict[str, Any], keystone: Keystone, session: str,
                   fields: dict[str, Any]) -> str:
        if tool == "computer_end_turn":
            dropped = self.index.end_turn(session)
            return f"Dropped {dropped} cached window snapshot{'s' if dropped != 1 else ''}."
        if tool == "computer_list_apps":
            return await self._list_apps(keystone)
        if tool == "computer_get_state":
            return await self._get_state(args, keystone, session)
        return await self._mutate(tool, args, keystone, session, fields)

    async def _list_apps(self, keystone: Keystone) -> str:
        apps = await self._call("list_apps")
        shown = [app for app in apps if policy.app_permitted(keystone, app)]
        lines = [f"{redact(app.name)} (app id {redact(app.app_id)}, pid {app.pid}, "
                 f"{app.windows} window{'s' if app.windows != 1 else ''})" for app in shown]
        hidden = len(apps) - len(shown)
        if not lines:
            lines.append("No applications with windows that policy allows.")
        if hidden:
            lines.append(f"({hidden} other app{'s' if hidden != 1 else ''} hidden by computer-use policy)")
        return "\n".join(lines)

    async def _resolve_app(self, keystone: Keystone, wanted: str) -> None:
        """App policy before the app is read at all."""
        matches = [app for app in await self._call("list_apps") if policy.app_matches(app, wanted)]
        if not matches:
            raise Refusal(f"no running app named '{wanted[:80]}'; computer_list_apps lists them", "app_not_found")
        for app in matches:
            policy.check_app(keystone, app)

    async def _snapshot(self, app: str, budget: Budget, keystone: Keystone) -> WindowState:
        state = await self._call("snapshot", app, max_nodes=budget.max_nodes, max_depth=budget.max_depth,
                                 text_limit=budget.text_limit)
        policy.check_app(keystone, state.app, state.title)  # the title may name kirocrew
        return render.assign_indices(state)

    async def _get_state(self, args: dict[str, Any], keystone: Keystone, session: str) -> str:
        await self._resolve_app(keystone, args["app"])
        budget = Budget(args["max_tree_nodes"], args["max_tree_depth"], args["text_limit"])
        state = await self._snapshot(args["app"], budget, keystone)
        self.index.put(session, state, budget)
        shot, note = None, ""
        if args.get("screenshot", self.screenshot_default):
            allowed, note = render.screenshot_allowed(state)
            if allowed:
                try:
                    shot = await self._call("screenshot", state, render.new_shot_path())
                except (BackendError, OSError) as exc:
                    note = f"screenshot unavailable: {redact(str(exc))}"
        return render.render_state(state, text_limit=budget.text_limit, screenshot=shot, screenshot_note=note)

    async def _mutate(self, tool: str, args: dict[str, Any], keystone: Keystone, session: str,
                      fields: dict[str, Any]) -> str:
        entry: Entry = self.index.get(session, args["app"])  # freshness: refuses without a live snapshot
        policy.check_app(keystone, entry.state.app, entry.state.title)
        if tool == "computer_click":
            policy.check_click_target(args)
        old: Node | None = entry.node(args["element_index"]) if "element_index" in args else None
        fresh = await self._snapshot(args["app"], entry.budget, keystone)
        if window_key(fresh) != window_key(entry.state):
            raise Refusal(f"the window of '{entry.state.app.name}' changed since computer_get_state. "
                          "Call computer_get_state again", "index_drift")
        node = check_drift(old, fresh) if old is not None else None
        policy.check_input_target(tool, node)
        detail, pointer = await self._drive(tool, args, fresh, node)
        if pointer is not None:
            await asyncio.to_thread(audit.record, "computer_use.pointer", actor=session, outcome="ok",
                                    tool=tool, app=fresh.app.name[:256], points=pointer)
        await asyncio.sleep(self.settle_seconds)
        try:
            after = await self._snapshot(args["app"], entry.budget, keystone)
        except (BackendError, Refusal) as exc:
            return f"{redact(detail)}\n\nRefreshed state unavailable: {redact(str(exc))}"
        self.index.put(session, after, entry.budget)
        tree = render.render_state(after, text_limit=entry.budget.text_limit)
        return f"{redact(detail)}\n\nRefreshed state:\n{tree}"

    async def _drive(self, tool: str, args: dict[str, Any], state: WindowState,
                     node: Node | None) -> tuple[str, list[list[float]] | None]:
        """The driver call, and the screen points the real pointer visits (None: it did not move)."""
        if tool == "computer_click":
            point = (float(args["x"]), float(args["y"])) if node is None else None
            if point is not None:
                policy.check_point_in_window(state, point)
            detail = await self._call("click", state, node, point, count=args["click_count"],
                                      button=args["mouse_button"], method=args["click_method"])
            if point is not None:
                return detail, [list(point)]
            return detail, [] if args["click_method"] == "global" else None
        if tool == "computer_drag":
            start = (float(args["from_x"]), float(args["from_y"]))
            end = (float(args["to_x"]), float(args["to_y"]))
            policy.check_point_in_window(state, start)
            policy.check_point_in_window(state, end)
            detail = await self._call("drag", state, start, end, button=args["mouse_button"],
                                      steps=args["steps"], path=args["path"])
            return detail, [list(start), list(end)]
        assert node is not None
        if tool == "computer_type_text":
            return await self._call("type_text", state, node, args["text"]), None
        if tool == "computer_press_key":
            return await self._call("press_key", state, node, args["key"]), None
        if tool == "computer_set_value":
            return await self._call("set_value", state, node, args["value"]), None
        if tool == "computer_scroll":
            return await self._call("scroll", state, node, args["direction"], float(args["pages"])), None
        if tool == "computer_perform_action":
            if args["action"] not in node.actions:
                raise Refusal(f"element {node.index} does not advertise action '{args['action'][:64]}'; "
                              f"it has: {', '.join(node.actions) or 'none'}", "unsupported_action")
            return await self._call("perform_action", state, node, args["action"]), None
        raise Refusal(f"{tool} is not a mutating tool", "unknown_tool")
