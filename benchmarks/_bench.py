"""What the benchmark scripts share: one results line, the CLI's argv, a throwaway fake-kiro environment.

Scripts run as ``python benchmarks/<name>.py``, so this directory is on ``sys.path`` and they
``from _bench import …``.
"""

from __future__ import annotations

import contextlib
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit


def row(label: str, samples: list[float], *, width: int = 34, fmt: str = "7.2f",
        extremes: Sequence[str] = ("min",)) -> str:
    """``label  median … ms   p90 … ms   min … ms`` (``extremes`` picks min and/or max)."""
    ordered = sorted(samples)
    p90 = ordered[int(0.9 * (len(ordered) - 1))]
    parts = [f"{label:<{width}} median {statistics.median(ordered):{fmt}} ms", f"p90 {p90:{fmt}} ms"]
    picks = {"min": ordered[0], "max": ordered[-1]}
    parts += [f"{name} {picks[name]:{fmt}} ms" for name in extremes]
    return "   ".join(parts)


def kirocrew_argv() -> list[str]:
    """The installed ``kirocrew`` next to this Python, or ``python -m`` from a bare checkout."""
    exe = Path(sys.executable).with_name("kirocrew")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "kirocrew_core"]


@contextlib.contextmanager
def cli_homes() -> Iterator[tuple[Path, dict[str, str]]]:
    """The installed ``kirocrew`` and an environment under a throwaway HOME, taken by this process too.

    This process takes the homes as well, so ``kirocrew_core.home`` names the files the CLI writes
    (its command index). Exits 2 without a ``kirocrew`` next to this Python.
    """
    exe = Path(sys.executable).with_name("kirocrew")
    if not exe.exists():
        raise SystemExit(f"no kirocrew next to {sys.executable}; run with the project's .venv python")
    with tempfile.TemporaryDirectory() as user_home:
        os.environ.update(HOME=user_home, KIRO_HOME=f"{user_home}/.kiro")
        os.environ.pop("KIROCREW_HOME", None)
        yield exe, dict(os.environ)


def fake_kiro_environment(root: Path, *, state_dir: bool = False) -> dict[str, str]:
    """A throwaway HOME, Kiro home and crew home under ``root`` with the fake kiro-cli as ``KIRO_CLI_PATH``."""
    fake = Path(sys.executable).with_name("fake-kiro-cli")
    if not fake.exists() or not Path(sys.executable).with_name("kirocrew").exists():
        raise SystemExit(f"no kirocrew/fake-kiro-cli next to {sys.executable}; run with the project's .venv python")
    (root / "home").mkdir()
    (root / "workspace").mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("KIRO_CONVERSATIONS_")}
    env.update(HOME=str(root / "home"), KIRO_HOME=str(root / "home" / ".kiro"), KIROCREW_HOME=str(root / "crew"),
               KIRO_CLI_PATH=str(fake))
    if state_dir:
        env["KIRO_CONVERSATIONS_STATE_DIR"] = str(root / "state")
    return env


class GatewayFailed(RuntimeError):
    """``kirocrew serve`` did not print its URL; the message holds its stderr."""


@contextlib.contextmanager
def serve_gateway(env: dict[str, str], root: Path, *, timeout: float = 60,
                  args: Sequence[str] = ()) -> Iterator[Any]:
    """A real ``kirocrew serve --port 0 *args`` under ``env`` and an owner-authenticated httpx client to it."""
    import httpx

    from kirocrew_core import proc

    stderr_path = root / "serve.stderr"
    with stderr_path.open("w") as stderr:
        gateway = proc.spawn([*kirocrew_argv(), "serve", "--port", "0", *args], env=env, stderr=stderr, text=True)
        assert gateway.stdout is not None
        try:
            line = gateway.stdout.readline().strip()
            if "http://" not in line:
                raise GatewayFailed(f"serve printed no URL; stderr:\n{stderr_path.read_text()}")
            url = urlsplit(line[line.index("http://"):])
            token = parse_qs(url.query)["token"][0]
            with httpx.Client(base_url=f"{url.scheme}://{url.netloc}", headers={"Authorization": f"Bearer {token}"},
                              timeout=timeout) as client:
                yield client
        finally:
            proc.terminate(gateway, reason="benchmark done")


def write_fixture_mcp_servers(env: dict[str, str], total: int, *, tools: int = 5) -> list[str]:
    """``total`` stdio fixture servers, a third each in the crew store, the Kiro global and ``~/.claude.json``.

    ``env`` is a :func:`fake_kiro_environment` (its ``HOME`` and ``KIROCREW_HOME`` say where the files go);
    every server is the MCP fixture server with ``tools`` tools, so a probe really starts and lists each.
    Answers the server names.
    """
    import json

    from kirocrew_testing.mcp_fixtures import stdio_server_argv

    argv = stdio_server_argv("--tools", str(tools))
    specs = {f"srv-{i}": {"command": argv[0], "args": argv[1:]} for i in range(total)}
    names = list(specs)
    third = len(names) // 3
    home = Path(env["HOME"])
    for path, chosen in ((Path(env["KIROCREW_HOME"]) / "mcp.json", names[:third]),
                         (home / ".kiro" / "settings" / "mcp.json", names[third:2 * third]),
                         (home / ".claude.json", names[2 * third:])):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"mcpServers": {n: specs[n] for n in chosen}}, indent=2))
    return names


def rebuild_agent_file(env: dict[str, str]) -> None:
    """``kirocrew mcp rebuild`` under ``env``; a failure stops the benchmark with its stderr."""
    from kirocrew_core import proc

    rebuild = proc.spawn([*kirocrew_argv(), "mcp", "rebuild"], env=env, stdin=proc.DEVNULL, text=True)
    _, err = rebuild.communicate(timeout=120)
    if rebuild.returncode != 0:
        raise SystemExit(f"rebuild failed: {err}")


def warm_probe_cache(client: Any) -> tuple[float, int]:
    """Wait out the background probe a first ``GET /api/mcp`` starts, then probe every server once.

    Answers the seconds the full probe took and how many rows it answered, so a page load after
    it finds every row probed (as a person's dashboard is after its first minutes).
    """
    while client.get("/api/mcp").json()["backgroundProbe"]["inFlight"]:
        time.sleep(0.2)
    start = time.perf_counter()
    answer = client.post("/api/mcp/probe", json={"all": True})
    if answer.status_code != 200:
        raise GatewayFailed(f"POST /api/mcp/probe answered {answer.status_code}: {answer.text[:500]}")
    rows = answer.json()["servers"]
    return time.perf_counter() - start, len(rows)


def time_gets(client: Any, path: str, count: int) -> list[float]:
    """``count`` sequential GETs of ``path``, in milliseconds each; any error status stops the run."""
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        response = client.get(path)
        samples.append((time.perf_counter() - start) * 1000)
        response.raise_for_status()
    return samples


# -- the host and its relays ----------------------------------------------------------------------------

# The MCP client's initialize params every raw driver sends.
INIT_PARAMS = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}
# Bounds that only stop a hung benchmark; they measure nothing.
ANSWER_TIMEOUT_SECS = 120.0


def page_load_times(chromium: str, base: str, token: str, targets: Sequence[tuple[str, str]],
                    rounds: int) -> dict[str, list[float]]:
    """Navigation → load event (ms) of each ``(label, path)`` in one signed-in headless chromium tab, in turns."""
    from playwright.sync_api import sync_playwright

    samples: dict[str, list[float]] = {label: [] for label, _ in targets}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium)
        page = browser.new_page()
        page.goto(f"{base}/?token={token}")
        for _ in range(rounds):
            for label, path in targets:
                start = time.perf_counter()
                page.goto(base + path, wait_until="load")
                samples[label].append((time.perf_counter() - start) * 1000)
        browser.close()
    return samples


def machine_load() -> str:
    """``N CPUs, load average a b c``: printed with figures taken on a machine others may be using."""
    one, five, fifteen = os.getloadavg()
    return f"{os.cpu_count()} CPUs, load average {one:.2f} {five:.2f} {fifteen:.2f}"


def echo_host_environment(root: Path) -> dict[str, str]:
    """:func:`fake_kiro_environment` whose host also serves the echo test server (``kirocrew mcp-echo``).

    The echo plugin is a throwaway distribution on ``PYTHONPATH``, laid out as the test
    fixture ``echo_host_env`` does, so only hosts started with this environment serve it.
    Conversations keep their state in ``root/state-host`` (the host's own directory).
    """
    from kirocrew_testing.distributions import make_plugin_distribution
    from kirocrew_testing.fixtures import ECHO_HOST_PLUGIN_SOURCE

    env = fake_kiro_environment(root)
    plugin = make_plugin_distribution(root / "echo-host-plugin", distribution="kirocrew-echo-host",
                                      module="kirocrew_echo_host_plugin", source=ECHO_HOST_PLUGIN_SOURCE,
                                      entry_point="echo-host")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(plugin), env.get("PYTHONPATH", "")) if p)
    env["KIRO_CONVERSATIONS_STATE_DIR"] = str(root / "state-host")
    env.pop("KIROCREW_SESSION_KEY", None)
    return env


def with_bytecode_cache(env: dict[str, str], root: Path) -> dict[str, str]:
    """``env`` with Python's bytecode cache on, in ``root/pycache``: as an installed wheel runs.

    ``pip install`` compiles every module, so an installed kirocrew never compiles its source
    at startup; a checkout run with ``PYTHONDONTWRITEBYTECODE=1`` recompiles every kirocrew
    module in every process, which would dominate a start-up figure. The cache goes to a
    throwaway prefix, so the checkout stays clean; the first (uncounted) run fills it.
    """
    out = {key: value for key, value in env.items() if key != "PYTHONDONTWRITEBYTECODE"}
    out["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
    return out


def use_environment(env: dict[str, str]) -> None:
    """Make ``env`` this process's environment: the host client finds the crew home through it."""
    os.environ.clear()
    os.environ.update(env)


def start_host() -> dict[str, Any]:
    """The pong of this environment's host, started in the background as a relay would start it."""
    from kirocrew_core.host import client

    return client.ensure_host()


def stop_host() -> None:
    """Stop this environment's host, if one runs, and wait until its process is gone."""
    from kirocrew_core.host import client

    with contextlib.suppress(client.HostError):
        client.request_stop()


def proc_status_kib(pid: int, field: str = "VmRSS") -> int:
    """A ``/proc/<pid>/status`` memory field (``VmRSS``, ``VmHWM``) in KiB; 0 when the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class LinePeer:
    """An MCP peer spoken to with raw JSON-RPC lines on two file descriptors: the same client cost for every server.

    ``send`` writes one line; ``answer(id)`` reads lines until the response to ``id`` (other
    lines, such as notifications, are skipped). :class:`RawPeer` is a spawned stdio server;
    a connected socket's descriptor serves as both ends.
    """

    def __init__(self, read_fd: int, write_fd: int, buffer: bytes = b"") -> None:
        self.read_fd = read_fd
        self.write_fd = write_fd
        self.buffer = bytearray(buffer)
        self.next_id = 0
        self.name = f"fd {read_fd}"

    def send(self, line: bytes) -> None:
        view = memoryview(line)
        while view:
            view = view[os.write(self.write_fd, view):]

    def line(self) -> bytes:
        """The next line the peer writes (without its newline); ``EOFError`` when it closed its end."""
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[:end + 1]
                return line
            chunk = os.read(self.read_fd, 1 << 16)
            if not chunk:
                raise EOFError(f"{self.name} closed its output")
            self.buffer += chunk

    def request_line(self, method: str, params: dict[str, Any] | None = None) -> tuple[int, bytes]:
        import json

        self.next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None:
            message["params"] = params
        return self.next_id, json.dumps(message, separators=(",", ":")).encode() + b"\n"

    def answer(self, request_id: int) -> dict[str, Any]:
        import json

        while True:
            message = json.loads(self.line())
            if isinstance(message, dict) and message.get("id") == request_id and "method" not in message:
                if "error" in message:
                    raise RuntimeError(f"{self.name} answered request {request_id} with {message['error']}")
                return message

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        request_id, line = self.request_line(method, params)
        self.send(line)
        return self.answer(request_id)

    def initialize(self) -> dict[str, Any]:
        """``initialize`` answered, then ``notifications/initialized`` sent (what every MCP client does first)."""
        answer = self.request("initialize", INIT_PARAMS)
        self.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        return answer


class RawPeer(LinePeer):
    """A stdio MCP server process (``argv``) driven as a :class:`LinePeer`."""

    def __init__(self, argv: list[str], env: dict[str, str], *, stderr: Any = None) -> None:
        import subprocess

        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL if stderr is None else stderr, bufsize=0)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        super().__init__(self.proc.stdout.fileno(), self.proc.stdin.fileno())
        self.name = " ".join(argv)

    def close(self, timeout: float = ANSWER_TIMEOUT_SECS) -> int:
        """Close stdin (the MCP way to stop a stdio server) and return its exit status; killed if it lingers."""
        import subprocess

        assert self.proc.stdin is not None and self.proc.stdout is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            status = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            status = self.proc.wait()
        self.proc.stdout.close()
        return status


def host_session(server: str) -> tuple[Any, LinePeer]:
    """A direct MCP session with this environment's host, no relay: ``(socket, peer)``; close the socket after.

    Says the hello a relay says (this process's fingerprint, its own pid as the relay's) and
    returns once the host welcomed it.
    """
    from kirocrew_core.host import client, protocol
    from kirocrew_core.host.fingerprint import code_fingerprint

    sock = client.connect(ANSWER_TIMEOUT_SECS)
    block = protocol.caller_block("", protocol.SESSION_TYPE_RELAY, os.getpid(), os.getppid())
    sock.sendall(protocol.hello(protocol.KIND_MCP, server=server, fingerprint=code_fingerprint(), caller=block))
    buffer = bytearray()
    client.parse_answer(client.read_line(sock, buffer), protocol.WELCOME)
    sock.settimeout(None)  # blocking: the peer reads and writes its descriptor directly
    peer = LinePeer(sock.fileno(), sock.fileno(), bytes(buffer))
    peer.name = f"host session {server}"
    return sock, peer


# -- the corpus of the knowledge benchmarks --------------------------------------

def vocabulary(size: int = 5000) -> tuple[list[str], list[float]]:
    rng = random.Random(7)
    words = sorted({"".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(4, 9)))
                    for _ in range(size * 2)})[:size]
    return words, [1 / (rank + 1) for rank in range(len(words))]


def text(rng: random.Random, words: list[str], weights: list[float], count: int) -> str:
    return " ".join(rng.choices(words, weights, k=count))


def write_notes(folder: Path, files: int) -> None:
    """``files`` Markdown notes of about 1,500 words in three parts, in 20 subfolders of ``folder``."""
    words, weights = vocabulary()
    rng = random.Random(1)
    for index in range(files):
        path = folder / f"d{index % 20:02d}" / f"note{index:05d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        body = [f"# Note {index}"]
        for section in range(3):
            body += [f"## Part {section}", *(text(rng, words, weights, 25) for _ in range(20))]
        path.write_text("\n".join(body) + "\n")
