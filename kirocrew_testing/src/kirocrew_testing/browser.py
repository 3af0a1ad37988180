"""The dashboard in a real browser: Playwright for Python on Debian's ``chromium``, against a real ``kirocrew serve``.

Playwright's own browser download is never used: the browser is the system ``chromium``
(``executable_path``), found through :func:`kirocrew_testing.requirements.executable`, so
a machine without it skips and ``KIROCREW_REQUIRE_SYSTEM_DEPS=1`` fails.

Fixtures (``pytest_plugins = ["kirocrew_testing.fixtures"]`` brings them):

* ``gateway_env``: the environment ``kirocrew serve`` runs with (override it in a test
  module to add plugins; ``dashboard_demo_env`` adds the example page plugin;
  ``hosted_gateway_env`` runs conversations on the fake kiro-cli in ``conversations_state_dir``).
* ``gateway_args``: extra ``kirocrew serve`` arguments (none; override it in a test module, say
  for ``--override-origin``).
* ``gateway_command``: the argv that starts ``kirocrew`` (a test module may wrap it, say in
  :func:`kirocrew_testing.requirements.without_file_privileges`).
* ``served_gateway``: a real ``kirocrew serve --port 0`` in the test's homes (:class:`ServedGateway`).
* ``owner_client``: an ``httpx.Client`` on ``served_gateway`` authenticated as the owner like a
  script (the Bearer token of the printed sign-in URL).
* :func:`sqlite_rows` reads a database beside the process that owns it (the repository's
  ``conversations_rows`` fixture reads the served host's conversations store with it).
* :func:`serving_gateway`, :func:`owner_http_client` and :func:`chromium_browser`: the same three as
  context managers, for a module that shares one gateway and one browser across its tests.
* ``module_served_homes`` (``module_served``, ``module_homes``, ``module_owner``) and ``module_hosted_homes``
  (the same with conversations on the fake kiro-cli): one ``kirocrew serve`` a test module's tests share.
* ``dashboard``: a :class:`Dashboard` that opens signed-in pages in light or dark, at any
  width, and saves screenshots under ``<tmp_path>/screenshots`` (run pytest with
  ``--basetemp DIR`` to keep them somewhere known). Its browser is ``module_chromium``, one per
  test module; each page is in the test's own context, closed when the test ends.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qs, urlsplit

import pytest

from kirocrew_testing.homes import IsolatedHomes

if TYPE_CHECKING:
    import httpx
    from playwright.sync_api import Browser, BrowserContext, Page

CHROMIUM_ARGS = ("--disable-gpu", "--disable-quic", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run")

# Records what the page's Content-Security-Policy blocked. Playwright injects init scripts
# through the DevTools protocol, so the policy does not block this one itself.
_CSP_WATCH = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`);
});
"""

# Bounds a served gateway's graceful stop (see _stop_gracefully); it measures nothing.
GATEWAY_STOP_TIMEOUT_SECS = 30.0

DEMO_PLUGIN_SOURCE = "from kirocrew_testing.dashboard_demo import dashboard_pages, gateway_routes\n"


@dataclass
class ServedGateway:
    """A running ``kirocrew serve``: its base ``url`` (no trailing slash), ``sign_in_url`` and the ``env`` it runs
    with (a CLI run with it reaches this host)."""

    url: str
    sign_in_url: str
    process: subprocess.Popen[str]
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class OpenedPage:
    """A signed-in page and every console error it logged."""

    page: Page
    console_errors: list[str] = field(default_factory=list)

    def csp_violations(self) -> list[str]:
        """What the Content-Security-Policy blocked on the current document."""
        return list(self.page.evaluate("window.__cspViolations || []"))


class Dashboard:
    """Opens signed-in pages of ``gateway`` in ``browser``; one browser context per page."""

    def __init__(self, browser: Browser, gateway: ServedGateway, artifacts: Path) -> None:
        self.browser = browser
        self.gateway = gateway
        self.artifacts = artifacts
        self.contexts: list[BrowserContext] = []

    def close(self) -> None:
        """Close every context this dashboard opened (their pages and renderer processes with them)."""
        while self.contexts:
            self.contexts.pop().close()

    def __enter__(self) -> Dashboard:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def open(self, path: str = "/", *, color_scheme: Literal["light", "dark"] = "light", width: int = 1280,
             height: int = 900, signed_in: bool = True, controlled_clock: bool = False) -> OpenedPage:
        """A new context (own cookies) showing ``path``, signed in through the printed URL unless told not to.

        ``controlled_clock`` installs Playwright's clock before the page loads: time still flows,
        and ``opened.page.clock.fast_forward(ms)`` fires a page's long timers (a 30 s poll) at once.
        """
        context = self.browser.new_context(viewport={"width": width, "height": height}, color_scheme=color_scheme,
                                           reduced_motion="reduce")
        self.contexts.append(context)
        context.add_init_script(_CSP_WATCH)
        opened = OpenedPage(context.new_page())
        if controlled_clock:
            opened.page.clock.install()
        opened.page.on("console", lambda msg: opened.console_errors.append(msg.text) if msg.type == "error" else None)
        if signed_in:
            opened.page.goto(self.gateway.sign_in_url)  # sets the session cookie, redirects to /
        if not signed_in or path != "/":
            opened.page.goto(self.gateway.url + path)
        return opened

    def screenshot(self, opened: OpenedPage, name: str, *, full_page: bool = True) -> Path:
        """A PNG ``<tmp_path>/screenshots/<name>.png`` of the whole page (or the viewport), a test artifact."""
        self.artifacts.mkdir(parents=True, exist_ok=True)
        path = self.artifacts / f"{name}.png"
        opened.page.screenshot(path=str(path), full_page=full_page)
        return path


@pytest.fixture(scope="module")
def chromium_path() -> str:
    """Debian's chromium, or a skip (a failure under ``KIROCREW_REQUIRE_SYSTEM_DEPS=1``); module-wide, as the
    browser that ``module_chromium`` starts with it is."""
    from kirocrew_testing.requirements import executable

    return executable("chromium", apt="chromium", also=("chromium-browser",))


@pytest.fixture
def gateway_env(isolated_homes: IsolatedHomes) -> dict[str, str]:
    """The environment of ``served_gateway``: the test's own (isolated homes)."""
    return dict(os.environ)


@pytest.fixture
def dashboard_demo_env(tmp_path: Path, isolated_homes: IsolatedHomes) -> dict[str, str]:
    """An environment whose ``kirocrew serve`` also loads :mod:`kirocrew_testing.dashboard_demo` (``/demo/echo``)."""
    from kirocrew_testing.distributions import make_plugin_distribution

    root = make_plugin_distribution(tmp_path / "dashboard-demo-plugin", distribution="kirocrew-dashboard-demo",
                                    module="kirocrew_dashboard_demo_plugin", source=DEMO_PLUGIN_SOURCE)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    return env


@pytest.fixture
def conversations_state_dir(tmp_path: Path) -> Path:
    """The state directory of the served gateway's conversations host (``hosted_gateway_env``)."""
    return tmp_path / "conversations-state"


@pytest.fixture
def hosted_gateway_env(fake_kiro_cli: Any, isolated_homes: IsolatedHomes,
                       conversations_state_dir: Path) -> dict[str, str]:
    """``kirocrew serve``'s environment with the fake kiro-cli first on PATH and its own host running conversations
    in ``conversations_state_dir``; a test module returns it from its ``gateway_env``."""
    # sandboxed runs must see the fake's interpreter: its sandboxable path
    return conversations_on_fake_kiro(dict(os.environ), conversations_state_dir, fake_kiro_cli.sandboxable_path)


def conversations_on_fake_kiro(env: dict[str, str], state_dir: Path, kiro_cli: Path) -> dict[str, str]:
    """``env`` for a host running conversations on the fake ``kiro_cli`` in ``state_dir``.

    No ``KIRO_CONVERSATIONS_*`` setting leaks in from outside, and the host is not told to stay away
    (``KIROCREW_NO_HOST``).
    """
    out = {key: value for key, value in env.items()
           if not key.startswith("KIRO_CONVERSATIONS_") and key != "KIROCREW_NO_HOST"}
    out["KIRO_CONVERSATIONS_STATE_DIR"] = str(state_dir)
    out["KIRO_CLI_PATH"] = str(kiro_cli)
    return out


def sqlite_rows(database: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """What ``database`` holds on disk: a plain reader beside the process that owns it."""
    db = sqlite3.connect(database)
    try:
        return db.execute(sql, params).fetchall()
    finally:
        db.close()


@pytest.fixture
def gateway_args() -> list[str]:
    """Extra arguments of ``served_gateway``'s ``kirocrew serve`` (none unless a test module overrides it)."""
    return []


@pytest.fixture
def gateway_command() -> list[str]:
    """The argv that starts ``kirocrew`` for ``served_gateway``: the installed script, else ``python -m``."""
    exe = Path(sys.executable).with_name("kirocrew")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "kirocrew_core"]


@contextmanager
def serving_gateway(env: dict[str, str], args: list[str], command: list[str], logs: Path) -> Iterator[ServedGateway]:
    """A real ``kirocrew serve --port 0 *args`` under ``env`` until the block ends; stderr to ``<logs>/serve.stderr``.

    The fixtures below serve one gateway per test; a module that shares one across its tests (a
    host costs seconds to start) calls this from a module-scoped fixture of its own.
    """
    from kirocrew_core import proc

    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / "serve.stderr", "w") as stderr:
        server = proc.spawn([*command, "serve", "--port", "0", *args], env=env, stdin=proc.DEVNULL,
                            stderr=stderr, text=True)
    assert server.stdout is not None
    try:
        line = server.stdout.readline().strip()
        if not line.startswith("kirocrew gateway: http://127.0.0.1:"):
            pytest.fail(f"kirocrew serve printed {line!r}; stderr:\n{(logs / 'serve.stderr').read_text()[-2000:]}")
        sign_in_url = line.removeprefix("kirocrew gateway: ")
        yield ServedGateway(sign_in_url.split("/?", 1)[0], sign_in_url, server, dict(env))
    finally:
        _stop_gracefully(server)
        proc.terminate(server)


@contextmanager
def serving_in_own_homes(module_root: Path, *, conversations: bool = False,
                         command: list[str] | None = None) -> Iterator[tuple[ServedGateway, IsolatedHomes]]:
    """``kirocrew serve`` in homes of its own under ``module_root``, and those homes, until the block ends.

    For a test module whose tests share one host (it costs seconds to start): call it from a
    module-scoped fixture. This process works in the same homes meanwhile (its environment is
    patched), so what a test writes there (a policy, a cron job) is what the host sees; the host is
    stopped at the end, whoever started it. With ``conversations`` the host runs them on the fake
    kiro-cli in ``<module_root>/conversations-state`` (as ``hosted_gateway_env``'s does), and its
    process tree counts as shared infrastructure to the process guard: an idle conversation's
    kiro-cli outlives the test that started it, by design, until the host stops. ``command`` is the argv that
    runs ``kirocrew`` (default :func:`~kirocrew_testing.fixtures.kirocrew_argv`: this Python's), say another
    environment's ``python -m kirocrew_core``.
    """
    from kirocrew_testing import process_guard
    from kirocrew_testing.fixtures import kirocrew_argv
    from kirocrew_testing.homes import isolate_homes, stop_host

    with pytest.MonkeyPatch.context() as patch:
        homes = isolate_homes(patch, module_root)
        env = {key: value for key, value in os.environ.items() if key != "KIROCREW_NO_HOST"}
        if conversations:
            from kirocrew_testing.fake_kiro import switches
            from kirocrew_testing.fixtures import fake_kiro_executable

            kiro_cli = fake_kiro_executable(module_root / "fake-kiro-bin")
            env = {key: value for key, value in env.items() if key not in (*switches.ALL, switches.ROLE)}
            env = conversations_on_fake_kiro(env, module_root / "conversations-state", kiro_cli)
            for key in set(os.environ) - set(env):
                patch.delenv(key)
            for key, value in env.items():
                patch.setenv(key, value)
        try:
            with serving_gateway(env, [], command or kirocrew_argv(), module_root / "logs") as gateway:
                if conversations:
                    process_guard.share(gateway.process.pid)
                try:
                    yield gateway, homes
                finally:
                    process_guard.unshare(gateway.process.pid)
        finally:
            stop_host(homes.crew_home)


@pytest.fixture(scope="module")
def module_root(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder for a test module's shared host and homes, named after the module (a module may define its own)."""
    return tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2].replace("_", "-"))


@pytest.fixture(scope="module")
def module_served_homes(module_root: Path) -> Iterator[tuple[ServedGateway, IsolatedHomes]]:
    """One ``kirocrew serve`` shared by a test module's tests, and its homes (:func:`serving_in_own_homes`)."""
    with serving_in_own_homes(module_root) as pair:
        yield pair


@pytest.fixture(scope="module")
def module_hosted_homes(module_root: Path) -> Iterator[tuple[ServedGateway, IsolatedHomes]]:
    """One ``kirocrew serve`` whose host runs conversations on the fake kiro-cli, shared by a test module's tests,
    and its homes (:func:`serving_in_own_homes` with ``conversations``); the state directory is
    ``<module_root>/conversations-state``."""
    with serving_in_own_homes(module_root, conversations=True) as pair:
        yield pair


@pytest.fixture(scope="module")
def module_served(module_served_homes: tuple[ServedGateway, IsolatedHomes]) -> ServedGateway:
    """:func:`module_served_homes`' gateway."""
    return module_served_homes[0]


@pytest.fixture(scope="module")
def module_homes(module_served_homes: tuple[ServedGateway, IsolatedHomes]) -> IsolatedHomes:
    """:func:`module_served_homes`' homes."""
    return module_served_homes[1]


@pytest.fixture(scope="module")
def module_owner(module_served_homes: tuple[ServedGateway, IsolatedHomes]) -> Iterator[httpx.Client]:
    """The owner's HTTP client (Bearer token) on :func:`module_served_homes`' gateway."""
    with owner_http_client(module_served_homes[0]) as client:
        yield client


@pytest.fixture(scope="module")
def module_dashboard(module_served: ServedGateway, module_root: Path, chromium_path: str,
                     request: pytest.FixtureRequest) -> Iterator[Dashboard]:
    """One chromium on :func:`module_served` for the module's browser tests (:func:`shared_dashboard`), its
    screenshots in ``<module_root>/screenshots``. Its first page is the module's ``FIRST_PAGE`` (default ``/``);
    a module serving its own way overrides ``module_served_homes``."""
    first_page = getattr(request.module, "FIRST_PAGE", "/")
    with shared_dashboard(module_served, module_root / "screenshots", chromium_path, first_page) as shared:
        yield shared


@contextmanager
def shared_dashboard(served: ServedGateway, artifacts: Path, chromium_path: str,
                     first_page: str) -> Iterator[Dashboard]:
    """One chromium on ``served`` for a test module's browser tests (a module-scoped fixture calls it).

    The browser's own helpers (storage, network) start with its first page: ``first_page`` is
    opened and closed here, not inside a test, whose process guard would take them for processes
    the test left running. Tests take their pages from :func:`pages_for_a_test`.
    """
    with chromium_browser(chromium_path) as browser:
        shared = Dashboard(browser, served, artifacts)
        shared.open(first_page)
        shared.close()
        yield shared


@contextmanager
def pages_for_a_test(shared: Dashboard) -> Iterator[Dashboard]:
    """``shared``'s browser for one test: every page the test opened is closed when it ends."""
    pages = Dashboard(shared.browser, shared.gateway, shared.artifacts)
    try:
        yield pages
    finally:
        pages.close()


def _stop_gracefully(server: subprocess.Popen[str]) -> None:
    """SIGTERM ``kirocrew serve``'s process group and let the gateway finish its stop.

    Its ``gateway_stopping`` hooks end children in process groups of their own (the MCP page's
    server probes); on a loaded machine that can outlast :func:`kirocrew_core.proc.terminate`'s
    SIGTERM grace, and a SIGKILLed gateway would leave them running. The bound only stops a hang.
    """
    import signal

    if server.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(server.pid, signal.SIGTERM)  # spawned in its own session: the group is its pid
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.wait(GATEWAY_STOP_TIMEOUT_SECS)


@contextmanager
def owner_http_client(gateway: ServedGateway) -> Iterator[httpx.Client]:
    """An HTTP client on ``gateway``, authenticated as the owner like a script (Bearer token)."""
    import httpx

    token = parse_qs(urlsplit(gateway.sign_in_url).query)["token"][0]
    with httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
        yield client


@contextmanager
def chromium_browser(chromium_path: str) -> Iterator[Browser]:
    """Headless Debian chromium through Playwright, closed (driver included) when the block ends.

    Its process tree is shared test infrastructure to the process guard
    (:func:`kirocrew_testing.process_guard.share`): chromium starts and ends helper processes of its
    own while it runs, so a browser shared across tests is not one test's leftover.
    """
    from playwright.sync_api import sync_playwright

    from kirocrew_core import proc
    from kirocrew_testing import process_guard

    before = set(proc.live_descendants())
    playwright: Any = sync_playwright().start()
    driver = [pid for pid in proc.live_descendants() if pid not in before]  # the driver, parent of chromium
    for pid in driver:
        process_guard.share(pid)
    try:
        browser = playwright.chromium.launch(executable_path=chromium_path, args=list(CHROMIUM_ARGS))
        try:
            yield browser
        finally:
            browser.close()
    finally:
        playwright.stop()
        for pid in driver:
            process_guard.unshare(pid)


@pytest.fixture
def served_gateway(gateway_env: dict[str, str], gateway_args: list[str], gateway_command: list[str],
                   tmp_path: Path) -> Iterator[ServedGateway]:
    """A real ``kirocrew serve --port 0 *gateway_args`` under ``gateway_env``; stderr to ``<tmp_path>/serve.stderr``."""
    with serving_gateway(gateway_env, gateway_args, gateway_command, tmp_path) as gateway:
        yield gateway


@pytest.fixture
def owner_client(served_gateway: ServedGateway) -> Iterator[httpx.Client]:
    """An HTTP client on ``served_gateway``, authenticated as the owner like a script (Bearer token)."""
    with owner_http_client(served_gateway) as client:
        yield client


@pytest.fixture(scope="module")
def module_chromium(chromium_path: str) -> Iterator[Browser]:
    """One headless Debian chromium (and Playwright driver) for a test module's tests, closed after its last one.

    Starting the driver and the browser costs seconds, and every test opens its own contexts
    (own cookies and storage) anyway, so a module shares them; the contexts a test opened are
    closed when it ends (``dashboard``).
    """
    with chromium_browser(chromium_path) as browser:
        yield browser


@pytest.fixture
def dashboard(module_chromium: Browser, served_gateway: ServedGateway, tmp_path: Path) -> Iterator[Dashboard]:
    """Signed-in pages of ``served_gateway`` in the module's chromium; the test's contexts close when it ends."""
    with Dashboard(module_chromium, served_gateway, tmp_path / "screenshots") as opened:
        yield opened
