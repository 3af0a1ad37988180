"""Meta-tests (every hook documented, tested and called from production code) and one test per hook."""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import pluggy
import pytest

from kirocrew_core import hookspecs
from kirocrew_core.contributions import (
    AuthorityBackend,
    CoreMcpTool,
    DoctorCheck,
    DoctorResult,
    ManagedMcpServer,
    McpScope,
    RegistryLoader,
    flatten,
)
from kirocrew_core.hookdocs import hook_functions, render_hook_reference
from kirocrew_core.plugins import PluginRecord, collect, make_plugin_manager
from kirocrew_testing.plugins import register_plugin

REPO = Path(__file__).resolve().parents[2]
HOOK_DOCS = REPO / "docs" / "plugins" / "hooks.md"
CORE_HOOKS = [name for name, _ in hook_functions(hookspecs)]


def test_the_hook_list_is_the_architecture_one():
    assert set(CORE_HOOKS) == {
        "addhooks", "register_commands", "gateway_routes", "dashboard_pages", "gateway_startup",
        "gateway_stopping", "gateway_shutdown", "extra_mcp_scopes", "extra_mcp_servers", "managed_mcp_servers",
        "core_mcp_tools", "registry_loaders", "authority_backends",
        "governance_ceiling", "protected_paths", "doctor_checks", "host_services", "host_mcp_servers",
        "known_workspaces", "agent_file_ready", "secret_files", "worker_load", "history_sources",
        "history_summarizers",
        "conversation_ancestry", "conversation_origin", "deploy_destinations", "knowledge_vector_search",
        "conversation_deliver", "conversation_cron_job", "message_channels",
    }


@pytest.mark.parametrize("name", CORE_HOOKS)
def test_every_hook_is_documented_with_its_exact_signature(name):
    pm = make_plugin_manager(load_entrypoints=False, env={})
    argnames = getattr(pm.hook, name).spec.argnames
    assert f"## {name}({', '.join(argnames)})" in HOOK_DOCS.read_text()


@pytest.mark.parametrize("name", CORE_HOOKS)
def test_every_hook_is_typed_and_says_how_results_combine(name):
    fn = getattr(hookspecs, name)
    sig = inspect.signature(fn)
    assert sig.return_annotation is not inspect.Signature.empty
    assert all(p.annotation is not inspect.Parameter.empty for p in sig.parameters.values())
    doc = inspect.getdoc(fn) or ""
    assert "Called " in doc, "say who calls the hook and when"
    assert any(word in doc for word in ("concatenated", "Every implementation", "Historic", "every plugin",
                                        "merged"))


def test_the_hook_reference_page_is_generated_from_the_docstrings():
    assert HOOK_DOCS.read_text() == render_hook_reference(), (
        "docs/plugins/hooks.md is stale: run `python -m kirocrew_core.hookdocs > docs/plugins/hooks.md`"
    )


def test_the_hook_reference_names_each_hooks_open_edition_implementers_as_the_plugin_manager_has_them():
    from kirocrew_core.hookdocs import open_edition_implementers

    def implemented_by(page: str, hook: str) -> str:
        section = page.split(f"\n## {hook}(", 1)[1].split("\n## ", 1)[0]
        [line] = [line for line in section.splitlines() if line.startswith("*Implemented in the open edition by*")]
        return line

    page = HOOK_DOCS.read_text()
    assert "`cron`" in implemented_by(page, "dashboard_pages")
    assert "`kirocrew_core.builtin.notifications`" in implemented_by(page, "dashboard_pages")
    assert "`connections`, `mcp`" in implemented_by(page, "gateway_startup")
    assert implemented_by(page, "extra_mcp_scopes").endswith(": none")
    assert "companion" not in page  # installed, but not in the open edition: never named
    # No docstring claims who implements a hook: that line is the only place, computed.
    assert not re.search(r"implements it|open edition implements", page.replace("Implemented in the open", ""))

    # One more open-edition implementation changes the page: the checked-in page would be stale.
    pm = make_plugin_manager(env={})
    pm.records["aaa-member"] = PluginRecord("aaa-member", "kirocrew-cron", "0.1.0", "aaa_member", "loaded")
    register_plugin(pm, "aaa-member", extra_mcp_scopes=lambda: [])
    rendered = render_hook_reference(implementers=open_edition_implementers(pm))
    assert implemented_by(rendered, "extra_mcp_scopes").endswith(": `aaa-member`")
    assert rendered != page


@pytest.mark.parametrize("name", CORE_HOOKS)
def test_every_hook_has_a_test(name):
    assert callable(getattr(sys.modules[__name__], f"test_hook_{name}", None)), f"write test_hook_{name}"


# Hooks declared before their caller exists, with the issue that adds it. Keep this list short and true:
# a hook named here must not be called yet, and its docstring must say so.
AWAITING_A_CALLER: dict[str, str] = {}

# A call through the public helpers with the hook name as a literal, or pluggy's own relay.
_HOOK_CALL = re.compile(
    r"""\b(?:a?collect|a?call_hook)\(\s*[^"'()]*(?:\([^()]*\)[^"'()]*)*,\s*["'](\w+)["']"""
    r"""|\.hook\.(\w+)(?:\.call_historic)?\("""
)


def _production_sources() -> dict[Path, str]:
    """Every module of every distribution's package, minus the test support shipped in core."""
    roots = [path for path in REPO.glob("**/src/kirocrew_*") if ".venv" not in path.parts and path.is_dir()]
    testing = REPO / "kirocrew_core" / "src" / "kirocrew_core" / "testing"
    return {path: path.read_text() for root in roots for path in root.rglob("*.py")
            if testing not in path.parents}


def _hooks_called_in_production() -> set[str]:
    return {next(filter(None, match.groups())) for text in _production_sources().values()
            for match in _HOOK_CALL.finditer(text)}


def _every_declared_hook() -> dict[str, object]:
    """Core's hooks and those the installed plugins add through ``addhooks`` (restart_sessions, ...)."""
    pm = make_plugin_manager(env={})
    return {name: caller.spec.function for name, caller in vars(pm.hook).items()
            if isinstance(caller, pluggy.HookCaller) and caller.spec is not None}


@pytest.mark.parametrize("name", sorted(_every_declared_hook()))
def test_every_hook_is_called_from_production_code(name):
    called = name in _hooks_called_in_production()
    if name in AWAITING_A_CALLER:
        assert not called, f"{name} has a caller now: drop it from AWAITING_A_CALLER and fix its docstring"
        assert "Called by nothing yet" in (inspect.getdoc(_every_declared_hook()[name]) or "")
    else:
        assert called, f"no production code calls {name}(): add its caller, or remove the hook"


def test_the_caller_scan_sees_the_ways_production_code_calls_a_hook():
    text = """collect(pm or get_plugin_manager(), "authority_backends")
    await acall_hook(
        app.state.kirocrew.pm, "gateway_shutdown", on_error="skip", app=app)
    pm.hook.addhooks.call_historic(kwargs={})"""
    assert {next(filter(None, m.groups())) for m in _HOOK_CALL.finditer(text)} == {
        "authority_backends", "gateway_shutdown", "addhooks"}


def test_only_the_plugin_manager_walks_hook_implementations():
    private = re.compile(r"_impls_by_plugin|get_hookimpls\(|\._fail\(|\.argnames\b")
    owner = REPO / "kirocrew_core" / "src" / "kirocrew_core" / "plugins.py"
    offenders = sorted(str(path.relative_to(REPO)) for path, text in _production_sources().items()
                       if path != owner and private.search(text))
    assert offenders == [], "call hooks through kirocrew_core.plugins.call_hook, not by walking implementations"


_register = register_plugin


def _collected(pm, hook):
    return [(c.plugin, c.value) for c in flatten(collect(pm, hook))]


# --- one test per hook -----------------------------------------------------


def test_hook_addhooks(plugin_manager):
    from kirocrew_core.markers import hookspec

    class Specs:
        @staticmethod
        @hookspec
        def roster_entries() -> list:  # type: ignore[empty-body]  # a specification: pluggy never runs it
            """A plugin's own sub-seam."""
    # The implementer registers before the declarer: historic replay still validates it.
    _register(plugin_manager, "late-impl", roster_entries=lambda: ["x"])
    _register(plugin_manager, "declarer", addhooks=lambda pluginmanager: pluginmanager.add_hookspecs(Specs))
    plugin_manager.check_pending()
    assert _collected(plugin_manager, "roster_entries") == [("late-impl", "x")]


def test_hook_register_commands(plugin_manager):
    import click
    from click.testing import CliRunner

    from kirocrew_core.cli import KirocrewCLI

    @click.command("greet")
    def greet():
        click.echo("greetings")

    _register(plugin_manager, "greeter", register_commands=lambda cli: cli.add_command(greet))
    root = KirocrewCLI(name="kirocrew")
    result = CliRunner().invoke(root, ["greet"])
    assert result.exit_code == 0
    assert result.output == "greetings\n"


def _signed_in_client(pm):
    from starlette.testclient import TestClient

    from kirocrew_core.gateway.app import create_app
    from kirocrew_core.gateway.auth import load_or_create_token

    token = load_or_create_token()
    return TestClient(create_app(pm), base_url="http://127.0.0.1",
                      headers={"Authorization": f"Bearer {token}", "Origin": "http://127.0.0.1"})


def test_hook_gateway_routes(plugin_manager):
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def ping(request):
        return JSONResponse({"pong": True})

    _register(plugin_manager, "pinger", gateway_routes=lambda: [Route("/api/pinger/ping", ping)])
    with _signed_in_client(plugin_manager) as client:
        assert client.get("/api/pinger/ping").json() == {"pong": True}
        assert client.get("/api/pinger/ping", headers={"Authorization": ""}).status_code == 401


def test_hook_dashboard_pages(plugin_manager):
    from starlette.responses import HTMLResponse

    from kirocrew_core.contributions import DashboardPage

    async def page(request):
        return HTMLResponse("<h1>Roster</h1>")

    _register(plugin_manager, "roster", dashboard_pages=lambda: [DashboardPage("/roster", "The roster", page)])
    with _signed_in_client(plugin_manager) as client:
        assert "<h1>Roster</h1>" in client.get("/roster").text
        assert 'href="/roster"' in client.get("/").text


def _lifecycle_events(pm):
    events: list[str] = []

    async def started(app):
        events.append("startup" if app.state.kirocrew.pm is pm else "wrong-app")

    _register(pm, "life", gateway_startup=started, gateway_shutdown=lambda app: events.append("shutdown"))
    with _signed_in_client(pm) as client:
        events.append("request" if client.get("/api/health").status_code == 200 else "refused")
    return events


def test_hook_gateway_startup(plugin_manager):
    assert _lifecycle_events(plugin_manager)[:2] == ["startup", "request"]


def test_hook_gateway_shutdown(plugin_manager):
    assert _lifecycle_events(plugin_manager) == ["startup", "request", "shutdown"]


STOPPING_PLUGIN = """
import asyncio
import os

from kirocrew_core import hookimpl

_held = []


def _mark(event):
    with open(os.environ["STOP_LOG"], "a") as fh:
        fh.write(event + "\\n")


@hookimpl
def gateway_routes():
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def hold(request):
        released = asyncio.Event()
        _held.append(released)
        _mark("held")
        await released.wait()
        _mark("released")
        return JSONResponse({"released": True})

    return [Route("/api/stop-test/hold", hold, methods=["POST"])]


@hookimpl
def gateway_stopping(app):
    _mark("stopping")
    for released in _held:
        released.set()


@hookimpl
def gateway_shutdown(app):
    _mark("shutdown")
"""


@pytest.fixture
def gateway_env(isolated_homes, tmp_path):
    """``kirocrew serve`` with core and a plugin whose request is held open until ``gateway_stopping``."""
    import os

    from kirocrew_testing.distributions import make_plugin_distribution

    site = make_plugin_distribution(tmp_path / "site", distribution="kirocrew-stoptest", module="kirocrew_stoptest",
                                    source=STOPPING_PLUGIN)
    pythonpath = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    return {**os.environ, "KIROCREW_LOAD_PLUGINS": "stoptest", "PYTHONPATH": pythonpath,
            "STOP_LOG": str(tmp_path / "stop.log")}


def test_hook_gateway_stopping(served_gateway, owner_client, tmp_path):
    """A stop runs it before the server waits for open requests: the held request is answered, then shutdown."""
    import threading
    import time

    from kirocrew_core import proc

    log = tmp_path / "stop.log"
    answers = []
    asker = threading.Thread(target=lambda: answers.append(owner_client.post("/api/stop-test/hold", timeout=60)))
    asker.start()
    deadline = time.monotonic() + 60
    while not (log.exists() and "held" in log.read_text()):
        assert time.monotonic() < deadline, "the request never reached the route"
        time.sleep(0.02)

    teardown = proc.terminate(served_gateway.process, reason="test stops the gateway")
    asker.join(60)

    assert log.read_text().split() == ["held", "stopping", "released", "shutdown"]
    assert [(a.status_code, a.json()) for a in answers] == [(200, {"released": True})]
    assert teardown.returncode == 0


def _run_host(pm, body):
    """Start an in-process host on ``pm`` (socket in the test's crew home), run ``body(host)``, stop it."""
    import asyncio

    from kirocrew_core.host.server import Host

    async def main():
        host = Host(pm, background=False, url="http://127.0.0.1:1/", idle_secs=60, fingerprint="test")
        await host.start()
        try:
            return await body(host)
        finally:
            await host.stop()

    return asyncio.run(main())


def test_hook_host_services(plugin_manager):
    from kirocrew_core.contributions import HostService

    events: list[str] = []

    async def record(event):
        events.append(event)

    async def refuse():
        raise RuntimeError("no database")

    _register(plugin_manager, "b-svc", host_services=lambda: [
        HostService("kept", lambda: record("kept started"), lambda: record("kept stopped"), lambda: "3 runs")])
    _register(plugin_manager, "a-svc", host_services=lambda: [
        HostService("broken", refuse, lambda: record("broken stopped"))])

    async def body(host):
        return host.pong()

    pong = _run_host(plugin_manager, body)
    # The core builtins' own services (kirocrew-core's sidecar sweep, the history index's start-time refresh,
    # the knowledge library's ingestion, the webhooks' busy while hooks are registered) run beside the test's.
    assert pong["services"] == ["kept", "coretools", "history", "knowledge", "webhooks"]
    assert "no database" in pong["failedServices"]["broken"]
    assert pong["busy"] == ["kept: 3 runs"]
    # Started in call order (a-svc first), stopped in reverse, the one that failed to start included.
    assert events == ["kept started", "kept stopped", "broken stopped"]


def test_hook_host_mcp_servers(plugin_manager):
    import asyncio
    import json
    import os

    from mcp.server.lowlevel import Server

    from kirocrew_core.contributions import HostedMcpServer
    from kirocrew_core.host import paths

    _register(plugin_manager, "b-dup", host_mcp_servers=lambda: [
        HostedMcpServer("kirocrew-roster", "mcp-other", lambda: Server("impostor"))])
    _register(plugin_manager, "a-roster", host_mcp_servers=lambda: [
        HostedMcpServer("kirocrew-roster", "mcp-roster", lambda: Server("kirocrew-roster"))])

    async def hello(server):
        reader, writer = await asyncio.open_unix_connection(str(paths.socket_path()))
        caller = {"schemaVersion": 1, "sessionKey": "", "sessionType": "relay", "relayPid": os.getpid()}
        writer.write(json.dumps({"kirocrew": "hello", "version": 1, "kind": "mcp", "server": server,
                                 "caller": caller}).encode() + b"\n")
        answer = json.loads(await reader.readline())
        writer.close()
        return answer

    async def body(host):
        return host.pong(), await hello("mcp-roster"), await hello("mcp-other")

    pong, by_command, duplicate = _run_host(plugin_manager, body)
    # core serves six
    assert pong["servers"] == ["kirocrew-artifacts-admin", "kirocrew-core", "kirocrew-hooks-admin",
                               "kirocrew-knowledge-admin", "kirocrew-messages-admin", "kirocrew-roster",
                               "kirocrew-skills-admin"]
    assert by_command["kirocrew"] == "welcome" and by_command["server"] == "kirocrew-roster"
    assert duplicate["code"] == "unknown_server"  # the second plugin to claim the name was refused


def test_hook_extra_mcp_scopes(installed_plugin_manager, isolated_homes):
    scopes = _collected(installed_plugin_manager, "extra_mcp_scopes")
    assert scopes == [
        ("companion", McpScope("cc", isolated_homes.user_home / ".claude.json", None, "Claude"))
    ]


def test_hook_extra_mcp_servers(plugin_manager):
    _register(plugin_manager, "b-tools", extra_mcp_servers=lambda: {"fetch": {"command": "uvx"}})
    _register(plugin_manager, "a-tools", extra_mcp_servers=lambda: {"fetch": {"command": "npx"}})
    # Sorted by plugin name: the first to name a server is a-tools.
    assert [c.plugin for c in collect(plugin_manager, "extra_mcp_servers")] == ["a-tools", "b-tools"]


def test_hook_managed_mcp_servers(plugin_manager):
    server = ManagedMcpServer("kirocrew-computer", ("mcp-computer",), may_auto_approve=False)
    _register(plugin_manager, "computer-test", managed_mcp_servers=lambda: [server])
    collected = _collected(plugin_manager, "managed_mcp_servers")
    assert [c for c in collected if c[0] == "computer-test"] == [("computer-test", server)]
    assert [c[1].name for c in collected if c[0] != "computer-test"] == ["kirocrew-core"]  # the core builtin's
    assert server.command is None  # None means the live kirocrew executable


def test_hook_core_mcp_tools(plugin_manager):
    tool = CoreMcpTool("echo", "Echo the input.", {"type": "object"}, handler=lambda **kw: kw)
    _register(plugin_manager, "echo-tools", core_mcp_tools=lambda: [tool])
    # Core's own tools (lessons, notifications) come from its builtin plugins.
    assert [c for c in _collected(plugin_manager, "core_mcp_tools") if not c[0].startswith("kirocrew_core.")] == [
        ("echo-tools", tool)]


def test_hook_registry_loaders(plugin_manager):
    loader = RegistryLoader("connections.providers", load=lambda: [{"id": "notion"}])
    _register(plugin_manager, "roster", registry_loaders=lambda: [loader])
    [(plugin, value)] = _collected(plugin_manager, "registry_loaders")
    assert plugin == "roster" and value.load() == [{"id": "notion"}]


def test_hook_known_workspaces(plugin_manager, tmp_path):
    _register(plugin_manager, "checkouts", known_workspaces=lambda: [tmp_path / "a", tmp_path / "b"])
    assert _collected(plugin_manager, "known_workspaces") == [("checkouts", tmp_path / "a"),
                                                              ("checkouts", tmp_path / "b")]


def test_hook_worker_load(plugin_manager):
    """resource_status reports each plugin's workers, measured by pid, and the smallest sub-agent cap; a plugin
    that raises is named as unreadable, never counted as idle."""
    import os
    import subprocess

    from kirocrew_core.contributions import WorkerLoad
    from kirocrew_core.resources import _measure, _reported_loads, report

    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        _register(plugin_manager, "pool-a", worker_load=lambda: [
            WorkerLoad("pool-a", (os.getpid(), sleeper.pid), 4, 3, subagent_cap=5)])
        _register(plugin_manager, "pool-b", worker_load=lambda: [WorkerLoad("pool-b", (), 2, 0, subagent_cap=2)])
        _register(plugin_manager, "pool-c", worker_load=lambda: 1 / 0)
        loads, failed = _reported_loads(plugin_manager)
        machine, workers = _measure(loads)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert [load.source for load in loads] == ["pool-a", "pool-b"] and failed == ["pool-c"]
    assert workers[0].resident is not None and workers[0].resident > 1024 * 1024  # this Python process at least
    text = report(machine, workers, failed)
    assert "  kiro-cli workers (pool-a): 2 running of at most 4, 3 runs in progress, " in text
    assert "  kiro-cli workers (pool-b): 0 running of at most 2, 0 runs in progress\n" in text
    assert "  kiro-cli workers (pool-c): could not be read" in text
    assert "  Concurrent sub-agent cap: 2\n" in text
def test_hook_history_sources(plugin_manager, isolated_homes, tmp_path):
    """Each source's sessions reach the index; a broken, misnamed or duplicate source is skipped, the rest kept."""
    from kirocrew_core.contributions import HistoryMessage, HistorySession, HistorySource
    from kirocrew_core.history.index import HistoryIndex, Scope

    def session(title):
        return HistorySession(f"id-{title}", title, "/w", "2026-11-01T00:00:00+00:00", "2026-11-01T00:00:00+00:00",
                              "v1", lambda: [HistoryMessage("assistant", f"text of {title}")])

    sources = [HistorySource("notes", "Notes", lambda: [session("a")]),
               HistorySource("notes", "again", lambda: [session("b")]),  # a duplicate name
               HistorySource("kiro-cli", "taken", lambda: [session("c")]),  # kiro-cli's own
               HistorySource("Bad Name", "x", lambda: [session("d")])]
    _register(plugin_manager, "notes", history_sources=lambda: sources)
    _register(plugin_manager, "broken", history_sources=lambda: 1 / 0)
    index = HistoryIndex(tmp_path / "index.sqlite3", tui_database=tmp_path / "none.sqlite3")
    assert index.refresh().problems == []
    assert [(row.source, row.title) for row in index.sessions(Scope.everything(), limit=10)] == [("notes", "a")]


def test_hook_history_summarizers(plugin_manager, isolated_homes, tmp_path):
    """The first usable summarizer in call order writes the summaries; a raising or unusable one is skipped."""
    import asyncio

    from kirocrew_core.contributions import HistorySummarizer
    from kirocrew_core.history import tools
    from kirocrew_core.history.index import HistoryIndex, Scope

    from kirocrew_testing.kiro_store_files import write_flat

    asked = []

    def summarizer(name):
        async def summarize(requests):
            asked.append((name, [r.transcript for r in requests]))
            for request in requests:
                yield request.key, f"written by {name}"
        return HistorySummarizer(name, summarize)

    _register(plugin_manager, "a-broken", history_summarizers=lambda: 1 / 0)
    _register(plugin_manager, "b-unusable", history_summarizers=lambda: ["not a summarizer"])
    _register(plugin_manager, "c-first", history_summarizers=lambda: [summarizer("c")])
    _register(plugin_manager, "d-second", history_summarizers=lambda: [summarizer("d")])
    write_flat(isolated_homes.kiro_home, "0f0e0d0c-1111-2222-3333-444455556666", title="t", cwd="/w",
               messages=[("user", "hello there")])
    index = HistoryIndex(tmp_path / "index.sqlite3", tui_database=tmp_path / "none.sqlite3", sources=lambda: [])
    index.refresh()
    listed = asyncio.run(tools.summarized_list(index, Scope.everything(), 5))
    assert "\nSummary: written by c\n" in listed + "\n" and asked == [("c", ["User: hello there"])]
def test_hook_conversation_ancestry(plugin_manager):
    """The first non-empty answer decides a session's tree (its topmost conversation); no answer: its own."""
    from kirocrew_core.artifacts.access import session_actor
    from kirocrew_core.coretools.contract import CrewSession

    def parent_chain(conversation_id):
        return {"child": ["parent", "top"]}.get(conversation_id, [])

    _register(plugin_manager, "a-nobody", conversation_ancestry=lambda conversation_id: None)
    _register(plugin_manager, "b-keeper", conversation_ancestry=parent_chain)
    child = session_actor(CrewSession("kcs1-" + "1" * 32, "conversation", "child"))
    alone = session_actor(CrewSession("kcs1-" + "2" * 32, "conversation", "alone"))
    assert (child.tree, child.conversation, child.source) == ("top", "child", "subagent")
    assert (alone.tree, alone.source) == ("alone", "chat")


def test_hook_conversation_origin(plugin_manager):
    """The first answer that is not None says a cron job started the conversation: its artifacts' source is cron."""
    from kirocrew_core.artifacts.access import session_actor
    from kirocrew_core.coretools.contract import CrewSession

    _register(plugin_manager, "a-nobody", conversation_origin=lambda conversation_id: None)
    _register(plugin_manager, "b-jobs", conversation_origin=lambda conversation_id: (
        "cron" if conversation_id == "job-run" else None))
    _register(plugin_manager, "c-tree", conversation_ancestry=lambda conversation_id: (
        ["session-conv"] if conversation_id == "job-run" else []))
    job_run = session_actor(CrewSession("kcs1-" + "3" * 32, "conversation", "job-run"))
    chat = session_actor(CrewSession("kcs1-" + "4" * 32, "conversation", "chat-conv"))
    assert (job_run.source, job_run.tree) == ("cron", "session-conv")  # a session's job: in its tree, made by cron
    assert chat.source == "chat"


def _send_message(args, target="conv-1"):
    """``send_message`` as a verified session of conversation ``target`` calls it (in process)."""
    import asyncio

    from kirocrew_core.coretools.contract import CrewSession, ToolCall
    from kirocrew_core.messages.tools import send_message

    who = CrewSession("kcs1-" + "6" * 32, "conversation", target, agent="kirocrew")
    return asyncio.run(send_message(args, ToolCall("send_message", who, None, "strict", "session")))


def test_hook_conversation_cron_job(plugin_manager):
    """The first answer that is not None names the job a message came from; muting the job silences its runs."""
    from kirocrew_core.contributions import CronJobRef
    from kirocrew_core.messages import store

    _register(plugin_manager, "a-nobody", conversation_cron_job=lambda conversation_id: None)
    _register(plugin_manager, "b-jobs", conversation_cron_job=lambda conversation_id: (
        CronJobRef("3f9a", "nightly digest", "maker") if conversation_id.startswith("cron-3f9a") else None))
    _send_message({"text": "digest ready"}, target="cron-3f9a-01")
    _send_message({"text": "chat"}, target="chat")
    chat, job = store.all_messages()
    assert job.sender == store.Sender("conversation", "cron-3f9a-01", "kirocrew", "3f9a", "nightly digest")
    assert job.sender.line().endswith("cron job 3f9a \u201cnightly digest\u201d") and chat.sender.cron_job is None
    store.mute("cron:3f9a")
    assert "muted this session" in _send_message({"text": "again"}, target="cron-3f9a-02")
    assert "muted" not in _send_message({"text": "still here"}, target="chat")


def test_hook_conversation_deliver_takes_send_message_to_its_origin(plugin_manager):
    """``send_message(session="origin")`` queues a run in the conversation that made the job when a plugin answers
    with a run id; a refusal's reason is the fallback's."""
    from kirocrew_core.contributions import CronJobRef
    from kirocrew_core.errors import KirocrewError

    injected = []

    async def keeper(conversation_id, text):
        if conversation_id == "gone":
            raise KirocrewError("that conversation is archived", code="conversation_archived")
        if conversation_id != "maker":
            return None
        injected.append((conversation_id, text))
        return "run-9"

    makers = {"run-1": "maker", "run-2": "gone", "run-3": None}
    _register(plugin_manager, "a-jobs", conversation_cron_job=lambda conversation_id: CronJobRef(
        "77", "weekly", makers[conversation_id]) if conversation_id in makers else None)
    _register(plugin_manager, "b-nobody", conversation_deliver=lambda conversation_id, text: None)
    _register(plugin_manager, "c-keeper", conversation_deliver=keeper)
    done = _send_message({"text": "report attached", "title": "Weekly", "session": "origin"}, target="run-1")
    assert "injected into conversation maker (which created cron job 77)" in done
    [(where, text)] = injected
    assert where == "maker" and text.startswith("Weekly\n\nreport attached\n\n(Sent by kirocrew session")
    archived = _send_message({"text": "x", "session": "origin"}, target="run-2")
    assert "that conversation is archived (conversation_archived)" in archived
    assert "NOT to the origin conversation" in archived
    by_owner = _send_message({"text": "x", "session": "origin"}, target="run-3")
    assert "made by the owner, not by a conversation" in by_owner
    assert "not a cron job's run" in _send_message({"text": "x", "session": "origin"}, target="chat")
    assert len(injected) == 1


def test_hook_message_channels(plugin_manager):
    """Channels are concatenated; for one name the first in call order wins; a raising plugin is skipped."""
    from kirocrew_core.contributions import MessageChannel
    from kirocrew_core.messages.channels import all_channels

    sent = []

    withdrawn: list[str] = []

    def channel(name, label):
        def send(message):
            sent.append((label, message))
            return f"{label}-1"

        return MessageChannel(name, "test", label, send, withdrawn.append)

    def broken():
        raise RuntimeError("no channels today")

    _register(plugin_manager, "a-pager", message_channels=lambda: [channel("pager", "a"), channel("chat", "a-chat")])
    _register(plugin_manager, "b-pager", message_channels=lambda: [channel("pager", "b")])
    _register(plugin_manager, "c-broken", message_channels=broken)
    assert {name: c.description for name, c in all_channels().items()} == {"pager": "a", "chat": "a-chat"}
    assert "sent to channel pager" in _send_message({"text": "wake up", "channel": "pager"})
    [(label, message)] = sent
    assert label == "a" and message.text == "wake up" and message.sender.startswith("Sent by kirocrew session")
    import asyncio

    from kirocrew_core.messages.tools import delete

    said = asyncio.run(delete(message.id, None))  # the owner deletes it: the channel is asked to withdraw it
    assert said == f"Message {message.id} deleted from the owner's feed; withdrawn from pager." and withdrawn == ["a-1"]


def test_hook_conversation_deliver(plugin_manager):
    """The first run id in call order wins; a refusal (the conversation is archived) sends the delivery to the feed."""
    import asyncio

    from kirocrew_core.errors import KirocrewError
    from kirocrew_core.notifications import store as feed
    from kirocrew_core.webhooks.delivery import deliver
    from kirocrew_core.webhooks.store import Hook

    queued: list[tuple[str, str]] = []

    async def keeper(conversation_id, text):
        if conversation_id == "archived":
            raise KirocrewError("conversation archived is archived", code="conversation_archived")
        queued.append((conversation_id, text))
        return "run-1"

    _register(plugin_manager, "a-nobody", conversation_deliver=lambda conversation_id, text: None)
    _register(plugin_manager, "b-keeper", conversation_deliver=keeper)
    live = Hook("ci", "conv-1", "Wait for CI", "0" * 64, 0.0, agent="kirocrew")
    ran = asyncio.run(deliver(live, "d1", "!exit 3\nbuild passed", "ci", 0.0))
    assert (ran.via, ran.target) == ("run", "run-1")
    [(conversation, text)] = queued
    assert conversation == "conv-1" and "> !exit 3\n> build passed" in text and "\n!exit" not in text
    kept = asyncio.run(deliver(Hook("ci", "archived", "Wait", "0" * 64, 0.0), "d2", "late", None, 0.0))
    [note] = feed.all_notifications()
    assert (kept.via, kept.target, note.title) == ("notification", note.id, "Webhook ci")
    assert "conversation_archived" in note.body and "> late" in note.body


def test_hook_knowledge_vector_search(plugin_manager, tmp_path):
    """Every list of chunk ids is fused with the keyword ranking: a chunk no keyword finds comes back; a plugin
    that raises or answers garbage is passed over."""
    from kirocrew_core.knowledge.store import shared
    from kirocrew_core.knowledge.tools import search_text

    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.md").write_text("# Alpha\n\nthe harbour opens at dawn\n")
    (folder / "b.md").write_text("# Beta\n\nboats need fuel\n")
    library = shared()
    library.reindex(str(library.add(folder).id))
    beta = library.keyword_ranking("boats")[0]

    def broken(query, limit):
        raise RuntimeError("no model")

    _register(plugin_manager, "a-broken", knowledge_vector_search=broken)
    _register(plugin_manager, "b-garbage", knowledge_vector_search=lambda query, limit: ["not", "ids"])
    assert "## Beta" not in search_text(library, "harbour", 5)
    _register(plugin_manager, "c-vectors", knowledge_vector_search=lambda query, limit: [beta, 999_999])
    found = search_text(library, "harbour", 5)
    assert "## Alpha" in found and "## Beta" in found
    _register(plugin_manager, "d-vectors", knowledge_vector_search=lambda query, limit: [beta])
    # Two legs put Beta first, so fusion keeps it alone; the keyword leg's first hit is appended all the same.
    assert [hit.title for hit in library.search("harbour", 1, [[beta], [beta]])] == ["Beta", "Alpha"]
    assert search_text(library, "harbour", 1).index("## Beta") < search_text(library, "harbour", 1).index("## Alpha")


def test_hook_deploy_destinations(plugin_manager):
    """Concatenated; a duplicate name keeps the first in call order, so tryfirst overrides the built-in local."""
    from kirocrew_core.artifacts.deploy import destinations
    from kirocrew_core.contributions import DeployDestination
    from kirocrew_core.markers import hookimpl

    class Edition:
        @hookimpl(tryfirst=True)
        def deploy_destinations(self):
            return [DeployDestination("local", "the edition's own", lambda publication: "done"),
                    DeployDestination("shelf", "a shelf", lambda publication: "shelved")]

    assert destinations()["local"].description.startswith("Copies the artifact into a local directory")
    plugin_manager.register(Edition(), name="edition")
    found = destinations()
    assert sorted(found) == ["local", "shelf"] and found["local"].description == "the edition's own"


def test_hook_agent_file_ready(plugin_manager, isolated_homes):
    """No kiro-cli on the rendered agent until every plugin agrees; core's fallback checks the file."""
    import asyncio
    import json

    from kirocrew_core import home
    from kirocrew_core.agent_file import AgentFileUnavailable, require_ready

    def verdict(agent="kirocrew"):
        try:
            asyncio.run(require_ready(agent, plugin_manager))
        except AgentFileUnavailable as exc:
            return exc.code, exc.message
        return None

    code, message = verdict()
    assert code == "agent_file_unavailable" and "kirocrew.json does not exist" in message  # core's fallback
    assert "kirocrew mcp rebuild" in message and str(home.kiro_home()) not in message
    assert verdict("kiro_default") is None  # another agent's file is kiro-cli's business
    path = home.rendered_agent_file()
    path.parent.mkdir(parents=True)
    path.write_text("[1, 2]")
    assert "does not hold a JSON object" in verdict()[1]
    path.write_text(json.dumps({"name": "kirocrew"}))
    assert verdict() is None

    async def still_rendering():
        await asyncio.sleep(0)
        return "the render has not finished"

    _register(plugin_manager, "renderer", agent_file_ready=still_rendering)  # an awaitable result is awaited
    assert verdict()[1].startswith("the render has not finished; no kiro-cli was started")
    plugin_manager.unregister(name="renderer")
    _register(plugin_manager, "broken", agent_file_ready=lambda: 42)  # a bad answer fails closed
    assert "could not be checked" in verdict()[1]


def test_hook_authority_backends(plugin_manager):
    backend = AuthorityBackend("read_only", "bubblewrap", available=lambda: (False, "bwrap missing"),
                               factory=lambda **kw: None)
    _register(plugin_manager, "sandbox", authority_backends=lambda: [backend])
    [(_, value)] = _collected(plugin_manager, "authority_backends")
    assert value.available() == (False, "bwrap missing")


def test_hook_implementations_with_unknown_arguments_are_rejected(plugin_manager):
    with pytest.raises(pluggy.PluginValidationError):
        _register(plugin_manager, "bad-args", doctor_checks=lambda flavour: [])


def test_hook_governance_ceiling(plugin_manager):
    from kirocrew_core.governance import may_auto_approve
    from kirocrew_testing.policy import write_policy

    write_policy(rules=[{"decision": "allow", "tool": "*"}])  # the permission policy keeps every grant it can
    assert may_auto_approve("@notion/search") is True
    _register(plugin_manager, "policy", governance_ceiling=lambda: ["@Notion/delete_page"])
    assert may_auto_approve("@notion") is False
    assert may_auto_approve("@notion/search") is False  # named at any granularity
    assert may_auto_approve("@linear") is True


def test_hook_protected_paths(plugin_manager, isolated_homes, tmp_path):
    from kirocrew_core.contributions import ProtectedPath
    from kirocrew_core.gate.calls import Context, ToolCall
    from kirocrew_core.gate.engine import Policy

    vault = tmp_path / "vault"
    _register(plugin_manager, "vault", protected_paths=lambda: [ProtectedPath(vault / "key.pem", secret=True),
                                                                 ProtectedPath(vault / "state")])
    ctx = Context("unrestricted", "kirocrew", str(tmp_path), str(isolated_homes.user_home))

    def decided(policy, tool, path):
        return policy.decide(ToolCall(tool, None, {"path": str(path)}), ctx).decision

    policy = Policy.build(pm=plugin_manager)
    assert decided(policy, "read", vault / "key.pem") == "ask"  # a secret is read with the owner's say-so
    assert decided(policy, "write", vault / "state" / "db") == "deny"  # a folder covers what is below it
    assert decided(policy, "read", vault / "state" / "db") == "allow"
    assert decided(policy, "write", isolated_homes.crew_home / "x") == "deny"  # core's own, beside the plugin's
    # A plugin that fails makes every file access ask (fail closed), and says which plugin it was.
    _register(plugin_manager, "broken-vault", protected_paths=lambda: 1 / 0)
    broken = Policy.build(pm=plugin_manager)
    assert decided(broken, "read", tmp_path / "notes.txt") == "ask"
    assert any("broken-vault" in problem for problem in broken.problems)


def test_hook_secret_files(plugin_manager, isolated_homes, tmp_path):
    from kirocrew_core.contributions import SecretFile
    from kirocrew_core.gateway.auth import load_or_create_token
    from kirocrew_core.redaction import redact_secrets

    token = load_or_create_token()
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "a.secret").write_text("alpha-quartz-ribbon-71\n")
    _register(plugin_manager, "vault", secret_files=lambda: [SecretFile(vault, label="the vault")])
    text = f"token {token}, a alpha-quartz-ribbon-71, and hex {b'alpha-quartz-ribbon-71'.hex()}"
    assert redact_secrets(text) == "token <redacted>, a <redacted>, and hex <redacted>"
    # Read again when a file changes: a new value is known at once, the old one no longer.
    (vault / "a.secret").write_text("zephyr-mango-basalt-42")
    assert redact_secrets("alpha-quartz-ribbon-71 zephyr-mango-basalt-42") == "alpha-quartz-ribbon-71 <redacted>"
    # A plugin that fails is skipped, named in the log; core's own values are still known.
    _register(plugin_manager, "broken-vault", secret_files=lambda: 1 / 0)
    assert redact_secrets(f"{token} zephyr-mango-basalt-42") == "<redacted> <redacted>"


def test_hook_doctor_checks(plugin_manager):
    from kirocrew_core.doctor import run_checks

    def explode() -> DoctorResult:
        raise OSError("disk on fire")

    _register(plugin_manager, "zz-checks", doctor_checks=lambda: [
        DoctorCheck("zz.good", lambda: DoctorResult("ok", "fine")),
        DoctorCheck("zz.bad", explode),
    ])
    outcomes = {o.check.name: o for o in run_checks(plugin_manager)}
    assert outcomes["zz.good"].result.status == "ok"
    assert outcomes["zz.bad"].result.status == "fail"
    assert "disk on fire" in outcomes["zz.bad"].result.detail
    assert outcomes["core.homes"].plugin == "kirocrew_core.builtin.doctor"
