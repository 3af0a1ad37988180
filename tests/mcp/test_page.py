"""The dashboard's MCP servers page and its add-server route, through the in-process gateway (issue 15)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import audit, hookimpl, home
from kirocrew_core.contributions import ManagedMcpServer
from kirocrew_mcp import page
from kirocrew_mcp.probe_cache import default_cache

CAT = {"command": "/bin/cat", "args": ["-u"]}
HOSTILE = '<img src=x onerror="alert(1)">'


@pytest.fixture(autouse=True)
def _mcp(plugin_manager: Any) -> Any:
    """The mcp plugin alone on the test's manager; an empty probe cache."""
    import kirocrew_mcp.plugin

    plugin_manager.register(kirocrew_mcp.plugin, name="mcp")
    default_cache().clear()
    yield plugin_manager
    default_cache().clear()


class ManagedCore:
    @hookimpl
    def managed_mcp_servers(self) -> list[ManagedMcpServer]:
        return [ManagedMcpServer("kirocrew-core", ("mcp-core",), True)]


def write(path: Path, document: Any) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (document if isinstance(document, str) else json.dumps(document, indent=2)).encode()
    path.write_bytes(data)
    return data


def files() -> dict[str, str | None]:
    """Every file an add may write, by digest (None when absent)."""
    paths = {"crew": home.crew_mcp_file(), "kiro": home.kiro_global_mcp_file(), "agent": home.rendered_agent_file(),
             "claude": home.user_home() / ".claude.json"}
    return {k: hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None for k, p in paths.items()}


def servers(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())["mcpServers"]


def row_html(html: str, name: str) -> str:
    start = html.index(f'<tr data-name="{name}"')
    return html[start:html.index("</tr>", start)]


# -- the page -----------------------------------------------------------------------------------------------


def test_the_page_is_in_the_navigation_and_says_so_when_no_server_is_configured(gateway_client) -> None:
    assert '<a href="/mcp">MCP servers</a>' in gateway_client.get("/").text
    answer = gateway_client.get("/mcp")
    assert answer.status_code == 200
    assert "script-src 'self'" in answer.headers["content-security-policy"]
    html = answer.text
    assert "No MCP servers configured." in html and "0 servers" in html
    assert "<style" not in html and "<script>" not in html and "style=" not in html  # nothing inline
    assert '<script type="module" src="/static/kirocrew_mcp/mcp.js"></script>' in html
    assert gateway_client.get("/static/kirocrew_mcp/mcp.js").headers["content-type"].startswith("text/javascript")
    assert 'id="mcp-problems"' not in html
    assert ">Apply &amp; Restart</button>" in html and ">Probe MCP servers</button>" in html


def test_a_row_shows_a_badge_per_scope_from_the_scopes_list_with_its_status_tools_and_actions(
        gateway_client, plugin_manager) -> None:
    import kirocrew_companion.plugin

    write(home.kiro_global_mcp_file(), {"mcpServers": {"srv": CAT}})
    html = gateway_client.get("/mcp").text
    row = row_html(html, "srv")
    assert 'data-scope="kirocrew"' in row and 'data-scope="kiro"' in row and 'data-scope="cc"' not in row
    assert 'data-scope="kiro" data-label="Kiro" data-on="true" aria-pressed="true"' in row
    assert ">Probe<span class=\"visually-hidden\"> srv</span></button>" in row
    assert ">Uninstall<span class=\"visually-hidden\"> srv</span></button>" in row
    assert '<code title="/bin/cat -u">cat -u</code>' in row  # the command's file name; the full path on hover

    plugin_manager.register(kirocrew_companion.plugin, name="companion")  # the seam scope comes from the plugin
    row = row_html(gateway_client.get("/mcp").text, "srv")
    assert 'data-scope="cc" data-label="Claude" data-on="false" aria-pressed="false"' in row


def test_a_row_that_was_probed_shows_its_tools_with_toggles_and_when_it_was_probed(gateway_client) -> None:
    from kirocrew_testing.mcp_fixtures import stdio_server_argv

    argv = stdio_server_argv()
    write(home.crew_mcp_file(), {"mcpServers": {"echo": {"command": argv[0], "args": argv[1:],
                                                         "disabledTools": ["tool_1"]}}})
    probed = gateway_client.post("/api/mcp/probe", json={"name": "echo"}).json()["servers"][0]
    assert probed["status"] == "ok" and probed["tools"], probed
    row = row_html(gateway_client.get("/mcp").text, "echo")
    assert '<span class="badge tone-ok">Online</span>' in row
    assert "Last probed: <time datetime=" in row
    assert f'{len(probed["tools"])} tool' in row and "(1 off)" in row
    assert 'data-tool="tool_1" data-enabled="false" aria-pressed="false"' in row
    other = next(t for t in probed["tools"] if t != "tool_1")
    assert f'data-tool="{other}" data-enabled="true" aria-pressed="true"' in row


def test_hostile_names_errors_and_paths_are_shown_as_text(gateway_client) -> None:
    write(home.kiro_global_mcp_file(), {"mcpServers": {HOSTILE: {"command": "/nonexistent/<b>x</b>",
                                                                 "env": {"K": "</code><script>"}}}})
    gateway_client.post("/api/mcp/probe", json={"name": HOSTILE})
    html = gateway_client.get("/mcp").text
    assert "<img src=x" not in html and "<b>x</b>" not in html and "<script>" not in html
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in html
    assert "</code><script>" not in html  # env values never leave the process, escaped or not


def test_a_malformed_scope_file_is_shown_as_a_problem_alert_and_its_badges_are_not_buttons(gateway_client) -> None:
    write(home.crew_mcp_file(), {"mcpServers": {"mine": CAT}})
    write(home.kiro_global_mcp_file(), '{"mcpServers": {"broken": ')
    html = gateway_client.get("/mcp").text
    problems = html[html.index('id="mcp-problems"'):html.index("</div>", html.index('id="mcp-problems"'))]
    assert 'role="alert"' in problems and "mcp.json" in problems and "is malformed" in problems
    row = row_html(html, "mine")
    assert 'data-scope="kiro"' not in row  # unknowable is not "absent": no button that would stage a removal
    assert "Kiro<span class=\"visually-hidden\">: unknown, the file cannot be read</span>" in row


def test_a_server_a_plugin_manages_is_shown_as_managed_and_has_no_uninstall(gateway_client, plugin_manager) -> None:
    plugin_manager.register(ManagedCore(), name="managed-core")
    write(home.rendered_agent_file(), {"mcpServers": {"kirocrew-core": {"command": "kirocrew", "args": ["mcp-core"]}}})
    row = row_html(gateway_client.get("/mcp").text, "kirocrew-core")
    assert "Managed by kirocrew" in row
    assert "data-scope=" not in row and "Uninstall" not in row


def test_a_server_kirocrew_connections_installed_reads_managed_by_connections(gateway_client, plugin_manager) -> None:
    import kirocrew_connections.plugin
    from kirocrew_connections.registry import clear_registry_cache, load_registry

    plugin_manager.register(kirocrew_connections.plugin, name="connections")
    clear_registry_cache()
    provider = load_registry(plugin_manager).visible()[0]
    write(home.kiro_global_mcp_file(), {"mcpServers": {provider.slug: {"url": provider.mcp_url + "/"},
                                                       "lookalike": {"url": provider.mcp_url}}})
    html = gateway_client.get("/mcp").text
    row = row_html(html, provider.slug)
    assert '<a class="badge managed" href="/connections">Managed by Connections</a>' in row
    assert "data-scope=" not in row and "Uninstall" not in row
    assert "Managed by" not in row_html(html, "lookalike")  # the name must be the provider's too


@pytest.mark.parametrize(("row", "label", "tone"), [
    ({"status": "ok"}, "Online", "ok"),
    ({"status": "ok", "probeMode": "declared"}, "Declared", "warn"),
    ({"status": "error"}, "Failed", "fail"),
    ({"status": "outdated"}, "Outdated", "warn"),
    ({"status": "unknown"}, "Unknown", "warn"),
    ({"status": "needs_auth", "authChallenge": True, "authGrantPresent": False}, "Sign-in required", "warn"),
    ({"status": "needs_auth", "authChallenge": True, "authGrantPresent": True}, "Signed in", "muted"),
    ({"status": "needs_auth", "authChallenge": True, "authGrantPresent": None}, "Not verified", "warn"),
    ({"status": "needs_auth"}, "Not verified", "warn"),
])
def test_each_status_reads_as_the_reference_says(row, label, tone) -> None:
    view = page.status_view({"name": "s", **row})
    assert (view["label"], view["tone"]) == (label, tone)


def test_last_probed_shows_only_the_time_today_and_the_date_otherwise() -> None:
    now = dt.datetime(2026, 3, 4, 15, 0).astimezone()
    today = page.probed_at_view(dt.datetime(2026, 3, 4, 9, 5).astimezone().timestamp(), now)
    earlier = page.probed_at_view(dt.datetime(2026, 3, 1, 9, 5).astimezone().timestamp(), now)
    assert today is not None and earlier is not None
    assert today["short"] == "09:05" and earlier["short"] == "2026-03-01 09:05"
    assert page.probed_at_view(None) is None


def test_the_page_refuses_a_caller_without_the_owner_session(gateway_client) -> None:
    from starlette.testclient import TestClient

    write(home.kiro_global_mcp_file(), {"mcpServers": {"secret-srv": CAT}})
    with TestClient(gateway_client.app, base_url="http://127.0.0.1") as anonymous:
        refused = anonymous.get("/mcp")
        assert refused.status_code in (401, 403) and "secret-srv" not in refused.text
        post = anonymous.post("/api/mcp/servers", json={"name": "x", "command": "/bin/cat", "scopes": ["kirocrew"]})
        assert post.status_code == 401
    foreign = gateway_client.post("/api/mcp/servers", json={"name": "x", "command": "/bin/cat", "scopes": ["kirocrew"]},
                                  headers={"Origin": "http://evil.example"})
    assert foreign.status_code == 403
    assert not home.crew_mcp_file().exists()


# -- POST /api/mcp/servers --------------------------------------------------------------------------------


def test_adding_a_stdio_server_for_kirocrew_writes_the_crew_store_and_renders_the_agent(gateway_client) -> None:
    kiro = write(home.kiro_global_mcp_file(), {"theme": "dark", "mcpServers": {"other": CAT}})
    answer = gateway_client.post("/api/mcp/servers", json={
        "name": "notes", "command": "/bin/cat", "args": ["-u"], "env": {"TOKEN": "s3cret"}, "scopes": ["kirocrew"]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["ok"] and body["name"] == "notes" and body["results"][0]["actions"] == {"kirocrew": "added"}
    assert servers(home.crew_mcp_file())["notes"] == {"command": "/bin/cat", "args": ["-u"], "env": {"TOKEN": "s3cret"}}
    assert home.kiro_global_mcp_file().read_bytes() == kiro  # the user's file is untouched
    assert "notes" in servers(home.rendered_agent_file())
    listed = {r["name"]: r for r in gateway_client.get("/api/mcp").json()["servers"]}
    assert listed["notes"]["presence"]["kirocrew"] is True and listed["notes"]["envKeys"] == ["TOKEN"]
    record = [r for r in audit.tail(50) if r.get("event") == "mcp_server_add"][-1]
    assert "s3cret" not in json.dumps(record) and record["fields"]["env_keys"] == ["TOKEN"]


def test_adding_an_http_server_to_the_kiro_global_only_keeps_it_out_of_kirocrew(gateway_client) -> None:
    write(home.kiro_global_mcp_file(), {"theme": "dark", "mcpServers": {"other": CAT}})
    answer = gateway_client.post("/api/mcp/servers", json={
        "name": "docs", "url": "https://mcp.example.com/mcp", "headers": {"X-Team": "a"}, "scopes": ["kiro"]})
    assert answer.status_code == 200, answer.text
    kiro = json.loads(home.kiro_global_mcp_file().read_text())
    assert kiro["theme"] == "dark" and kiro["mcpServers"]["other"] == CAT
    assert kiro["mcpServers"]["docs"] == {"url": "https://mcp.example.com/mcp", "headers": {"X-Team": "a"}}
    assert servers(home.crew_mcp_file())["docs"] == {"disabled": True}
    listed = {r["name"]: r for r in gateway_client.get("/api/mcp").json()["servers"]}
    assert listed["docs"]["presence"] == {"kirocrew": False, "kiro": True}


@pytest.mark.parametrize(("body", "status", "code", "field"), [
    ({"name": "../etc", "command": "/bin/cat", "scopes": ["kirocrew"]}, 400, "invalid_name", "name"),
    ({"name": HOSTILE, "command": "/bin/cat", "scopes": ["kirocrew"]}, 400, "invalid_name", "name"),
    ({"name": "x" * 129, "command": "/bin/cat", "scopes": ["kirocrew"]}, 400, "invalid_name", "name"),
    ({"name": "taken", "command": "/bin/cat", "scopes": ["kirocrew"]}, 409, "server_exists", "name"),
    ({"name": "kirocrew-computer", "command": "/bin/cat", "scopes": ["kirocrew"]}, 400, "managed_server", "name"),
    ({"name": "a", "command": "  ", "scopes": ["kirocrew"]}, 400, "bad_command", "command"),
    ({"name": "a", "command": "/bin/cat\nrm -rf /", "scopes": ["kirocrew"]}, 400, "bad_command", "command"),
    ({"name": "a", "command": "/bin/cat", "url": "https://x.example", "scopes": ["kirocrew"]}, 400, "bad_command",
     "command"),
    ({"name": "a", "scopes": ["kirocrew"]}, 400, "bad_url", "url"),
    ({"name": "a", "command": "/bin/cat", "args": "-u", "scopes": ["kirocrew"]}, 400, "bad_args", "args"),
    ({"name": "a", "command": "/bin/cat", "args": ["x"] * 65, "scopes": ["kirocrew"]}, 400, "bad_args", "args"),
    ({"name": "a", "command": "/bin/cat", "env": {"BAD KEY": "v"}, "scopes": ["kirocrew"]}, 400, "bad_env", "env"),
    ({"name": "a", "url": "javascript:alert(1)", "scopes": ["kirocrew"]}, 400, "bad_url", "url"),
    ({"name": "a", "url": "https://user:pw@x.example/mcp", "scopes": ["kirocrew"]}, 400, "bad_url", "url"),
    ({"name": "a", "url": "http://mcp.example.com/mcp", "scopes": ["kirocrew"]}, 400, "insecure_url", "url"),
    ({"name": "a", "url": "https://x.example/" + "a" * 2100, "scopes": ["kirocrew"]}, 400, "bad_url", "url"),
    ({"name": "a", "url": "https://x.example", "headers": {"X": "a\r\nInjected: 1"}, "scopes": ["kirocrew"]}, 400,
     "bad_headers", "headers"),
    ({"name": "a", "command": "/bin/cat", "scopes": []}, 400, "no_scope", "scopes"),
    ({"name": "a", "command": "/bin/cat", "scopes": ["cc"]}, 400, "unknown_scope", "scopes"),
    ({"name": "a", "command": "/bin/cat", "scopes": ["kirocrew"], "extra": 1}, 400, "bad_request", ""),
])
def test_a_refused_add_names_its_field_with_a_stable_code_and_changes_nothing(gateway_client, body, status, code,
                                                                                 field) -> None:
    write(home.crew_mcp_file(), {"mcpServers": {"taken": CAT}})
    write(home.kiro_global_mcp_file(), {"mcpServers": {}})
    before = files()
    answer = gateway_client.post("/api/mcp/servers", json=body)
    assert (answer.status_code, answer.json()["code"], answer.json()["field"]) == (status, code, field), answer.text
    assert files() == before


@pytest.mark.parametrize(("raw", "code"), [(b"{not json", "bad_json"), (b"[]", "bad_json"),
                                           (b'{"name": "' + b"x" * 700_000 + b'"}', "body_too_large")])
def test_an_add_that_is_not_a_small_json_object_is_refused_before_anything_is_read(gateway_client, raw, code) -> None:
    before = files()
    answer = gateway_client.post("/api/mcp/servers", content=raw, headers={"Content-Type": "application/json"})
    assert answer.json()["code"] == code
    assert files() == before


def test_an_add_into_a_malformed_scope_file_is_refused_and_the_file_left_as_it_was(gateway_client) -> None:
    broken = write(home.kiro_global_mcp_file(), '{"mcpServers": ')
    before = files()
    answer = gateway_client.post("/api/mcp/servers", json={"name": "a", "command": "/bin/cat", "scopes": ["kiro"]})
    assert (answer.status_code, answer.json()["code"], answer.json()["field"]) == (400, "scope_file_malformed",
                                                                                    "scopes")
    assert files() == before and home.kiro_global_mcp_file().read_bytes() == broken


def test_kirocrew_mcp_add_declares_a_server_like_the_route_and_refuses_like_it(kirocrew) -> None:
    done = kirocrew("mcp", "add", "notes", "--command", "/bin/cat", "--arg", "-u", "--env", "A=b=c")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["results"][0]["actions"] == {"kirocrew": "added"}
    assert servers(home.crew_mcp_file())["notes"] == {"command": "/bin/cat", "args": ["-u"], "env": {"A": "b=c"}}
    before = files()
    taken = kirocrew("mcp", "add", "notes", "--url", "https://x.example/mcp")
    assert taken.returncode == 1 and "server_exists" in taken.stderr
    insecure = kirocrew("mcp", "add", "web", "--url", "http://x.example/mcp", "--scope", "kiro")
    assert insecure.returncode == 2 and "insecure_url" in insecure.stderr
    assert files() == before
