"""The text of ``computer_get_state`` (reference §1.3) and the screenshot ring.

Header, then one line per element: ``index role "name" [actions] <secure>/<focused>/traits``,
indented by depth, frames window-local. Empty groups are elided and take no
index; a truncated walk ends with a marker. Password values are never
rendered (backends never read them; render would not print one anyway) and
every string passes :func:`redact.redact`.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import tempfile
from pathlib import Path

from kirocrew_computer.backend import Node, WindowState
from kirocrew_computer.policy import is_secure
from kirocrew_computer.redact import redact

MAX_NAME_CHARS = 200
MAX_ACTIONS_SHOWN = 8
MAX_REPLY_CHARS = 400_000
SHOTS_DIR_NAME = "kirocrew-computer-shots"
SHOTS_KEPT = 200
_GROUP_ROLES = frozenset({"panel", "filler", "group", "section", "layered pane", "unknown", "grouping",
                          "AXGroup", "AXUnknown", "redundant object", "viewport", "scroll pane"})
_TRAITS = ("editable", "checked", "selected", "expanded", "collapsed", "disabled", "pressed")


def _is_empty_group(node: Node) -> bool:
    return (node.role in _GROUP_ROLES and not node.name.strip() and not node.actions and not node.value
            and "focused" not in node.states)


def assign_indices(state: WindowState) -> WindowState:
    """``state`` with indices 0.. on every node except elided empty groups (index None)."""
    nodes, counter = [], 0
    for node in state.nodes:
        if _is_empty_group(node):
            nodes.append(dataclasses.replace(node, index=None))
        else:
            nodes.append(dataclasses.replace(node, index=counter))
            counter += 1
    return dataclasses.replace(state, nodes=tuple(nodes))


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split()) if "\n" in text or "\r" in text else text
    return text if len(text) <= limit else text[:limit] + "…"


def _quoted(text: str, limit: int) -> str:
    return '"' + _clip(redact(text), limit).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _line(node: Node, indent: int, text_limit: int) -> str:
    parts = [f"{'  ' * indent}{node.index} {node.role} {_quoted(node.name, MAX_NAME_CHARS)}"]
    if node.actions:
        shown = list(node.actions[:MAX_ACTIONS_SHOWN]) + (["…"] if len(node.actions) > MAX_ACTIONS_SHOWN else [])
        parts.append("[" + ", ".join(_clip(a, 40) for a in shown) + "]")
    if is_secure(node):
        parts.append("<secure>")  # and never a value
    elif node.value:
        parts.append("value=" + _quoted(node.value, text_limit))
    flags = ["focused"] if "focused" in node.states else []
    flags += [trait for trait in _TRAITS if trait in node.states]
    if flags:
        parts.append("<" + "/".join(flags) + ">")
    if node.bounds is not None:
        x, y, w, h = node.bounds
        parts.append(f"({x},{y} {w}x{h})")
    return " ".join(parts)


def render_tree(state: WindowState, *, text_limit: int) -> str:
    """The indexed, indented tree of an indexed state (see :func:`assign_indices`)."""
    elided = {node.ref for node in state.nodes if node.index is None}
    lines: list[str] = []
    for node in state.nodes:
        if node.index is None:
            continue
        hidden = sum(1 for cut in range(len(node.ref)) if node.ref[:cut] in elided)
        lines.append(_line(node, max(0, node.depth - hidden), text_limit))
    if state.truncated:
        lines.append(f"[tree truncated at {len(state.nodes)} nodes]")
    return "\n".join(lines)


def render_header(state: WindowState) -> str:
    (ox, oy), (width, height) = state.origin, state.size
    return "\n".join((
        f"App={redact(state.app.app_id)} (pid {state.app.pid})",
        f"Window: {_quoted(state.title, MAX_NAME_CHARS)}, App: {redact(state.app.name)}",
        f"Window origin: ({ox}, {oy}) size {width}x{height}; element frames are window-local "
        f"(screen x = {ox} + frame x, screen y = {oy} + frame y).",
    ))


def screenshot_allowed(state: WindowState) -> tuple[bool, str]:
    """No screenshot of a window showing a password field, nor of one we did not see whole."""
    if any(is_secure(node) for node in state.nodes):
        return False, "screenshot suppressed: the window contains a password field"
    if state.truncated:
        return False, "screenshot suppressed: the tree was truncated, so the window was not fully checked"
    return True, ""


def render_state(state: WindowState, *, text_limit: int, screenshot: Path | None = None,
                 screenshot_note: str = "") -> str:
    """The full ``computer_get_state`` text."""
    parts = [render_header(state)]
    if screenshot is not None:
        width = state.size[0]
        parts.append(f"Screenshot: {screenshot} (JPEG, at most 1280 px wide; screen x = {state.origin[0]} + "
                     f"pixel x * {width} / image width, same for y). Read it only if the tree is not enough.")
    elif screenshot_note:
        parts.append(screenshot_note)
    parts.append("")
    parts.append(render_tree(state, text_limit=text_limit))
    text = "\n".join(parts)
    if len(text) > MAX_REPLY_CHARS:
        text = text[:MAX_REPLY_CHARS] + "\n[reply truncated; lower max_tree_nodes or text_limit]"
    return text


def shots_dir() -> Path:
    """``$TMPDIR/kirocrew-computer-shots``, 0700 and ours, or OSError."""
    path = Path(tempfile.gettempdir()) / SHOTS_DIR_NAME
    path.mkdir(mode=0o700, exist_ok=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise OSError(f"{path} is not a directory owned by this user")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:  # another process pruned it meanwhile
        return 0


def new_shot_path() -> Path:
    """A fresh private file for one screenshot; the oldest beyond :data:`SHOTS_KEPT` are removed."""
    directory = shots_dir()
    fd, name = tempfile.mkstemp(prefix="shot-", suffix=".jpg", dir=directory)
    os.close(fd)
    shots = sorted((_mtime(p), p) for p in directory.glob("shot-*.jpg"))
    for _, old in shots[:-SHOTS_KEPT]:
        if old.name != Path(name).name:
            old.unlink(missing_ok=True)
    return Path(name)
