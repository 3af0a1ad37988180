"""POST /api/connections/test: a promptless kiro-cli session (the fake) classifies a connection."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import home
from kirocrew_testing.mcp_fixtures import stdio_server_argv
from kirocrew_connections import liveness
from kirocrew_connections.liveness import classify

WAIT_SECS = 30.0


@pytest.fixture(autouse=True)
def _plugins(connections_plugins: Any) -> Any:
    return connections_plugins


def stdio_entry(*options: str, **extra: Any) -> dict[str, Any]:
    argv = stdio_server_argv(*options)
    return {"command": argv[0], "args": argv[1:], **extra}


def render_agent(servers: dict[str, Any], tools: list[str] | None = None) -> Path:
    """The rendered kirocrew agent, as the rebuild would leave it (tools ["*"] mounts every server)."""
    path = home.rendered_agent_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    agent = {"name": "kirocrew", "tools": tools if tools is not None else ["*"], "includeMcpJson": False,
             "mcpServers": servers}
    path.write_text(json.dumps(agent))
    return path


def run_test(client: Any, slug: str = "notion") -> dict[str, Any]:
    response = client.post("/api/connections/test", json={"slug": slug})
    assert response.status_code == 200, response.text
    return response.json()


# -- through the gateway and the fake kiro-cli ------------------------------------------------


def test_a_running_server_whose_tools_the_agent_mounts_is_usable(fake_kiro_cli: Any, gateway_client: Any) -> None:
    render_agent({"notion": stdio_entry("--tools", "3", "--label", "notion")})
    assert run_test(gateway_client) == {
        "schema_version": 1, "slug": "notion", "verdict": "usable", "code": "tools_available", "toolCount": 3,
    }


def test_the_slug_is_trimmed_and_lowercased(fake_kiro_cli: Any, gateway_client: Any) -> None:
    render_agent({"notion": stdio_entry("--tools", "1")})
    answer = run_test(gateway_client, "  Notion ")
    assert (answer["slug"], answer["verdict"], answer["toolCount"]) == ("notion", "usable", 1)


def test_a_server_the_agent_does_not_mount_exposes_no_tools(fake_kiro_cli: Any, gateway_client: Any) -> None:
    render_agent({"notion": stdio_entry("--tools", "2")}, tools=["read"])
    answer = run_test(gateway_client)
    assert (answer["verdict"], answer["code"], answer["toolCount"]) == ("no_tools", "no_tools_exposed", 0)


def test_a_server_with_no_tools_is_no_tools_not_usable(fake_kiro_cli: Any, gateway_client: Any) -> None:
    render_agent({"notion": stdio_entry("--tools", "0")})
    answer = run_test(gateway_client)
    assert (answer["verdict"], answer["code"], answer["toolCount"]) == ("no_tools", "no_tools_exposed", 0)


def test_a_disabled_entry_fails_with_its_own_code(fake_kiro_cli: Any, gateway_client: Any) -> None:
    render_agent({"notion": stdio_entry("--tools", "2", disabled=True)})
    answer = run_test(gateway_client)
    assert (answer["verdict"], answer["code"], answer["toolCount"]) == ("failed", "mcp_server_disabled", 0)


def test_a_server_that_dies_in_the_handshake_fails(fake_kiro_cli: Any, gateway_client: Any) -> None:
    render_agent({"notion": stdio_entry("--exit-during-handshake")})
    answer = run_test(gateway_client)
    assert (answer["verdict"], answer["code"]) == ("failed", "mcp_server_failed")


def test_a_provider_the_agent_does_not_configure_is_not_loaded(fake_kiro_cli: Any, gateway_client: Any) -> None:
    render_agent({"linear": stdio_entry("--tools", "2")})
    answer = run_test(gateway_client)
    assert (answer["verdict"], answer["code"]) == ("failed", "mcp_server_not_loaded")


def test_without_the_rendered_agent_nothing_is_judged_on_the_default_agent(
    fake_kiro_cli: Any, gateway_client: Any
) -> None:
    # The Kiro global holds a notion server the default agent would load and call usable.
    mcp = home.kiro_global_mcp_file()
    mcp.parent.mkdir(parents=True, exist_ok=True)
    mcp.write_text(json.dumps({"mcpServers": {"notion": stdio_entry("--tools", "2")}}))
    answer = run_test(gateway_client)
    assert (answer["verdict"], answer["code"]) == ("failed", "agent_not_rendered")


def test_a_missing_kiro_cli_is_a_failed_verdict_not_an_error(
    gateway_client: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KIRO_CLI_PATH", str(tmp_path / "no-such-kiro-cli"))
    render_agent({"notion": stdio_entry("--tools", "2")})
    answer = run_test(gateway_client)
    assert (answer["verdict"], answer["code"], answer["toolCount"]) == ("failed", "kiro_cli_not_installed", 0)


def test_a_wedged_kiro_cli_is_a_timeout_verdict(fake_kiro_cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    fake_kiro_cli.switch(silent="1")
    render_agent({"notion": stdio_entry("--tools", "2")})
    verdict = asyncio.run(liveness.run_connection_test("notion", timeout=2.0))
    assert (verdict.verdict, verdict.code) == ("failed", "connection_test_timeout")


@pytest.mark.parametrize(("body", "code"), [(b"not json", "bad_json"), (b"[]", "bad_json"), (b'"notion"', "bad_json"),
                                            (b"{}", "unknown_provider"), (b'{"slug": 7}', "unknown_provider")])
def test_a_body_that_is_not_a_slug_object_is_refused(gateway_client: Any, body: bytes, code: str) -> None:
    response = gateway_client.post("/api/connections/test", content=body,
                                   headers={"Content-Type": "application/json"})
    assert (response.status_code, response.json()["code"]) == (400, code)


@pytest.mark.parametrize("slug", ["", "../../etc/passwd", "x" * 65, "no-such-provider"])
def test_anything_that_is_not_a_shipped_provider_is_refused(gateway_client: Any, slug: str) -> None:
    response = gateway_client.post("/api/connections/test", json={"slug": slug})
    assert response.status_code == 400
    assert response.json()["code"] == "unknown_provider"


def test_an_oversized_body_is_refused(gateway_client: Any) -> None:
    body = json.dumps({"slug": "notion", "pad": "x" * (64 * 1024)}).encode()
    response = gateway_client.post("/api/connections/test", content=body,
                                   headers={"Content-Type": "application/json"})
    assert (response.status_code, response.json()["code"]) == (400, "body_too_large")


def test_a_second_test_while_one_runs_is_refused_with_the_running_slug(
    fake_kiro_cli: Any, gateway_client: Any, tmp_path: Path
) -> None:
    # A server that answers nothing keeps the first Test inside /mcp until it exits (released once the
    # second Test was refused) or, should the release never come, until the entry's timeout.
    release = tmp_path / "release-the-hang"
    render_agent({"notion": stdio_entry("--hang", "--until", str(release), timeout=8000)})
    sessions = home.kiro_sessions_dir()
    first: dict[str, Any] = {}

    def run_first() -> None:
        first["response"] = gateway_client.post("/api/connections/test", json={"slug": "notion"})

    thread = threading.Thread(target=run_first)
    thread.start()
    try:
        deadline = time.monotonic() + WAIT_SECS
        while not (sessions.is_dir() and any(sessions.glob("*.lock"))):
            assert time.monotonic() < deadline, "the first Test never opened its session"
            time.sleep(0.05)
        second = gateway_client.post("/api/connections/test", json={"slug": "linear"})
    finally:
        release.touch()
        thread.join(WAIT_SECS * 2)
    assert second.status_code == 409
    assert second.json()["code"] == "test_in_flight"
    assert second.json()["slug"] == "notion"
    assert first["response"].status_code == 200
    assert first["response"].json()["verdict"] == "failed"
    # The slot is released once the first answers.
    render_agent({"notion": stdio_entry("--tools", "1")})
    assert run_test(gateway_client, "notion")["verdict"] == "usable"


_forbidden_dirs: list[Path] = []


def _refuse_oauth_cache_opens(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _forbidden_dirs and args and isinstance(args[0], (str, bytes, Path)):
        target = Path(args[0].decode() if isinstance(args[0], bytes) else args[0])
        if any(target.is_relative_to(d) for d in _forbidden_dirs):
            raise PermissionError(f"the Test action opened {target}")


sys.addaudithook(_refuse_oauth_cache_opens)


def test_the_test_action_never_opens_a_grant_artifact(fake_kiro_cli: Any, gateway_client: Any) -> None:
    from kirocrew_core.grants import artifact_paths

    for path in artifact_paths("https://mcp.notion.com/mcp"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    render_agent({"notion": stdio_entry("--tools", "2")})
    _forbidden_dirs.append(home.oauth_cache_dir())
    try:
        answer = run_test(gateway_client)
    finally:
        _forbidden_dirs.clear()
    assert answer["verdict"] == "usable"


def test_importing_the_test_handlers_does_not_import_the_mint_engine(imports_mint_engine: Any) -> None:
    assert imports_mint_engine("kirocrew_connections.liveness_api", "kirocrew_connections.liveness") is False


# -- the classifier the mint shares ------------------------------------------------------------


def mcp(*rows: dict[str, Any]) -> dict[str, Any]:
    return {"servers": list(rows)}


def tools(*rows: tuple[str, str]) -> dict[str, Any]:
    return {"tools": [{"name": n, "description": "", "source": s} for n, s in rows]}


RUNNING = {"name": "notion", "status": "running", "toolCount": 2}


@pytest.mark.parametrize(("status", "code"), [
    ("loading", "mcp_server_loading"), ("failed", "mcp_server_failed"),
    ("disabled", "mcp_server_disabled"), ("missing", "mcp_server_unavailable"), (None, "mcp_server_unavailable"),
])
def test_a_server_that_is_not_running_is_a_failure_never_an_empty_tool_set(status: Any, code: str) -> None:
    verdict = classify([mcp({**RUNNING, "status": status}), tools(("a", "mcp:notion"))], "notion")
    assert (verdict.verdict, verdict.code, verdict.tool_count) == ("failed", code, 0)


@pytest.mark.parametrize("results", [
    [], [mcp(RUNNING)], [mcp(RUNNING), tools(), tools()], [{"servers": {}}, tools()], ["x", tools()],
    [mcp({**RUNNING, "toolCount": True}), tools(("a", "mcp:notion"))],
    [mcp({**RUNNING, "toolCount": -1}), tools(("a", "mcp:notion"))],
    [mcp({**RUNNING, "toolCount": "2"}), tools(("a", "mcp:notion"))],
    [mcp(RUNNING), {"tools": "a"}], [mcp(RUNNING), None],
])
def test_a_malformed_inventory_is_invalid_tool_inventory(results: list[Any]) -> None:
    assert classify(results, "notion").code == "invalid_tool_inventory"


def test_only_tools_sourced_from_the_providers_server_count_once_each() -> None:
    inventory = tools(("a", "mcp:notion"), ("a", "mcp:notion"), ("b", "mcp:notion"), ("", "mcp:notion"),
                      ("c", "mcp:notion-copy"), ("read", "built-in"))
    verdict = classify([mcp(RUNNING), inventory], "notion")
    assert (verdict.verdict, verdict.code, verdict.tool_count) == ("usable", "tools_available", 2)


def test_a_listing_server_whose_tools_are_not_exposed_is_no_tools() -> None:
    verdict = classify([mcp(RUNNING), tools(("read", "built-in"))], "notion")
    assert verdict.as_dict() == {"verdict": "no_tools", "code": "no_tools_exposed", "toolCount": 0}


# -- a grant the provider refuses ------------------------------------------------------------------


def test_a_grant_revoked_at_the_provider_is_reported_refused_and_the_card_offers_reconnect(
        fake_kiro_cli: Any, oauth_mcp_server: Any, gateway_client: Any, poll_mint: Any) -> None:
    from urllib.parse import urlsplit

    from kirocrew_core.origin_overrides import OriginOverrides, activate

    from kirocrew_connections import mint

    served = urlsplit(oauth_mcp_server.mcp_url)
    fixture = f"{served.scheme}://{served.netloc}"  # Notion's MCP origin and its consent page, both on the fixture
    activate(OriginOverrides({"https://mcp.notion.com": fixture}))
    try:
        assert gateway_client.post("/api/connections/install", json={"slug": "notion"}).status_code == 200
        assert gateway_client.post("/api/connections/mint", json={"slug": "notion"}).status_code == 200
        waiting = poll_mint(gateway_client, "notion", {"waiting", "failed", "expired"})
        assert waiting["state"] == "waiting", waiting
        oauth_mcp_server.consent(waiting["oauth_url"])
        assert poll_mint(gateway_client, "notion", {"granted", "failed", "expired"})["state"] == "granted"
        assert run_test(gateway_client)["verdict"] == "usable"

        oauth_mcp_server.revoke_all()  # revoked at the provider; the pair is still on this disk
        assert run_test(gateway_client) == {
            "schema_version": 1, "slug": "notion", "verdict": "failed", "code": "grant_refused", "toolCount": 0,
        }
        html = gateway_client.get("/connections").text
    finally:
        activate(OriginOverrides())
        gateway_client.portal.call(mint.mint_engine().aclose)
    card = html[html.index('id="connection-notion"'):]
    card = card[:card.index("</article>")]
    assert 'data-state="needs-attention"' in card, "not left silently at Not verified"
    assert "Notion refused the stored authorization when it was tested." in card
    assert 'data-label="Reconnect"' in card


def test_a_consent_asked_for_where_no_grant_was_held_is_not_authorized_rather_than_refused(
        fake_kiro_cli: Any, oauth_mcp_server: Any, gateway_client: Any) -> None:
    render_agent({"notion": {"url": oauth_mcp_server.mcp_url}})
    answer = run_test(gateway_client)
    assert (answer["verdict"], answer["code"]) == ("failed", "not_authorized")
