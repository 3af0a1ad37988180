"""A headless X11 desktop for the computer-use tests and benchmark.

Xvfb, a private session bus, the AT-SPI bus launcher and openbox, all started as
our children (kirocrew_core.proc) with every file under one temporary directory,
and torn down with nothing left behind. Reference §2.2 verified that AT-SPI
works like this without any gsettings; openbox is there because focus and
stacking are odd without a window manager (§2.3), and typing needs focus.

Usable as the module-scoped pytest fixture ``desktop`` (skips with the reason
when a binary is missing) or as the context manager :func:`running_desktop`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytest

from kirocrew_core import proc
from kirocrew_testing.requirements import unavailable

SYSTEM_PYTHON = "/usr/bin/python3"
FIXTURE_APP = Path(__file__).with_name("fixture_app.py")
AT_SPI_BUS_LAUNCHER = "/usr/libexec/at-spi-bus-launcher"
AT_SPI_REGISTRYD = "/usr/libexec/at-spi2-registryd"
_NEEDED = ("Xvfb", "dbus-daemon", "dbus-send", "openbox", "xdotool", "xprop",
           AT_SPI_BUS_LAUNCHER, AT_SPI_REGISTRYD, SYSTEM_PYTHON)
_START_TIMEOUT = 15.0
_LOGS: dict[int, Path] = {}  # each child's output, for a start failure's message


@dataclass
class Desktop:
    """A running headless desktop: ``env`` is what a child needs to reach it."""

    display: str
    root: Path
    env: dict[str, str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def launch_fixture_app(self, result_file: Path, rows: int = 50) -> subprocess.Popen[bytes]:
        """Start the GTK3 fixture app and wait until it has drawn its window."""
        argv = [SYSTEM_PYTHON, str(FIXTURE_APP), str(result_file), str(rows)]
        app = _spawn_logged(argv, self.env, self.root / "logs")
        self.procs.append(app)
        _wait_for(lambda: result_file.exists() and "ready" in result_file.read_text(), app,
                  "the fixture app to show its window", timeout=30 + rows / 100)
        return app


def missing() -> str | None:
    """Why this machine cannot run the desktop, or None when it can."""
    absent = [name for name in _NEEDED if not (shutil.which(name) or os.access(name, os.X_OK))]
    if absent:
        return f"headless desktop needs {', '.join(absent)} (apt: xvfb dbus at-spi2-core openbox xdotool x11-utils)"
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import pyatspi, Xlib, gi; gi.require_version('Gtk', '3.0')"],
                           capture_output=True, env={"PATH": "/usr/bin:/bin"}, timeout=30)
    if probe.returncode != 0:
        return "system python lacks pyatspi/python3-xlib/GTK3 (apt: python3-pyatspi python3-xlib gir1.2-gtk-3.0)"
    return None


def _spawn_logged(argv: list[str], env: dict[str, str], logs: Path) -> subprocess.Popen[bytes]:
    """Start a child whose stdout and stderr go to ``logs/<program>.log`` (openbox complains on stdout)."""
    logs.mkdir(exist_ok=True)
    log = logs / f"{Path(argv[0]).name}-{len(list(logs.iterdir()))}.log"
    with log.open("wb") as out:
        child = proc.spawn(argv, env=env, stdin=proc.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    _LOGS[child.pid] = log
    return child


def _wait_for(ready: Callable[[], object], child: subprocess.Popen[bytes], what: str,
              timeout: float = _START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if child.poll() is not None:
            log = _LOGS.get(child.pid)
            said = log.read_text(errors="replace")[-800:].strip() if log else ""
            program = cast(list[str], child.args)[0]  # every child here is spawned from an argv list
            raise RuntimeError(f"{program} exited ({child.returncode}) while waiting for {what}: {said}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _start_xvfb(env: dict[str, str], logs: Path) -> tuple[str, subprocess.Popen[bytes]]:
    # Xvfb -displayfd would pick for us, but proc.spawn passes no extra fds: probe instead.
    for number in range(90, 190):
        if Path(f"/tmp/.X11-unix/X{number}").exists() or Path(f"/tmp/.X{number}-lock").exists():
            continue
        # -noreset: by default the server resets when the probe disconnects, and the next client races that.
        xvfb = _spawn_logged(["Xvfb", f":{number}", "-screen", "0", "1280x1024x24", "-nolisten", "tcp", "-noreset"],
                             env, logs)
        probe = {**env, "DISPLAY": f":{number}"}
        deadline = time.monotonic() + _START_TIMEOUT
        while xvfb.poll() is None and not _answers(probe) and time.monotonic() < deadline:
            time.sleep(0.05)
        if xvfb.poll() is None:
            return f":{number}", xvfb
        proc.terminate(xvfb, reason="display taken")
    raise RuntimeError("no free X display between :90 and :189")


@contextlib.contextmanager
def running_desktop(root: Path) -> Iterator[Desktop]:
    """Start Xvfb + session bus + AT-SPI bus + openbox under ``root``; stop them all on exit."""
    before = set(proc.live_descendants())
    for sub in ("home", "run", "config", "cache", "data"):
        (root / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(root / "home"),
        "XDG_RUNTIME_DIR": str(root / "run"),
        "XDG_CONFIG_HOME": str(root / "config"),
        "XDG_CACHE_HOME": str(root / "cache"),
        "XDG_DATA_HOME": str(root / "data"),
        "LANG": "C.UTF-8",
        "NO_AT_BRIDGE": "0",  # GTK3 loads the ATK bridge unless this is 1
        "GTK_A11Y": "atspi",  # GTK4's switch; harmless for GTK3
        "GDK_BACKEND": "x11",
    }
    desktop = Desktop(display="", root=root, env=env)
    try:
        display, xvfb = _start_xvfb(env, root / "logs")
        desktop.procs.append(xvfb)
        desktop.display = env["DISPLAY"] = display

        bus_socket = root / "run" / "bus"
        # Its "Failed to set fd limit" on stderr is expected noise.
        bus = _spawn_logged(["dbus-daemon", "--session", "--nofork", "--nopidfile",
                             f"--address=unix:path={bus_socket}"], env, root / "logs")
        desktop.procs.append(bus)
        _wait_for(bus_socket.exists, bus, "the session bus socket")
        env["DBUS_SESSION_BUS_ADDRESS"] = f"unix:path={bus_socket}"

        # Started by us rather than D-Bus-activated, so it is our child and its teardown is ours.
        launcher = _spawn_logged([AT_SPI_BUS_LAUNCHER, "--launch-immediately"], env, root / "logs")
        desktop.procs.append(launcher)
        _wait_for(lambda: _bus_has_name(env, "org.a11y.Bus"), launcher, "the AT-SPI bus")

        # The registry too: left to D-Bus activation it starts inside whichever test first asks, and the
        # process guard rightly counts it as that test's leftover.
        a11y = _a11y_address(env)
        registry = _spawn_logged([AT_SPI_REGISTRYD], env, root / "logs")
        desktop.procs.append(registry)
        _wait_for(lambda: _bus_has_name(env, "org.a11y.atspi.Registry", bus=a11y), registry, "the AT-SPI registry")

        wm = _spawn_logged(["openbox", "--sm-disable"], env, root / "logs")
        desktop.procs.append(wm)
        _wait_for(lambda: _wm_running(env), wm, "openbox to manage the screen")
        yield desktop
    finally:
        for child in reversed(desktop.procs):
            proc.terminate(child, reason="desktop teardown")
        # D-Bus-activated daemons (the registry) are not in our process groups: reap them too.
        deadline = time.monotonic() + 3.0
        while (left := [p for p in proc.live_descendants() if p not in before]) and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.kill_pids(left)
        for pid in left:  # they were re-parented to us (subreaper): reap, or they linger as zombies
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _a11y_address(env: dict[str, str]) -> str:
    out = subprocess.run(["dbus-send", "--session", "--print-reply", "--dest=org.a11y.Bus", "/org/a11y/bus",
                          "org.a11y.Bus.GetAddress"], capture_output=True, text=True, env=env, timeout=10)
    match = re.search(r'string "([^"]+)"', out.stdout)
    if not match:
        raise RuntimeError(f"the AT-SPI bus did not give its address: {out.stderr.strip()}")
    return match.group(1)


def _bus_has_name(env: dict[str, str], name: str, *, bus: str | None = None) -> bool:
    where = f"--bus={bus}" if bus else "--session"
    out = subprocess.run(["dbus-send", where, "--print-reply", "--dest=org.freedesktop.DBus",
                          "/org/freedesktop/DBus", "org.freedesktop.DBus.NameHasOwner", f"string:{name}"],
                         capture_output=True, text=True, env=env, timeout=10)
    return "boolean true" in out.stdout


def _answers(env: dict[str, str]) -> bool:
    """The X server at env's DISPLAY accepts a client (its socket alone may belong to a dying server)."""
    return subprocess.run(["xprop", "-root", "-len", "0", "_NET_SUPPORTING_WM_CHECK"], capture_output=True,
                          env=env, timeout=10).returncode == 0


def _wm_running(env: dict[str, str]) -> bool:
    out = subprocess.run(["xprop", "-root", "_NET_SUPPORTING_WM_CHECK"], capture_output=True, text=True,
                         env=env, timeout=10)
    return "window id" in out.stdout


@pytest.fixture(scope="module")
def desktop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desktop]:
    """A headless desktop shared by one test module (starting one costs seconds)."""
    reason = missing()
    if reason:
        unavailable(reason)
    from kirocrew_testing.process_guard import become_subreaper

    become_subreaper()  # so D-Bus-activated orphans stay ours to reap
    with running_desktop(tmp_path_factory.mktemp("desktop")) as running:
        yield running
