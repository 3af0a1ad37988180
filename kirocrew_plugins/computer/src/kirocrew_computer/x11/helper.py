"""The X11 driver process: AT-SPI trees and actions, XTEST input, window screenshots.

Run as ``/usr/bin/python3 helper.py`` by :mod:`kirocrew_computer.x11.backend`, never
imported by kirocrew. Why a separate process under the *system* Python: ``pyatspi``
is not on PyPI at all, and PyPI ``pygobject`` needs a build against a newer
girepository than Debian 12 ships, so the only working AT-SPI bindings are
Debian's ``python3-pyatspi``/``python3-gi`` for ``/usr/bin/python3``. Our venv
stays free of them, a hung application can stall only this process (which the
backend restarts), and the same protocol could be spoken by another driver.

Protocol: one JSON object per line on stdin, ``{"id", "op", "args"}``; one reply
per line on stdout, ``{"id", "ok": true, "result"}`` or ``{"id", "ok": false,
"code", "message"}``. Nothing else may be written to stdout.

Input rules learned on Xvfb (reference §2.3): XSendEvent is ignored by GTK and
Tk, so pointer and keys go through XTEST (the real pointer, the X focus); AT-SPI's
own keystroke synthesis fails there, so typing is AT-SPI ``grabFocus`` followed by
``xdotool`` (XTEST). Password fields are never read, typed into or set.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

try:
    import gi

    gi.require_version("Atspi", "2.0")
    import pyatspi
    from gi.repository import Atspi
    from Xlib import X, Xatom
    from Xlib import display as xdisplay
    from Xlib.ext import xtest
except ImportError:  # imported from kirocrew's venv (docs, linters): only the running helper needs them
    pyatspi = Atspi = X = Xatom = xdisplay = xtest = None

# pyatspi has no type information: an AT-SPI accessible (application, frame or element) is untyped.
Accessible = Any

# A hung application must not hang the walk: each AT-SPI call gives up after this (ms).
ATSPI_TIMEOUT_MS = 2000
WINDOW_ROLES = {"frame", "window", "dialog", "alert", "file chooser"}
TEXT_ROLES = {"text", "entry", "paragraph", "terminal", "document text", "editbar", "spin button"}
VALUE_ROLES = {"slider", "spin button", "scroll bar", "progress bar", "dial"}
PASSWORD_ROLE = "password text"
CLICK_ACTIONS = ("click", "press", "activate", "toggle", "jump")
BUTTONS = {"left": 1, "middle": 2, "right": 3}
WHEEL = {"up": 4, "down": 5, "left": 6, "right": 7}
WHEEL_CLICKS_PER_PAGE = 5
FOCUS_WAIT_SECS = 1.0
MODIFIERS = {"cmd": "ctrl", "command": "ctrl", "meta": "ctrl", "control": "ctrl", "ctrl": "ctrl",
             "alt": "alt", "option": "alt", "opt": "alt", "shift": "shift", "super": "super", "win": "super"}
KEYS = {"enter": "Return", "return": "Return", "escape": "Escape", "esc": "Escape", "tab": "Tab",
        "space": "space", "backspace": "BackSpace", "delete": "Delete", "del": "Delete",
        "up": "Up", "down": "Down", "left": "Left", "right": "Right", "home": "Home", "end": "End",
        "pageup": "Prior", "page_up": "Prior", "pagedown": "Next", "page_down": "Next", "insert": "Insert",
        **{f"f{n}": f"F{n}" for n in range(1, 13)}}


class Refusal(Exception):
    """A typed failure the backend turns into a BackendError with ``code``."""

    def __init__(self, message: str, code: str = "driver_failed") -> None:
        super().__init__(message)
        self.code = code


class Driver:
    """One connection to X and to the AT-SPI registry, kept for the life of the helper."""

    def __init__(self) -> None:
        Atspi.set_timeout(ATSPI_TIMEOUT_MS, 15000)
        self.x = xdisplay.Display()
        self.root = self.x.screen().root
        self.windows: dict[str, Accessible] = {}  # window_id -> AT-SPI frame, from the last snapshots

    # -- reading -------------------------------------------------------------

    def _apps(self) -> list[Accessible]:
        desktop = pyatspi.Registry.getDesktop(0)
        apps = []
        for i in range(desktop.childCount):
            app = _safe(lambda: desktop.getChildAtIndex(i))
            if app is not None and _safe(app.get_process_id, -1) not in (-1, os.getpid()):
                apps.append(app)
        return apps

    def _x_clients(self) -> list[dict]:
        """Top-level X windows (the WM's client list, else the root's children) with pid/title/class."""
        clients = []
        prop = self.root.get_full_property(self.x.intern_atom("_NET_CLIENT_LIST"), X.AnyPropertyType)
        ids = list(prop.value) if prop else [w.id for w in self.root.query_tree().children]
        for wid in ids:
            win = self.x.create_resource_object("window", wid)
            try:
                pid_prop = win.get_full_property(self.x.intern_atom("_NET_WM_PID"), Xatom.CARDINAL)
                name_prop = win.get_full_property(self.x.intern_atom("_NET_WM_NAME"),
                                                  self.x.intern_atom("UTF8_STRING"))
                title = name_prop.value.decode("utf-8", "replace") if name_prop else (win.get_wm_name() or "")
                wm_class = win.get_wm_class() or ("", "")
            except Exception:  # noqa: BLE001 - the window went away under us
                continue  # the window went away under us
            clients.append({"id": wid, "pid": int(pid_prop.value[0]) if pid_prop else 0,
                            "title": title if isinstance(title, str) else str(title), "class": wm_class[0]})
        return clients

    def _app_info(self, app: Accessible, clients: list[dict]) -> dict:
        pid = _safe(app.get_process_id, 0)
        wm_class = next((c["class"] for c in clients if c["pid"] == pid and c["class"]), "")
        return {"name": _safe(lambda: app.name, "") or "", "app_id": wm_class or _comm(pid), "pid": pid,
                "windows": sum(1 for w in _children(app) if _role(w) in WINDOW_ROLES)}

    def list_apps(self) -> list[dict]:
        clients = self._x_clients()
        infos = [self._app_info(app, clients) for app in self._apps()]
        return [info for info in infos if info["windows"] > 0]

    def _find_app(self, wanted: str) -> tuple[Accessible, dict, list[dict]]:
        clients = self._x_clients()
        key = wanted.strip().lower()
        for app in self._apps():
            info = self._app_info(app, clients)
            if info["windows"] and key in (info["name"].lower(), info["app_id"].lower(), str(info["pid"])):
                return app, info, clients
        raise Refusal(f"no running application with a window matches {wanted!r}", "app_not_found")

    def snapshot(self, app: str, max_nodes: int, max_depth: int, text_limit: int) -> dict:
        target, info, clients = self._find_app(app)
        windows = [w for w in _children(target) if _role(w) in WINDOW_ROLES]
        frame = (next((w for w in windows if _has_state(w, pyatspi.STATE_ACTIVE)), None)
                 or next((w for w in windows if _has_state(w, pyatspi.STATE_SHOWING)), None) or windows[0])
        title = _clip(_safe(lambda: frame.name, "") or "", text_limit)
        origin, size = _client_area(frame)
        xid = next((c["id"] for c in clients if c["pid"] == info["pid"] and c["title"] == frame.name), None)
        index = next(i for i, w in enumerate(_children(target)) if w == frame)
        window_id = f"0x{xid:x}" if xid else f"atspi:{info['pid']}:{index}"
        self.windows[window_id] = frame
        nodes, truncated = _walk(frame, max_nodes, max_depth, text_limit)
        return {"app": info, "window_id": window_id, "title": title, "origin": origin, "size": size,
                "nodes": nodes, "truncated": truncated}

    # -- resolving -----------------------------------------------------------

    def _frame(self, window: dict) -> Accessible:
        frame = self.windows.get(window["window_id"])
        if frame is not None and _safe(lambda: frame.getRoleName()) is not None:
            return frame
        for app in self._apps():  # the helper restarted, or the cached object died: look again
            if _safe(app.get_process_id, 0) == window["pid"]:
                for w in _children(app):
                    if _role(w) in WINDOW_ROLES and _safe(lambda: w.name, None) == window["title"]:
                        self.windows[window["window_id"]] = w
                        return w
        raise Refusal(f"window {window['title']!r} is gone", "element_gone")

    def _element(self, args: dict) -> Accessible:
        node = self._frame(args["window"])
        for step in args["ref"]:
            if step >= _safe(lambda: node.childCount, 0):
                raise Refusal("the element is gone (the window changed)", "element_gone")
            node = node.getChildAtIndex(step)
        if _role(node) != args["role"]:
            raise Refusal(f"the element changed: expected {args['role']!r}, found {_role(node)!r}", "element_gone")
        return node

    def _visible_centre(self, element: Accessible) -> tuple[int, int]:
        """Centre of the part of the element its ancestors do not clip (a long list is mostly scrolled away)."""
        box = _extents(element, pyatspi.DESKTOP_COORDS)
        if box is None or box[2] <= 0 or box[3] <= 0:
            raise Refusal("the element has no on-screen area", "unsupported_action")
        x0, y0, x1, y1 = box[0], box[1], box[0] + box[2], box[1] + box[3]
        parent = _safe(lambda: element.parent)
        while parent is not None and _role(parent) not in ("application", "desktop frame", None):
            clip = _extents(parent, pyatspi.DESKTOP_COORDS)
            # GTK3 viewports report G_MININT origins once scrolled: such a box clips nothing.
            if clip and clip[2] > 0 and clip[3] > 0 and min(clip[0], clip[1]) > -(2**30):
                x0, y0 = max(x0, clip[0]), max(y0, clip[1])
                x1, y1 = min(x1, clip[0] + clip[2]), min(y1, clip[1] + clip[3])
            if _role(parent) in WINDOW_ROLES:
                break
            parent = _safe(lambda: parent.parent)
        if x1 <= x0 or y1 <= y0:
            raise Refusal("the element is scrolled out of view", "unsupported_action")
        return (x0 + x1) // 2, (y0 + y1) // 2

    # -- input ---------------------------------------------------------------

    def _move(self, x: float, y: float) -> None:
        xtest.fake_input(self.x, X.MotionNotify, x=int(round(x)), y=int(round(y)))
        self.x.sync()

    def _button(self, button: int, press: bool) -> None:
        xtest.fake_input(self.x, X.ButtonPress if press else X.ButtonRelease, button)
        self.x.sync()

    def _pointer_click(self, x: float, y: float, button: str, count: int) -> None:
        self._move(x, y)
        time.sleep(0.02)
        for _ in range(count):
            self._button(BUTTONS[button], True)
            self._button(BUTTONS[button], False)
            time.sleep(0.03)

    def click(self, args: dict) -> str:
        method, button, count = args["method"], args["button"], args["count"]
        if method in ("app_post", "sky_click"):
            raise Refusal(f"click_method {method!r} has no X11 form: X11 applications ignore synthetic "
                          "(XSendEvent) input, so every click moves the real pointer", "unsupported_action")
        if args.get("ref") is None:
            if method == "accessibility":
                raise Refusal("click_method 'accessibility' needs an element, not coordinates", "unsupported_action")
            x, y = args["point"]
            self._pointer_click(x, y, button, count)
            return f"clicked {button} x{count} at ({x:g}, {y:g}) with the pointer"
        element = self._element(args)
        if method in ("auto", "accessibility") and button == "left" and count == 1:
            names = _actions(element)
            for wanted in CLICK_ACTIONS:
                if wanted in names:
                    element.queryAction().doAction(names.index(wanted))
                    return f"performed {wanted!r} on {_role(element)} {element.name!r}"
            if method == "accessibility":
                raise Refusal(f"{_role(element)} {element.name!r} has no click action (has {names})",
                              "unsupported_action")
        elif method == "accessibility":
            raise Refusal("accessibility clicks are single left clicks", "unsupported_action")
        x, y = self._visible_centre(element)
        self._pointer_click(x, y, button, count)
        return f"clicked {button} x{count} on {_role(element)} {element.name!r} at ({x}, {y}) with the pointer"

    def drag(self, args: dict) -> str:
        (x0, y0), (x1, y1) = args["start"], args["end"]
        steps, button = max(1, int(args["steps"])), BUTTONS[args["button"]]
        self._move(x0, y0)
        self._button(button, True)
        length = math.hypot(x1 - x0, y1 - y0)
        for i in range(1, steps + 1):
            t = i / steps
            x, y = x0 + (x1 - x0) * t, y0 + (y1 - y0) * t
            if args["path"] == "curved" and length:  # bow sideways by a fifth of the length, back at the end
                bow = math.sin(math.pi * t) * length / 5
                x, y = x - (y1 - y0) / length * bow, y + (x1 - x0) / length * bow
            self._move(x, y)
            time.sleep(0.01)
        self._move(x1, y1)
        self._button(button, False)
        return f"dragged from ({x0:g}, {y0:g}) to ({x1:g}, {y1:g}) in {steps} step(s)"

    def scroll(self, args: dict) -> str:
        element = self._element(args)
        x, y = self._visible_centre(element)
        clicks = max(1, round(args["pages"] * WHEEL_CLICKS_PER_PAGE))
        self._move(x, y)
        for _ in range(clicks):
            self._button(WHEEL[args["direction"]], True)
            self._button(WHEEL[args["direction"]], False)
            time.sleep(0.01)
        return f"scrolled {args['direction']} {clicks} wheel click(s) over {_role(element)} {element.name!r}"

    def _focus(self, element: Accessible, window: dict) -> None:
        if _role(element) == PASSWORD_ROLE:
            raise Refusal("input into a password field is refused", "unsupported_action")
        if window["window_id"].startswith("0x"):
            _xdotool("windowactivate", str(int(window["window_id"], 16)), check=False)
        if not _has_state(element, pyatspi.STATE_FOCUSED):
            _safe(lambda: element.queryComponent().grabFocus())
        deadline = time.monotonic() + FOCUS_WAIT_SECS
        while not _has_state(element, pyatspi.STATE_FOCUSED):
            if time.monotonic() > deadline:
                raise Refusal(f"could not focus {_role(element)} {element.name!r}; nothing was typed")
            time.sleep(0.02)

    def type_text(self, args: dict) -> str:
        element = self._element(args)
        self._focus(element, args["window"])
        _xdotool("type", "--delay", "8", "--", args["text"], timeout=30 + len(args["text"]) * 0.02)
        return f"typed {len(args['text'])} character(s) into {_role(element)} {element.name!r}"

    def press_key(self, args: dict) -> str:
        element = self._element(args)
        combo = xdotool_key(args["key"])
        self._focus(element, args["window"])
        _xdotool("key", "--clearmodifiers", combo)
        return f"pressed {combo} in {_role(element)} {element.name!r}"

    def set_value(self, args: dict) -> str:
        element = self._element(args)
        if _role(element) == PASSWORD_ROLE:
            raise Refusal("setting a password field is refused", "unsupported_action")
        editable = _safe(element.queryEditableText)
        if editable is not None:
            if not editable.setTextContents(args["value"]):
                raise Refusal(f"{_role(element)} {element.name!r} refused the text")
            return f"set the text of {_role(element)} {element.name!r}"
        value = _safe(element.queryValue)
        if value is not None:
            try:
                value.currentValue = float(args["value"])
            except ValueError as exc:
                raise Refusal(f"{_role(element)} takes a number, not {args['value']!r}", "unsupported_action") from exc
            return f"set {_role(element)} {element.name!r} to {float(args['value']):g}"
        raise Refusal(f"{_role(element)} {element.name!r} has no settable value", "unsupported_action")

    def perform_action(self, args: dict) -> str:
        element = self._element(args)
        names = _actions(element)
        lowered = [n.lower() for n in names]
        if args["action"].lower() not in lowered:
            raise Refusal(f"{_role(element)} {element.name!r} has no action {args['action']!r} (has {names})",
                          "unsupported_action")
        element.queryAction().doAction(lowered.index(args["action"].lower()))
        return f"performed {args['action']!r} on {_role(element)} {element.name!r}"

    # -- screenshots ---------------------------------------------------------

    def screenshot(self, args: dict) -> str:
        try:
            from PIL import Image
        except ImportError as exc:
            raise Refusal("screenshots need python3-pil for /usr/bin/python3", "unsupported_action") from exc
        (left, top), (width, height) = _client_area(self._frame(args["window"]))
        box = (left, top, width, height)  # the area node bounds are relative to, so pixels map back to points
        geo = self.root.get_geometry()
        x0, y0 = max(0, box[0]), max(0, box[1])
        x1, y1 = min(geo.width, box[0] + box[2]), min(geo.height, box[1] + box[3])
        if x1 <= x0 or y1 <= y0:
            raise Refusal("the window is off screen", "element_gone")
        raw = self.root.get_image(x0, y0, x1 - x0, y1 - y0, X.ZPixmap, 0xFFFFFFFF)
        image = Image.frombytes("RGB", (x1 - x0, y1 - y0), raw.data, "raw", "BGRX")
        max_width = int(args["max_width"])
        if image.width > max_width:
            image = image.resize((max_width, max(1, round(image.height * max_width / image.width))))
        dest = args["dest"]
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest) or ".", prefix=".shot-")
        try:
            with os.fdopen(fd, "wb") as out:
                image.save(out, "JPEG", quality=int(args["quality"]))
            os.replace(tmp, dest)
        except BaseException:
            os.unlink(tmp)
            raise
        return dest


# -- AT-SPI reading helpers ----------------------------------------------------


def _safe(call: Callable[[], Any], default: Any = None) -> Any:
    """AT-SPI calls fail when an element dies mid-walk; a dead element reads as ``default``."""
    try:
        return call()
    except Exception:  # noqa: BLE001 - a dead element raises anything
        return default


def _role(acc: Accessible) -> str | None:
    return _safe(acc.getRoleName)


def _children(acc: Accessible) -> list[Accessible]:
    out = []
    for i in range(_safe(lambda: acc.childCount, 0) or 0):
        child = _safe(lambda: acc.getChildAtIndex(i))
        if child is not None:
            out.append(child)
    return out


def _has_state(acc: Accessible, state: Any) -> bool:
    return bool(_safe(lambda: acc.getState().contains(state), False))


def _states(acc: Accessible) -> list[str]:
    states = _safe(lambda: acc.getState().getStates(), []) or []
    return sorted(Atspi.StateType(s).value_nick.replace("-", "_") for s in states)


def _actions(acc: Accessible) -> list[str]:
    action = _safe(acc.queryAction)
    if action is None:
        return []
    return [_safe(lambda: action.getName(i), "") or "" for i in range(_safe(lambda: action.nActions, 0) or 0)]


def _extents(acc: Accessible, coords: int) -> list[int] | None:
    box = _safe(lambda: acc.queryComponent().getExtents(coords))
    return None if box is None else [box.x, box.y, box.width, box.height]


def _client_area(frame: Accessible) -> tuple[list[int], list[int]]:
    """Screen origin and size of the area window-local bounds are measured from.

    The frame's own extents include the window manager's decoration (its window-local
    x/y are negative by the border and title bar), so the origin is shifted by them.
    """
    screen = _extents(frame, pyatspi.DESKTOP_COORDS)
    local = _extents(frame, pyatspi.WINDOW_COORDS)
    if screen is None or local is None:
        raise Refusal("the window has no on-screen area", "element_gone")
    return [screen[0] - local[0], screen[1] - local[1]], [max(0, local[2] + local[0]), max(0, local[3] + local[1])]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _value(acc: Accessible, role: str, states: list[str], limit: int) -> str | None:
    if role == PASSWORD_ROLE:
        return None  # never read: GTK returns bullets, other toolkits may not
    if role in TEXT_ROLES or "editable" in states:
        text = _safe(acc.queryText)
        if text is not None:
            count = _safe(lambda: text.characterCount, 0) or 0
            return _clip(_safe(lambda: text.getText(0, min(count, limit + 1)), "") or "", limit)
    if role in VALUE_ROLES:
        value = _safe(lambda: acc.queryValue().currentValue)
        return None if value is None else f"{value:g}"
    return None


def _walk(frame: Accessible, max_nodes: int, max_depth: int, text_limit: int) -> tuple[list[dict], bool]:
    """Pre-order walk from the window, at most ``max_nodes`` nodes and ``max_depth`` levels below it."""
    nodes: list[dict] = []
    # (parent, child index) pairs: a child is fetched only when its turn comes, so a 2,000-row
    # list cut at the cap does not pay a D-Bus round trip for every row it never reaches.
    stack: list[tuple[Accessible, int, int, tuple[int, ...]]] = [(frame, -1, 0, ())]
    while stack:
        if len(nodes) >= max_nodes:
            return nodes, True
        parent, index, depth, ref = stack.pop()
        acc = parent if index < 0 else _safe(lambda: parent.getChildAtIndex(index))
        role = None if acc is None else _role(acc)
        if role is None:
            continue  # died mid-walk
        states = _states(acc)
        if ref and "showing" not in states and "visible" not in states:
            continue  # hidden widgets (closed menus, inactive stack pages)
        if role == PASSWORD_ROLE:
            states = sorted({*states, "password"})
        nodes.append({"role": role, "name": _clip(_safe(lambda: acc.name, "") or "", text_limit),
                      "value": _value(acc, role, states, text_limit), "actions": _actions(acc),
                      "states": states, "bounds": _extents(acc, pyatspi.WINDOW_COORDS), "depth": depth,
                      "ref": list(ref)})
        if depth < max_depth:
            count = _safe(lambda: acc.childCount, 0) or 0
            stack.extend((acc, i, depth + 1, (*ref, i)) for i in reversed(range(count)))
    return nodes, False


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


def xdotool_key(key: str) -> str:
    """``ctrl+a`` / ``shift+tab`` / ``cmd+s`` / ``escape`` → xdotool's keysym syntax."""
    parts = [p.strip() for p in key.split("+")]
    if not all(parts):
        raise Refusal(f"malformed key {key!r}", "unsupported_action")
    *mods, last = parts
    names = []
    for mod in mods:
        if mod.lower() not in MODIFIERS:
            raise Refusal(f"unknown modifier {mod!r} in {key!r}", "unsupported_action")
        names.append(MODIFIERS[mod.lower()])
    names.append(KEYS.get(last.lower(), last))
    return "+".join(names)


def _xdotool(*argv: str, check: bool = True, timeout: float = 30) -> None:
    done = subprocess.run(["xdotool", *argv], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise Refusal(f"xdotool {argv[0]} failed: {done.stderr.strip() or done.returncode}")


def probe() -> dict:
    """What ``available()`` needs: X answers, the accessibility bus answers, screenshots can be encoded."""
    try:
        driver = Driver()
        apps = pyatspi.Registry.getDesktop(0).childCount
    except Exception as exc:  # noqa: BLE001 - any failure means unreachable
        return {"ok": False, "detail": f"X11 or the accessibility bus is unreachable: {type(exc).__name__}: {exc}"}
    try:
        import PIL  # noqa: F401
        shots = "screenshots on"
    except ImportError:
        shots = "screenshots off (install python3-pil)"
    name = driver.x.get_display_name()
    return {"ok": True, "detail": f"X11 {name}, AT-SPI bus answers ({apps} accessible apps), {shots}"}


def main() -> int:
    # Replies own the real stdout; anything a library prints goes to stderr instead of corrupting them.
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if sys.argv[1:] == ["--probe"]:
        replies.write(json.dumps(probe()) + "\n")
        replies.flush()
        return 0
    try:
        driver = Driver()
    except Exception as exc:  # noqa: BLE001 - no display, no bus: say so on the first reply and every one after
        driver, startup_error = None, f"{type(exc).__name__}: {exc}"
    ops: dict[str, Callable[[dict], Any]] = {"ping": lambda a: "pong"}
    if driver is not None:
        live = driver
        ops["list_apps"] = lambda a: live.list_apps()
        ops["snapshot"] = lambda a: live.snapshot(a["app"], a["max_nodes"], a["max_depth"], a["text_limit"])
    while line := sys.stdin.readline():
        if not line.strip():
            continue
        request = json.loads(line)
        op, args = request.get("op"), request.get("args") or {}
        try:
            if driver is None:
                raise Refusal(f"the X11 driver could not start: {startup_error}")
            handler = ops.get(op) or getattr(driver, op if op in _ACTIONS else "", None)
            if handler is None:
                raise Refusal(f"unknown op {op!r}", "unsupported_action")
            reply = {"id": request.get("id"), "ok": True, "result": handler(args)}
        except Refusal as exc:
            reply = {"id": request.get("id"), "ok": False, "code": exc.code, "message": str(exc)}
        except Exception as exc:  # noqa: BLE001 - the client gets driver_failed
            reply = {"id": request.get("id"), "ok": False, "code": "driver_failed",
                     "message": f"{type(exc).__name__}: {exc}"}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
    return 0


_ACTIONS = {"click", "drag", "scroll", "type_text", "press_key", "set_value", "perform_action", "screenshot"}

if __name__ == "__main__":
    sys.exit(main())
