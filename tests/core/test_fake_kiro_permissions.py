"""The fake kiro-cli's permission gate: what it asks over ACP, what ``toolsSettings`` allow or deny, and that a
refused call has no effect while the turn goes on. Tests of kirocrew's own policy rely on every line of this."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import home
from kirocrew_testing.fake_kiro import permissions
from kirocrew_testing.fake_kiro.agents_dirs import PathSettings, ShellSettings, SpecError, parse_spec
from kirocrew_testing.fake_kiro.harness import FakeKiroProcess, PermissionPolicy, RecordingClient, start_fake_kiro

REJECTED = "Tool use was rejected by the user"


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def write_agent(name: str, document: dict[str, Any]) -> None:
    agents = home.kiro_agents_dir()
    agents.mkdir(parents=True, exist_ok=True)
    (agents / f"{name}.json").write_text(json.dumps(document))


def agent_with(name: str, settings: dict[str, Any], allowed: list[str] | None = None) -> str:
    write_agent(name, {"tools": ["*"], "allowedTools": allowed or [], "toolsSettings": settings})
    return name


@dataclass
class Turn:
    response: Any
    kiro: FakeKiroProcess
    client: RecordingClient = field(init=False)

    def __post_init__(self) -> None:
        self.client = self.kiro.client

    def asked(self) -> list[str]:
        """The titles of the permission requests, in order."""
        return [r["tool_call"].title for r in self.client.permission_requests]

    def errors(self) -> list[str]:
        """``rawOutput.error`` of every failed tool call, in order."""
        return [u.raw_output["error"] for _, u in self.client.updates
                if u.session_update == "tool_call_update" and u.status == "failed"]

    def completed(self) -> list[Any]:
        return [u.raw_output for _, u in self.client.updates
                if u.session_update == "tool_call_update" and u.status == "completed"]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """The session's cwd: a directory of its own, since the test's HOME and bin dir live in tmp_path."""
    (tmp_path / "ws").mkdir()
    return tmp_path / "ws"


def asker() -> str:
    """An agent with every tool and nothing allowed (``kiro_default`` allows ``read`` unasked)."""
    return agent_with("asker", {})


def answers(*replies: str) -> PermissionPolicy:
    """Answer the permission requests with ``replies``, one each, in order."""
    queue = list(replies)
    return lambda tool_call, options: queue.pop(0)


def one_turn(fake_kiro_cli: Any, cwd: Path, text: str, *args: str, permission: PermissionPolicy = "allow_once",
             env: dict[str, str] | None = None) -> Turn:
    async def scenario() -> Turn:
        async with start_fake_kiro(fake_kiro_cli.path, "acp", *args, env=env or dict(os.environ),
                                   client=RecordingClient(permission=permission)) as k:
            await k.initialize()
            sid = (await k.new_session(str(cwd)))["sessionId"]
            return Turn(await k.prompt(sid, text), k)

    return run(scenario())


# -- what a request looks like on the wire ---------------------------------------------------


def test_a_shell_request_carries_the_base_command_trust_option_inside_params_meta(
        fake_kiro_cli: Any, ws: Path) -> None:
    turn = one_turn(fake_kiro_cli, ws, "!shell echo hello world")
    frame = turn.kiro.sent("session/request_permission")[0]
    params = frame["params"]
    assert "trustOptions" not in params
    assert params["_meta"] == {"trustOptions": [{"label": "Base command", "display": "echo *",
                                                 "setting_key": "allowedCommands", "patterns": ["echo( .*)?"]}]}
    call_id = turn.client.of_kind("tool_call")[0].tool_call_id
    assert params["toolCall"] == {"toolCallId": call_id, "title": "echo hello world"}
    assert [(o["optionId"], o["name"], o["kind"]) for o in params["options"]] == [
        ("allow_once", "Yes", "allow_once"), ("allow_always", "Always", "allow_always"),
        ("reject_once", "No", "reject_once")]


def test_the_base_command_is_the_first_word_escaped_as_a_regex(fake_kiro_cli: Any, ws: Path) -> None:
    turn = one_turn(fake_kiro_cli, ws, "!shell ./run.sh --fast")
    option = turn.kiro.sent("session/request_permission")[0]["params"]["_meta"]["trustOptions"][0]
    assert (option["display"], option["patterns"]) == ("./run.sh *", [r"\./run\.sh( .*)?"])


def test_write_and_read_requests_offer_their_directory_as_a_trust_option(fake_kiro_cli: Any, ws: Path) -> None:
    (ws / "docs").mkdir()
    (ws / "docs" / "in.txt").write_text("x")
    turn = one_turn(fake_kiro_cli, ws, "!write out/new.txt hi\n!read docs/in.txt", "--agent", asker())
    write, read = (f["params"]["_meta"]["trustOptions"] for f in turn.kiro.sent("session/request_permission"))
    assert write == [{"label": f"Trust writes to {ws / 'out'}", "display": f"{ws / 'out'}/**",
                      "setting_key": "runtime_write_paths", "patterns": [f"{ws / 'out'}/**"]}]
    assert read == [{"label": f"Trust reads in {ws / 'docs'}", "display": f"{ws / 'docs'}/**",
                     "setting_key": "runtime_read_paths", "patterns": [f"{ws / 'docs'}/**"]}]


# -- reject_once: nothing happens, the turn goes on -------------------------------------------


def test_a_rejected_shell_command_never_runs_and_the_turn_goes_on_to_the_next_step(
        fake_kiro_cli: Any, ws: Path) -> None:
    turn = one_turn(fake_kiro_cli, ws, "!shell touch x\n!say after", permission="reject_once")
    assert turn.response.stop_reason == "end_turn"
    assert turn.client.texts() == ["after"]
    assert turn.errors() == [REJECTED]
    assert not (ws / "x").exists()


def test_a_rejected_read_returns_nothing_of_the_file(fake_kiro_cli: Any, ws: Path) -> None:
    (ws / "secret.txt").write_text("the secret")
    turn = one_turn(fake_kiro_cli, ws, "!read secret.txt\n!say after", "--agent", asker(),
                    permission="reject_once")
    assert turn.errors() == [REJECTED] and turn.client.texts() == ["after"]
    assert "the secret" not in json.dumps([u.model_dump(mode="json") for _, u in turn.client.updates])


def test_a_rejected_mcp_call_never_reaches_the_server(fake_kiro_cli: Any, ws: Path) -> None:
    server = ws / "marker_server.py"
    server.write_text(
        "import pathlib, sys\n"
        "from mcp.server.mcpserver import MCPServer\n"
        "server = MCPServer('marker')\n"
        "@server.tool()\n"
        "def mark(name: str) -> str:\n"
        "    pathlib.Path(sys.argv[1], name).touch()\n"
        "    return 'marked'\n"
        "server.run()\n")
    write_agent("crew", {"tools": ["*"], "mcpServers": {"m": {"command": sys.executable,
                                                              "args": [str(server), str(ws)]}}})
    text = '!mcp m mark {"name": "rejected"}\n!mcp m mark {"name": "allowed"}\n!say after'
    turn = one_turn(fake_kiro_cli, ws, text, "--agent", "crew", permission=answers("reject_once", "allow_once"))
    assert turn.errors() == [REJECTED] and turn.client.texts() == ["after"]
    assert not (ws / "rejected").exists()
    assert (ws / "allowed").exists()


def test_a_permission_answered_cancelled_still_cancels_the_turn(fake_kiro_cli: Any, ws: Path) -> None:
    turn = one_turn(fake_kiro_cli, ws, "!shell touch x\n!say never said", permission="cancelled")
    assert turn.response.stop_reason == "cancelled"
    assert turn.client.texts() == [] and not (ws / "x").exists()


# -- toolsSettings: the shell ---------------------------------------------------------------


def test_allowed_commands_run_unasked_and_other_commands_still_ask(fake_kiro_cli: Any, ws: Path) -> None:
    agent = agent_with("builder", {"shell": {"allowedCommands": ["touch made", "echo .*"]}})
    turn = one_turn(fake_kiro_cli, ws, "!shell touch made\n!shell echo hi\n!shell touch other",
                    "--agent", agent, permission="reject_once")
    assert turn.asked() == ["touch other"]
    assert (ws / "made").exists() and not (ws / "other").exists()
    assert turn.completed()[1]["stdout"] == "hi\n"


def test_allowed_commands_match_the_whole_line_so_a_chained_command_rides_along(
        fake_kiro_cli: Any, ws: Path) -> None:
    agent = agent_with("chained", {"shell": {"allowedCommands": ["touch a.*"]}})
    turn = one_turn(fake_kiro_cli, ws, "!shell touch a; touch b", "--agent", agent, permission="never")
    assert turn.asked() == []
    assert (ws / "a").exists() and (ws / "b").exists()


def test_a_denied_command_is_refused_without_asking_and_the_turn_goes_on(fake_kiro_cli: Any, ws: Path) -> None:
    (ws / "keep.txt").write_text("kept")
    agent = agent_with("careful", {"shell": {"deniedCommands": ["rm .*"], "allowedCommands": ["rm .*"]}})
    turn = one_turn(fake_kiro_cli, ws, "!shell rm -f keep.txt\n!say after", "--agent", agent,
                    permission="never")
    assert turn.asked() == []
    assert turn.errors() == ["Denied by toolsSettings.shell.deniedCommands: the command matches 'rm .*'"]
    assert turn.client.texts() == ["after"] and (ws / "keep.txt").read_text() == "kept"


def test_denied_commands_are_anchored_at_both_ends(fake_kiro_cli: Any, ws: Path) -> None:
    agent = agent_with("anchored", {"shell": {"deniedCommands": ["rm"]}}, allowed=["shell"])
    turn = one_turn(fake_kiro_cli, ws, "!shell echo rm", "--agent", agent, permission="never")
    assert turn.errors() == [] and turn.completed()[0]["stdout"] == "rm\n"


def test_allowed_tools_overrides_the_allow_lists_but_the_deny_list_still_comes_first(
        fake_kiro_cli: Any, ws: Path) -> None:
    agent = agent_with("trusting", {"execute_bash": {"deniedCommands": ["touch denied"], "denyByDefault": True}},
                       allowed=["shell"])
    turn = one_turn(fake_kiro_cli, ws, "!shell touch free\n!shell touch denied", "--agent", agent,
                    permission="never")
    assert turn.asked() == []
    assert (ws / "free").exists() and not (ws / "denied").exists()
    assert turn.errors() == ["Denied by toolsSettings.execute_bash.deniedCommands: the command matches "
                             "'touch denied'"]


def test_an_invalid_denied_commands_regex_denies_every_command(fake_kiro_cli: Any, ws: Path) -> None:
    agent = agent_with("broken", {"shell": {"deniedCommands": ["rm (", "never"]}}, allowed=["shell"])
    turn = one_turn(fake_kiro_cli, ws, "!shell touch x\n!say after", "--agent", agent, permission="never")
    assert turn.asked() == [] and not (ws / "x").exists()
    assert len(turn.errors()) == 1 and "'rm (' is not a valid regex" in turn.errors()[0]
    assert "every command is denied" in turn.errors()[0]
    assert turn.client.texts() == ["after"]


def test_deny_by_default_refuses_what_no_allow_rule_covers_instead_of_asking(
        fake_kiro_cli: Any, ws: Path) -> None:
    agent = agent_with("strict", {"shell": {"allowedCommands": ["touch ok"], "denyByDefault": True}})
    turn = one_turn(fake_kiro_cli, ws, "!shell touch ok\n!shell touch no", "--agent", agent,
                    permission="never")
    assert turn.asked() == []
    assert (ws / "ok").exists() and not (ws / "no").exists()
    assert turn.errors() == ["Denied by toolsSettings.shell.denyByDefault: the command matches no allowedCommands"]


def test_auto_allow_readonly_runs_read_only_commands_unasked_and_asks_for_the_rest(
        fake_kiro_cli: Any, ws: Path) -> None:
    (ws / "f.txt").write_text("one\ntwo\n")
    agent = agent_with("reader", {"shell": {"autoAllowReadonly": True}})
    text = "!shell cat f.txt | wc -l\n!shell pwd\n!shell echo hi > out.txt\n!shell touch y"
    turn = one_turn(fake_kiro_cli, ws, text, "--agent", agent, permission="reject_once")
    assert turn.asked() == ["echo hi > out.txt", "touch y"]
    assert [o["stdout"].strip() for o in turn.completed()] == ["2", str(ws)]
    assert not (ws / "out.txt").exists() and not (ws / "y").exists()


def test_without_auto_allow_readonly_even_a_read_only_command_asks(fake_kiro_cli: Any, ws: Path) -> None:
    agent = agent_with("plain", {"shell": {"allowedCommands": ["true"]}})
    assert one_turn(fake_kiro_cli, ws, "!shell ls", "--agent", agent).asked() == ["ls"]


@pytest.mark.parametrize(("command", "readonly"), [
    ("ls -la", True), ("cat a | grep b | wc -l", True), ("git status", True), ("git log -3", True),
    ("head -n 3 f", True), ("git push", False), ("git diff --output=x", False), ("rm -rf x", False),
    ("echo a > b", False), ("echo a; rm b", False), ("echo $(rm b)", False), ("ls && rm b", False),
    ("ls & rm b", False), ("cat a|sh", False), ("echo `id`", False), ("ls | ", False), ("echo 'open", False),
])
def test_the_read_only_list_admits_only_plain_reading_pipelines(command: str, readonly: bool) -> None:
    assert permissions.is_readonly(command) is readonly


def test_trust_all_tools_runs_even_a_denied_command(fake_kiro_cli: Any, ws: Path) -> None:
    agent = agent_with("denying", {"shell": {"deniedCommands": ["touch .*"]}})
    turn = one_turn(fake_kiro_cli, ws, "!shell touch x", "--agent", agent, "--trust-all-tools",
                    permission="never")
    assert turn.errors() == [] and (ws / "x").exists()


def test_trust_tools_and_always_trust_the_tool_but_not_past_its_deny_list(fake_kiro_cli: Any, ws: Path) -> None:
    agent = agent_with("listed", {"shell": {"deniedCommands": ["touch no"]}})
    flagged = one_turn(fake_kiro_cli, ws, "!shell touch yes\n!shell touch no", "--agent", agent,
                       "--trust-tools", "shell", permission="never")
    assert flagged.asked() == [] and len(flagged.errors()) == 1
    always = one_turn(fake_kiro_cli, ws, "!shell touch again\n!shell touch more\n!shell touch no",
                      "--agent", agent, permission="allow_always")
    assert always.asked() == ["touch again"] and len(always.errors()) == 1
    assert {p.name for p in ws.iterdir()} == {"yes", "again", "more"}


# -- toolsSettings: paths ---------------------------------------------------------------------


def test_write_paths_deny_first_allow_unasked_and_ask_for_the_rest(fake_kiro_cli: Any, ws: Path) -> None:
    agent = agent_with("writer", {"write": {"allowedPaths": ["out/**"], "deniedPaths": ["out/secret*", "*.env"]}})
    text = "!write out/a.txt A\n!write out/secret.txt S\n!write out/deep/x.env E\n!write other.txt O\n!say after"
    turn = one_turn(fake_kiro_cli, ws, text, "--agent", agent, permission="reject_once")
    assert turn.asked() == [f"Creating {ws / 'other.txt'}"]
    assert (ws / "out" / "a.txt").read_text() == "A"
    assert turn.errors() == [
        f"Denied by toolsSettings.write.deniedPaths: {ws / 'out/secret.txt'} matches 'out/secret*'",
        f"Denied by toolsSettings.write.deniedPaths: {ws / 'out/deep/x.env'} matches '*.env'",
        REJECTED]
    assert sorted(str(p.relative_to(ws)) for p in ws.rglob("*")) == ["out", "out/a.txt"]
    assert turn.client.texts() == ["after"]


def test_allowed_tools_read_overrides_allowed_paths_but_denied_paths_still_refuse(
        fake_kiro_cli: Any, ws: Path) -> None:
    (ws / "notes.txt").write_text("notes")
    (ws / ".env").write_text("TOKEN=1")
    agent = agent_with("reading", {"fs_read": {"allowedPaths": ["nowhere/**"], "deniedPaths": [".env"]}},
                       allowed=["read"])
    turn = one_turn(fake_kiro_cli, ws, "!read notes.txt\n!read .env", "--agent", agent, permission="never")
    assert turn.asked() == []
    assert turn.completed() == [{"path": str(ws / "notes.txt"), "content": "notes"}]
    assert turn.errors() == [f"Denied by toolsSettings.fs_read.deniedPaths: {ws / '.env'} matches '.env'"]


@pytest.mark.parametrize(("pattern", "path", "matches"), [
    ("src/**", "src/a/b.py", True), ("src", "src/a/b.py", True), ("src/*.py", "src/a/b.py", False),
    ("src/**/*.py", "src/a/b.py", True), ("*.key", "deep/er/id.key", True), ("/etc/**", "/etc/passwd", True),
    ("./build/", "build/out.o", True), ("build", "rebuild/x", False), ("s?c/[ab].py", "src/a.py", True),
    ("s?c/[!ab].py", "src/a.py", False), ("~/notes/**", "~/notes/today.md", True), ("src/**", "../src/x", False),
])
def test_path_globs_follow_gitignore_rules_against_the_session_cwd(pattern: str, path: str, matches: bool,
                                                                   ws: Path) -> None:
    cwd = ws / "ws"
    target = Path(os.path.expanduser(path)) if path.startswith(("~", "/")) else cwd / path
    assert permissions.path_matches(pattern, target, cwd) is matches


# -- !read and !fetch ---------------------------------------------------------------------------


def test_read_returns_the_files_text_once_allowed(fake_kiro_cli: Any, ws: Path) -> None:
    (ws / "a.txt").write_text("line one\nline two\n")
    turn = one_turn(fake_kiro_cli, ws, "!read a.txt\n!read missing.txt", "--agent", asker())
    start = turn.client.of_kind("tool_call")[0]
    assert (start.kind, start.field_meta, start.raw_input) == (
        "read", {"kiro": {"toolName": "read"}}, {"operations": [{"mode": "Line", "path": str(ws / "a.txt")}]})
    assert turn.asked() == [f"Reading {ws / 'a.txt'}", f"Reading {ws / 'missing.txt'}"]
    done = [u for u in turn.client.of_kind("tool_call_update") if u.status == "completed"][0]
    assert done.content[0].content.text == "line one\nline two\n"
    assert turn.errors() == ["No such file or directory"]


@dataclass
class Page:
    url: str
    hits: list[str]


@pytest.fixture
def page() -> Iterator[Page]:
    """An HTTP server on 127.0.0.1: ``/page`` is a page, anything else 404; every request path is kept."""
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            found = self.path == "/page"
            body = b"hello from the page" if found else b"no such page"
            self.send_response(200 if found else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Page(f"http://127.0.0.1:{server.server_address[1]}", hits)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_fetch_gets_a_loopback_page_once_allowed(fake_kiro_cli: Any, ws: Path, page: Page) -> None:
    turn = one_turn(fake_kiro_cli, ws, f"!fetch {page.url}/page\n!fetch {page.url}/gone")
    start = turn.client.of_kind("tool_call")[0]
    assert (start.kind, start.field_meta, start.raw_input) == (
        "fetch", {"kiro": {"toolName": "web_fetch"}}, {"url": f"{page.url}/page"})
    assert turn.asked() == [f"Fetching {page.url}/page", f"Fetching {page.url}/gone"]
    assert turn.completed() == [{"url": f"{page.url}/page", "status": 200, "body": "hello from the page"}]
    failed = [u.raw_output for u in turn.client.of_kind("tool_call_update") if u.status == "failed"]
    assert failed == [{"url": f"{page.url}/gone", "status": 404, "body": "no such page"}]
    assert page.hits == ["/page", "/gone"]


def test_a_rejected_fetch_never_reaches_the_server(fake_kiro_cli: Any, ws: Path, page: Page) -> None:
    turn = one_turn(fake_kiro_cli, ws, f"!fetch {page.url}/page\n!say after", permission="reject_once")
    assert turn.errors() == [REJECTED] and turn.client.texts() == ["after"]
    assert page.hits == []


@pytest.mark.parametrize("url", ["https://example.com/", "http://example.com/", "file:///etc/passwd",
                                 "http://127.0.0.2/", "ftp://localhost/"])
def test_fetch_refuses_anything_but_a_loopback_http_url_without_touching_the_network(
        fake_kiro_cli: Any, ws: Path, url: str) -> None:
    turn = one_turn(fake_kiro_cli, ws, f"!fetch {url}\n!say after")
    assert len(turn.errors()) == 1 and "only http://127.0.0.1 and http://localhost" in turn.errors()[0]
    assert turn.client.texts() == ["after"]


def test_read_and_fetch_ask_like_any_tool_unless_the_agent_allows_them(
        fake_kiro_cli: Any, ws: Path, page: Page) -> None:
    (ws / "a.txt").write_text("a")
    agent = agent_with("browsing", {}, allowed=["read", "web_fetch"])
    turn = one_turn(fake_kiro_cli, ws, f"!read a.txt\n!fetch {page.url}/page", "--agent", agent,
                    permission="never")
    assert turn.asked() == [] and len(turn.completed()) == 2


# -- a malformed toolsSettings -------------------------------------------------------------------


@pytest.mark.parametrize(("settings", "field_name"), [
    ({"shell": ["echo"]}, "toolsSettings.shell"),
    ({"shell": {"deniedCommands": "rm .*"}}, "toolsSettings.shell.deniedCommands"),
    ({"execute_bash": {"denyByDefault": "yes"}}, "toolsSettings.execute_bash.denyByDefault"),
    ({"shell": {"autoAllowReadonly": 1}}, "toolsSettings.shell.autoAllowReadonly"),
    ({"write": {"allowedPaths": ["ok", 3]}}, "toolsSettings.write.allowedPaths"),
    ({"fs_read": {"deniedPaths": {"a": "b"}}}, "toolsSettings.fs_read.deniedPaths"),
    ({"shell": {}, "execute_bash": {"allowedCommands": [True]}}, "toolsSettings.execute_bash.allowedCommands"),
])
def test_a_mistyped_tools_setting_is_refused_like_any_malformed_field(
        settings: dict[str, Any], field_name: str, ws: Path) -> None:
    with pytest.raises(SpecError, match=field_name.replace(".", r"\.") + ": invalid type"):
        parse_spec({"toolsSettings": settings}, path=ws / "a.json", source="global")


def test_settings_for_other_tools_and_unknown_keys_are_accepted(ws: Path) -> None:
    spec = parse_spec({"toolsSettings": {"use_aws": {"allowedServices": ["s3"]}, "@git/status": {"x": 1},
                                         "shell": {"allowedCommands": ["ls"], "somethingNew": 1}}},
                      path=ws / "a.json", source="global")
    assert spec.tools_settings.shell == ShellSettings(allowed_commands=("ls",))
    assert spec.tools_settings.write == PathSettings("write")


def test_an_agent_with_a_malformed_tools_settings_is_no_mode_and_kiro_says_why(
        fake_kiro_cli: Any, ws: Path) -> None:
    write_agent("mistyped", {"toolsSettings": {"shell": {"deniedCommands": "rm .*"}}})

    async def scenario() -> Any:
        async with start_fake_kiro(fake_kiro_cli.path, "acp", "--agent", "mistyped", env=dict(os.environ)) as k:
            await k.initialize()
            return await k.new_session(str(ws)), k.stderr

    result, stderr = run(scenario())
    assert [m["id"] for m in result["modes"]["availableModes"]] == ["kiro_default"]
    assert any("toolsSettings.shell.deniedCommands: invalid type: string" in line for line in stderr)
