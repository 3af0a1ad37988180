"""The Linux X11 backend: a thin client of ``helper.py`` run under the system Python.

The AT-SPI bindings exist only for Debian's ``/usr/bin/python3`` (see the helper's
docstring), so every call is one JSON line to a long-lived helper process and one
line back. One helper per backend instance; a helper that dies or stops answering
within its bound is torn down (kirocrew_core.proc) and the next call starts a new
one, so a hung application costs one call, not the server.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kirocrew_core import proc
from kirocrew_computer.backend import AppInfo, BackendError, BackendSpec, Node, WindowState

SYSTEM_PYTHON = "/usr/bin/python3"
HELPER = Path(__file__).with_name("helper.py")
# The variables a desktop session needs to reach X and the accessibility bus; nothing else leaks in.
SESSION_VARS = ("DISPLAY", "XAUTHORITY", "DBUS_SESSION_BUS_ADDRESS", "AT_SPI_BUS_ADDRESS", "XDG_RUNTIME_DIR",
                "HOME", "PATH", "LANG", "LC_ALL")
CALL_TIMEOUT_SECS = 30.0
PROBE_TIMEOUT_SECS = 20.0
# xdotool types at 8 ms a character; a long text gets that much longer before we give up on it.
SECS_PER_TYPED_CHAR = 0.02


class X11Backend:
    """ComputerBackend for X11 desktops (AT-SPI tree and actions, XTEST input)."""

    name = "x11"

    def __init__(self, env: Mapping[str, str] | None = None, *, python: str = SYSTEM_PYTHON,
                 timeout: float = CALL_TIMEOUT_SECS) -> None:
        source = os.environ if env is None else env
        self._env = {k: source[k] for k in SESSION_VARS if k in source}
        self._env.setdefault("PATH", "/usr/bin:/bin")
        self._python = python
        self._timeout = timeout
        self._lock = threading.Lock()
        self._helper: subprocess.Popen[str] | None = None
        self._replies: queue.Queue[str | None] = queue.Queue()
        self._stderr: collections.deque[str] = collections.deque(maxlen=20)
        self._next_id = 0

    # -- the helper process ----------------------------------------------------

    def available(self) -> tuple[bool, str]:
        if not self._env.get("DISPLAY"):
            return False, "DISPLAY is not set (no X11 session; Wayland-only sessions are not supported yet)"
        if not os.access(self._python, os.X_OK):
            return False, f"{self._python} not found (the AT-SPI bindings need the system Python)"
        # A one-shot probe rather than the long-lived helper: a caller may discard this backend unclosed.
        probe = proc.spawn([self._python, str(HELPER), "--probe"], env=self._env, stdin=proc.DEVNULL, text=True)
        try:
            out, err = probe.communicate(timeout=PROBE_TIMEOUT_SECS)
        except subprocess.TimeoutExpired:
            return False, "the accessibility bus did not answer in time"
        finally:
            proc.terminate(probe, reason="probe done")
        try:
            reply = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return False, f"the X11 helper failed: {err.strip()[-300:] or probe.returncode}"
        return bool(reply.get("ok")), str(reply.get("detail", ""))

    def _start(self) -> subprocess.Popen[str]:
        helper = proc.spawn([self._python, str(HELPER)], env=self._env, text=True)
        proc.drain_stderr(helper, self._stderr.append)
        replies: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert helper.stdout is not None
            for line in helper.stdout:
                replies.put(line)
            replies.put(None)  # EOF: the helper is gone

        threading.Thread(target=pump, name=f"kirocrew-x11-{helper.pid}", daemon=True).start()
        self._helper, self._replies = helper, replies
        return helper

    def _stop(self, reason: str) -> None:
        helper, self._helper = self._helper, None
        if helper is not None:
            proc.terminate(helper, reason=reason)

    def _call(self, op: str, timeout: float | None = None, **args: Any) -> Any:
        with self._lock:
            helper = self._helper if self._helper is not None and self._helper.poll() is None else None
            if helper is None:
                self._stop("helper exited")  # reap a dead one before replacing it
                helper = self._start()
            self._next_id += 1
            request = {"id": self._next_id, "op": op, "args": args}
            try:
                assert helper.stdin is not None
                helper.stdin.write(json.dumps(request) + "\n")
                helper.stdin.flush()
                line = self._replies.get(timeout=timeout or self._timeout)
            except (OSError, ValueError):
                line = None
            except queue.Empty:
                self._stop(f"{op} timed out")
                raise BackendError(f"the X11 helper did not answer {op} within {timeout or self._timeout:g}s "
                                   "(a hung application?); it was restarted", "driver_failed") from None
            if line is None:
                self._stop("helper exited")
                tail = " | ".join(self._stderr) or "no output"
                raise BackendError(f"the X11 helper exited during {op}: {tail}", "driver_failed")
        try:
            reply = json.loads(line)
        except ValueError:
            raise BackendError(f"the X11 helper answered {op} with a malformed line: {line[:200]!r}",
                               "driver_failed") from None
        if not reply.get("ok"):
            raise BackendError(reply.get("message", "the X11 helper failed"), reply.get("code", "driver_failed"))
        return reply["result"]

    def close(self) -> None:
        with self._lock:
            self._stop("backend closed")

    # -- reading ---------------------------------------------------------------

    def list_apps(self) -> list[AppInfo]:
        return [AppInfo(**app) for app in self._call("list_apps")]

    def snapshot(self, app: str, *, max_nodes: int, max_depth: int, text_limit: int) -> WindowState:
        raw = self._call("snapshot", app=app, max_nodes=max_nodes, max_depth=max_depth, text_limit=text_limit)
        nodes = tuple(
            Node(index=None, role=n["role"], name=n["name"], value=n["value"], actions=tuple(n["actions"]),
                 states=frozenset(n["states"]), bounds=tuple(n["bounds"]) if n["bounds"] else None,
                 depth=n["depth"], ref=tuple(n["ref"]))
            for n in raw["nodes"]
        )
        return WindowState(app=AppInfo(**raw["app"]), window_id=raw["window_id"], title=raw["title"],
                           origin=tuple(raw["origin"]), size=tuple(raw["size"]), nodes=nodes,
                           truncated=raw["truncated"])

    def screenshot(self, state: WindowState, dest: Path, *, max_width: int = 1280, quality: int = 55) -> Path:
        written = self._call("screenshot", window=_window(state), dest=str(dest), max_width=max_width,
                             quality=quality)
        return Path(written)

    # -- acting ----------------------------------------------------------------

    def click(self, state: WindowState, node: Node | None, point: tuple[float, float] | None, *, count: int,
              button: str, method: str) -> str:
        if node is not None and point is None:
            target = _target(state, node)
        elif point is not None and node is None:
            target = {"window": _window(state), "point": list(point)}
        else:
            raise BackendError("click needs exactly one of an element or a point", "unsupported_action")
        return self._call("click", count=count, button=button, method=method, **target)

    def drag(self, state: WindowState, start: tuple[float, float], end: tuple[float, float], *, button: str,
             steps: int, path: str) -> str:
        return self._call("drag", window=_window(state), start=list(start), end=list(end), button=button,
                          steps=steps, path=path)

    def type_text(self, state: WindowState, node: Node, text: str) -> str:
        return self._call("type_text", timeout=self._timeout + len(text) * SECS_PER_TYPED_CHAR, text=text,
                          **_target(state, node))

    def press_key(self, state: WindowState, node: Node, key: str) -> str:
        return self._call("press_key", key=key, **_target(state, node))

    def set_value(self, state: WindowState, node: Node, value: str) -> str:
        return self._call("set_value", value=value, **_target(state, node))

    def scroll(self, state: WindowState, node: Node, direction: str, pages: float) -> str:
        return self._call("scroll", direction=direction, pages=pages, **_target(state, node))

    def perform_action(self, state: WindowState, node: Node, action: str) -> str:
        return self._call("perform_action", action=action, **_target(state, node))


def _window(state: WindowState) -> dict[str, Any]:
    return {"pid": state.app.pid, "window_id": state.window_id, "title": state.title}


def _target(state: WindowState, node: Node) -> dict[str, Any]:
    return {"window": _window(state), "ref": list(node.ref), "role": node.role}


BACKEND_SPEC = BackendSpec(name="x11", platforms=("linux",), factory=X11Backend)
