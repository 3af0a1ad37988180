"""A TEST-ONLY computer-use backend plugin: the real protocol over an in-memory widget model.

Registered through the real ``computer_backends`` hook (never a mock of our
code): the chokepoint, index, policy and render under test cannot tell it from
a platform driver. Widgets react like a small app would: the Save button
counts clicks into a label, typing and set_value change an entry's text, and a
password field is never read (``value`` None), like AT-SPI's bullets.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kirocrew_core import hookimpl

from kirocrew_computer.backend import AppInfo, BackendError, BackendSpec, Node, WindowState

JPEG_BYTES = bytes.fromhex("ffd8ffe000104a46494600010100000100010000ffd9")


@dataclass
class Widget:
    role: str
    name: str = ""
    value: str | None = None
    actions: tuple[str, ...] = ()
    states: set[str] = field(default_factory=lambda: {"showing"})
    bounds: tuple[int, int, int, int] | None = (0, 0, 10, 10)
    children: list[Widget] = field(default_factory=list)


@dataclass
class FakeApp:
    info: AppInfo
    title: str
    root: Widget
    origin: tuple[int, int] = (100, 50)
    size: tuple[int, int] = (400, 300)


def notes_app() -> FakeApp:
    pid = os.getpid()
    root = Widget("frame", "Notes", bounds=(0, 0, 400, 300), children=[
        Widget("panel", bounds=None, children=[
            Widget("text", "Title", value="hello", actions=("activate",), states={"showing", "editable"},
                   bounds=(10, 10, 200, 24)),
            Widget("password text", "Password", value=None, actions=("activate",),
                   states={"showing", "editable", "password"}, bounds=(10, 40, 200, 24)),
        ]),
        Widget("push button", "Save", actions=("click",), bounds=(10, 70, 80, 30)),
        Widget("check box", "Remember me", actions=("click",), bounds=(10, 110, 120, 20)),
        Widget("label", "Status", value="saved 0 times", bounds=(10, 140, 200, 20)),
        Widget("label", "Hint", value="use token=ghp_abcdefghijklmnopqrstuvwx1234 to sync", bounds=(10, 170, 300, 20)),
        Widget("scroll pane", "Log", actions=("scroll",), value="line 1", bounds=(10, 200, 380, 90)),
    ])
    return FakeApp(AppInfo("Notes", "org.example.Notes", pid, 1), "Notes — draft", root)


def calculator_app() -> FakeApp:
    root = Widget("frame", "Calculator", bounds=(0, 0, 200, 200), children=[
        Widget("push button", "7", actions=("click",), bounds=(10, 10, 30, 30)),
    ])
    return FakeApp(AppInfo("Calculator", "org.example.Calc", os.getpid() + 1, 1), "Calculator", root,
                   origin=(600, 50), size=(200, 200))


def kirocrew_app() -> FakeApp:
    root = Widget("frame", "Dashboard", bounds=(0, 0, 300, 300), children=[
        Widget("push button", "Enable computer use", actions=("click",), bounds=(10, 10, 150, 30)),
    ])
    return FakeApp(AppInfo("Browser", "org.example.Browser", os.getpid() + 2, 1), "kirocrew — dashboard", root,
                   origin=(0, 400), size=(300, 300))


class FakeDesktop:
    """The backend; ``log`` records every driver call so tests can see what reached the 'app'."""

    name = "fake-desktop"

    def __init__(self) -> None:
        self.apps = [notes_app(), calculator_app(), kirocrew_app()]
        self.log: list[tuple[str, ...]] = []  # input and screenshots
        self.snapshots: list[str] = []  # every tree read, by app asked for
        self.saved = 0
        self.closed = False

    def available(self) -> tuple[bool, str]:
        return True, ""

    def _app(self, wanted: str) -> FakeApp:
        for app in self.apps:
            if wanted.casefold() in (app.info.name.casefold(), app.info.app_id.casefold()):
                return app
        raise BackendError(f"no app {wanted!r}", code="app_not_found")

    def list_apps(self) -> list[AppInfo]:
        return [app.info for app in self.apps]

    def snapshot(self, app: str, *, max_nodes: int, max_depth: int, text_limit: int) -> WindowState:
        self.snapshots.append(app)
        found = self._app(app)
        nodes: list[Node] = []
        truncated = False
        stack: list[tuple[Widget, int, tuple[int, ...]]] = [(found.root, 0, ())]
        while stack:
            widget, depth, ref = stack.pop()
            if len(nodes) >= max_nodes:
                truncated = True
                break
            value = None if "password" in widget.states else (widget.value or "")[:text_limit] or None
            nodes.append(Node(None, widget.role, widget.name, value, widget.actions, frozenset(widget.states),
                              widget.bounds, depth, ref))
            if depth + 1 <= max_depth:
                for number in reversed(range(len(widget.children))):
                    stack.append((widget.children[number], depth + 1, (*ref, number)))
            elif widget.children:
                truncated = True
        return WindowState(found.info, f"win-{found.info.pid}", found.title, found.origin, found.size,
                           tuple(nodes), truncated)

    def screenshot(self, state: WindowState, dest: Path, *, max_width: int = 1280, quality: int = 55) -> Path:
        dest.write_bytes(JPEG_BYTES)
        self.log.append(("screenshot", str(dest)))
        return dest

    def widget(self, state: WindowState, node: Node) -> Widget:
        widget = self._app(state.app.app_id).root
        for number in node.ref:
            widget = widget.children[number]
        return widget

    def _activate(self, state: WindowState, node: Node) -> None:
        widget = self.widget(state, node)
        if widget.name == "Save":
            self.saved += 1
            status = self._app(state.app.app_id).root.children[3]
            status.value = f"saved {self.saved} times"
        elif widget.role == "check box":
            widget.states ^= {"checked"}

    def click(self, state, node, point, *, count, button, method):
        self.log.append(("click", node.name if node else f"{point}", str(count), button, method))
        if method == "app_post":
            raise BackendError("app_post has no faithful form here", code="unsupported_action")
        if node is not None:
            for _ in range(count):
                self._activate(state, node)
            return f"clicked {node.role} \"{node.name}\""
        return f"clicked at {point[0]:g},{point[1]:g}"

    def drag(self, state, start, end, *, button, steps, path):
        self.log.append(("drag", f"{start}", f"{end}"))
        return f"dragged from {start} to {end}"

    def type_text(self, state, node, text):
        self.log.append(("type_text", node.name, text))
        self.widget(state, node).value = text
        return f"typed {len(text)} characters"

    def press_key(self, state, node, key):
        self.log.append(("press_key", node.name, key))
        return f"pressed {key}"

    def set_value(self, state, node, value):
        self.log.append(("set_value", node.name, value))
        self.widget(state, node).value = value
        return "value set"

    def scroll(self, state, node, direction, pages):
        self.log.append(("scroll", node.name, direction, f"{pages:g}"))
        return f"scrolled {direction} {pages:g} pages"

    def perform_action(self, state, node, action):
        self.log.append(("perform_action", node.name, action))
        self._activate(state, node)
        return f"performed {action}"

    def close(self) -> None:
        self.closed = True


class FakeDesktopPlugin:
    """The plugin object: offers one shared :class:`FakeDesktop` on every platform."""

    def __init__(self, desktop: FakeDesktop | None = None) -> None:
        self.desktop = desktop or FakeDesktop()

    @hookimpl
    def computer_backends(self) -> list[BackendSpec]:
        import sys

        return [BackendSpec("fake-desktop", (sys.platform,), lambda: self.desktop)]


# -- helpers the computer tests share (this module is test-only) ----------------------------------
def audit_records(event: str = "computer_use.call") -> list[dict]:
    """The SEL records of ``event`` in the isolated crew home, oldest first."""
    import json

    from kirocrew_core import home

    path = home.audit_log_file()
    if not path.exists():
        return []
    return [record for line in path.read_text().splitlines()
            if (record := json.loads(line))["event"] == event]


def write_keystone(document: object) -> Path:
    """Write the keystone file the way a user editing it by hand would (not through our writer)."""
    import json

    from kirocrew_core import home

    home.ensure_crew_home()
    path = home.crew_home() / "computer_use.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


def runner_argv(*args: str) -> list[str]:
    """argv running the real CLI with this fake backend registered (see run_with_fake_desktop.py)."""
    import sys

    return [sys.executable, str(Path(__file__).with_name("run_with_fake_desktop.py")), *args]


MCP_HANDSHAKE_SECS = 60
FAKE_HOST_PLUGIN_SOURCE = """\
import sys
from pathlib import Path

sys.path.insert(0, {tests!r})

from fake_desktop import FakeDesktopPlugin
from kirocrew_core import hookimpl

_PLUGIN = FakeDesktopPlugin()
_CLOSED_MARKER = {marker!r}


def _close():
    _PLUGIN.desktop.closed = True
    Path(_CLOSED_MARKER).write_text("closed")


_PLUGIN.desktop.close = _close


@hookimpl
def computer_backends():
    return _PLUGIN.computer_backends()
"""


def fake_desktop_host_env(root: Path) -> dict[str, str]:
    """An environment whose host (started by the first relay) drives the fake desktop instead of a real one.

    The plugin is a throwaway distribution on ``PYTHONPATH`` (like ``echo_host_env``), so hosts
    started without this environment never load it. The host writes :func:`driver_closed_marker`
    when it closes the driver. ``TMPDIR`` keeps the host's screenshots under ``root``.
    """
    from kirocrew_testing.distributions import make_plugin_distribution

    source = FAKE_HOST_PLUGIN_SOURCE.format(tests=str(Path(__file__).resolve().parent),
                                            marker=str(driver_closed_marker(root)))
    plugin_root = make_plugin_distribution(root / "fake-desktop-plugin", distribution="kirocrew-fake-desktop",
                                           module="kirocrew_fake_desktop_plugin", source=source,
                                           entry_point="fake-desktop")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(plugin_root), env.get("PYTHONPATH", "")) if p)
    env["TMPDIR"] = str(root)
    return env


def driver_closed_marker(root: Path) -> Path:
    return root / "fake-desktop-closed"


@contextlib.asynccontextmanager
async def mcp_client(argv: list[str], cwd: Path, env: dict[str, str] | None = None,
                     **extra_env: str) -> AsyncIterator[Any]:
    """An initialized mcp SDK ``ClientSession`` on ``argv`` over real stdio (stderr to ``cwd/server.stderr``)."""
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    full_env = {**(os.environ if env is None else env), "TMPDIR": str(cwd), **extra_env}
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=full_env, cwd=str(cwd))
    with (cwd / "server.stderr").open("a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            with anyio.fail_after(MCP_HANDSHAKE_SECS):
                await session.initialize()
            yield session


def text_of(result: Any) -> str:
    """The text of an mcp SDK ``CallToolResult``."""
    return "".join(block.text for block in result.content)
