"""L1: the tokenless smoke, against a real provider-shaped server on 127.0.0.1.

Test providers come through the ``registry_loaders()`` hook with https URLs on
``.test`` names (the registry refuses anything else); ``--override-origin`` routes
them to the loopback fixture server, so nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import builtins
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from click.testing import CliRunner, Result

from kirocrew_core import grants, home

from kirocrew_connections import gate_report
from kirocrew_connections.endpoint_smoke import l1_command

SMOKE_TOOL = "list_things"


def provider_entry(slug: str, mcp_url: str, *, tool: str = SMOKE_TOOL) -> dict[str, Any]:
    return {
        "slug": slug, "name": slug.title(), "tier": 2, "category": "developer-tools", "mcp_url": mcp_url,
        "recommended_scopes": ["read"], "revoke_page_url": "https://example.test/revoke",
        "docs_url": "https://example.test/docs", "gotcha_copy": "A fixture provider.",
        "smoke_fixture": {"tool": tool, "args": {}},
        "l0_expectations": {"authorization_server": "https://auth.example.test", "dcr": True, "pkce": True,
                            "verified_on": "2026-01-01"},
        "approval_hosts": ["auth.example.test"], "launch_gate_passed": False, "vendor_approval_pending": False,
        "revoke_verified_on": "2026-01-01", "revoke_verified_note": "fixture",
    }


@pytest.fixture
def serve(probe_server: Callable[[dict[str, Any]], str]) -> Callable[[dict[str, Any]], str]:
    """``serve(config)`` starts the fixture server; every one is stopped after the test."""
    return probe_server


def seen(base: str) -> dict[str, Any]:
    return httpx.get(f"{base}/_requests", timeout=10).json()


def configure(name: str, url: str, **extra: Any) -> None:
    """An entry in the crew MCP scope (``<crew home>/mcp.json``)."""
    path = home.crew_mcp_file()
    document = json.loads(path.read_text()) if path.exists() else {"mcpServers": {}}
    document["mcpServers"][name] = {"url": url, **extra}
    home.ensure_crew_home()
    path.write_text(json.dumps(document))


def hold_grant(url: str) -> tuple[Path, Path]:
    token, registration = grants.artifact_paths(url)
    token.parent.mkdir(parents=True, exist_ok=True)
    token.write_text('{"access_token": "never-read"}')
    registration.write_text('{"client_id": "never-read"}')
    return token, registration


def smoke(tmp_path: Path, *args: str) -> tuple[Result, dict[str, Any]]:
    report_path = tmp_path / "l1-report.json"
    result = CliRunner().invoke(l1_command, ["--report", str(report_path), "--timeout", "10", *args])
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    if report:
        jsonschema.validate(report, gate_report.schema(), cls=jsonschema.Draft202012Validator)
    return result, report


def one_provider(providers: list[dict[str, Any]], serve: Any, mcp: dict[str, Any], *, slug: str = "acme",
                 grant: bool = True, **entry: Any) -> tuple[str, str]:
    """A configured provider at https://<slug>.test/mcp served by a fixture; (base, override option)."""
    url = f"https://{slug}.test/mcp"
    providers.append(provider_entry(slug, url))
    base = serve({"mcp": {"/mcp": mcp}})
    configure(slug, url, **entry)
    if grant:
        hold_grant(url)
    return base, f"https://{slug}.test={base}"


def only_row(report: dict[str, Any]) -> dict[str, Any]:
    rows = [r for r in report["rows"] if r["slug"] in ("acme", "other", "third")]
    assert len(rows) == 1, rows
    return rows[0]


def rpc_methods(base: str) -> list[str | None]:
    return [r.get("rpc") for r in seen(base)["requests"]]


# -- verdicts ----------------------------------------------------------------------------


def test_a_tokenless_401_with_a_challenge_is_grant_held_and_counts_as_exercised(providers, serve, tmp_path):
    base, override = one_provider(providers, serve, {"mode": "challenge"})

    result, report = smoke(tmp_path, "--slug", "acme", "--override-origin", override, "--min-exercised", "1")

    row = only_row(report)
    assert (row["verdict"], row["depth"]) == ("GRANT_HELD", "challenge")
    assert row["grant_present"] is True and row["credential_presented"] is False
    assert report["ok"] is True and report["exercised_count"] == 1 and report["verdict_counts"]["GRANT_HELD"] == 1
    assert result.exit_code == 0, result.output
    assert rpc_methods(base) == ["initialize"]


def test_a_tokenless_403_without_a_challenge_is_fail(providers, serve, tmp_path):
    _, override = one_provider(providers, serve, {"mode": "forbidden"})

    result, report = smoke(tmp_path, "--slug", "acme", "--override-origin", override)

    row = only_row(report)
    assert row["verdict"] == "FAIL"
    assert "403" in row["errors"][0]
    assert report["ok"] is False and result.exit_code == 1


def test_a_tokenless_401_without_a_challenge_is_fail(providers, serve, tmp_path):
    _, override = one_provider(providers, serve, {"mode": "plain401"})

    _, report = smoke(tmp_path, "--slug", "acme", "--override-origin", override)

    assert only_row(report)["verdict"] == "FAIL"


def test_a_refused_presented_credential_is_needs_reconsent_and_never_reported(providers, serve, tmp_path):
    base, override = one_provider(providers, serve, {"mode": "token", "token": "fresh-value"},
                                  headers={"Authorization": "Bearer stale-secret-value"})

    result, report = smoke(tmp_path, "--slug", "acme", "--override-origin", override)

    row = only_row(report)
    assert (row["verdict"], row["credential_presented"]) == ("NEEDS_RECONSENT", True)
    assert report["verdict_counts"]["NEEDS_RECONSENT"] == 1 and result.exit_code == 1
    assert "stale-secret-value" not in json.dumps(report) + result.output
    assert seen(base)["requests"][0]["authorization"] is True


def test_a_jsonrpc_invalid_token_error_is_needs_reconsent(providers, serve, tmp_path):
    _, override = one_provider(providers, serve, {"mode": "rpc_error"})

    _, report = smoke(tmp_path, "--slug", "acme", "--override-origin", override)

    row = only_row(report)
    assert row["verdict"] == "NEEDS_RECONSENT"
    assert "invalid_token" in row["errors"][0]


def test_a_redirected_endpoint_is_fail_and_the_redirect_is_not_followed(providers, serve, tmp_path):
    base, override = one_provider(providers, serve, {"mode": "redirect"})

    _, report = smoke(tmp_path, "--slug", "acme", "--override-origin", override)

    row = only_row(report)
    assert row["verdict"] == "FAIL" and "redirect" in row["errors"][0]
    assert [r["path"] for r in seen(base)["requests"]] == ["/mcp"]


@pytest.mark.parametrize("mode", ["open", "sse"])
def test_pass_lists_tools_and_never_calls_one(providers, serve, tmp_path, mode):
    base, override = one_provider(providers, serve, {"mode": mode, "tools": ["other", SMOKE_TOOL]})

    result, report = smoke(tmp_path, "--slug", "acme", "--override-origin", override, "--min-exercised", "1")

    row = only_row(report)
    assert (row["verdict"], row["depth"]) == ("PASS", "tools_list"), row
    assert row["fixture_tool_advertised"] is True and row["tools_listed"] == 2
    assert result.exit_code == 0
    assert rpc_methods(base) == ["initialize", "notifications/initialized", "tools/list"]


def test_an_accepted_configured_credential_passes(providers, serve, tmp_path):
    _, override = one_provider(providers, serve, {"mode": "token", "token": "fresh-value", "tools": [SMOKE_TOOL]},
                               headers={"Authorization": "Bearer fresh-value"})

    _, report = smoke(tmp_path, "--slug", "acme", "--override-origin", override)

    row = only_row(report)
    assert (row["verdict"], row["credential_presented"]) == ("PASS", True)


def test_a_fixture_tool_no_longer_advertised_is_fail(providers, serve, tmp_path):
    _, override = one_provider(providers, serve, {"mode": "open", "tools": ["renamed_tool"]})

    _, report = smoke(tmp_path, "--slug", "acme", "--override-origin", override)

    row = only_row(report)
    assert (row["verdict"], row["depth"], row["fixture_tool_advertised"]) == ("FAIL", "tools_list", False)


def test_a_server_slower_than_the_timeout_is_fail(providers, serve, tmp_path):
    _, override = one_provider(providers, serve, {"mode": "slow", "delay": 5, "tools": [SMOKE_TOOL]})

    _, report = smoke(tmp_path, "--slug", "acme", "--override-origin", override, "--timeout", "0.3")

    row = only_row(report)
    assert row["verdict"] == "FAIL" and "timed out" in row["errors"][0]


# -- what is skipped ------------------------------------------------------------------------


def test_no_grant_is_skipped_without_touching_the_network(providers, serve, tmp_path):
    base, override = one_provider(providers, serve, {"mode": "challenge"}, grant=False)

    _, report = smoke(tmp_path, "--slug", "acme", "--override-origin", override)

    row = only_row(report)
    assert (row["verdict"], row["installed"], row["grant_present"]) == ("SKIPPED", True, False)
    assert seen(base)["requests"] == []


def test_an_entry_under_the_slug_but_another_endpoint_is_never_smoked(providers, serve, tmp_path):
    providers.append(provider_entry("acme", "https://acme.test/mcp"))
    base = serve({"mcp": {"/mcp": {"mode": "challenge"}}})
    configure("acme", "https://elsewhere.test/mcp")
    hold_grant("https://elsewhere.test/mcp")

    _, report = smoke(tmp_path, "--slug", "acme", "--override-origin", f"https://acme.test={base}",
                      "--override-origin", f"https://elsewhere.test={base}")

    row = only_row(report)
    assert (row["verdict"], row["installed"]) == ("SKIPPED", True)
    assert seen(base)["requests"] == []


def test_an_entry_installed_under_serve_override_origin_is_smoked_under_the_same_override(
        providers, serve, tmp_path):
    providers.append(provider_entry("acme", "https://acme.test/mcp"))
    base = serve({"mcp": {"/mcp": {"mode": "challenge"}}})
    routed = f"{base}/mcp"  # what Connect installs (and kiro-cli keys the grant on) under serve --override-origin
    configure("acme", routed)
    hold_grant(routed)

    _, report = smoke(tmp_path, "--slug", "acme", "--override-origin", f"https://acme.test={base}",
                      "--min-exercised", "1")

    row = only_row(report)
    assert (row["verdict"], row["depth"], row["grant_present"]) == ("GRANT_HELD", "challenge", True)
    assert "initialize" in rpc_methods(base)


def test_a_routed_entry_without_the_override_is_not_the_provider(providers, serve, tmp_path):
    providers.append(provider_entry("acme", "https://acme.test/mcp"))
    base = serve({"mcp": {"/mcp": {"mode": "challenge"}}})
    configure("acme", f"{base}/mcp")
    hold_grant(f"{base}/mcp")

    _, report = smoke(tmp_path, "--slug", "acme")

    assert only_row(report)["verdict"] == "SKIPPED"
    assert seen(base)["requests"] == []


def test_a_trailing_slash_variant_of_the_endpoint_is_still_the_provider(providers, serve, tmp_path):
    providers.append(provider_entry("acme", "https://acme.test/mcp"))
    base = serve({"mcp": {"/mcp/": {"mode": "challenge"}}})
    configure("acme", "https://acme.test/mcp/")
    hold_grant("https://acme.test/mcp/")

    _, report = smoke(tmp_path, "--slug", "acme", "--override-origin", f"https://acme.test={base}")

    assert only_row(report)["verdict"] == "GRANT_HELD"


def test_a_disabled_entry_is_skipped(providers, serve, tmp_path):
    base, override = one_provider(providers, serve, {"mode": "challenge"}, disabled=True)

    _, report = smoke(tmp_path, "--slug", "acme", "--override-origin", override)

    assert only_row(report)["verdict"] == "SKIPPED"
    assert seen(base)["requests"] == []


def test_a_malformed_scope_file_is_reported_rather_than_read_as_empty(providers, tmp_path):
    providers.append(provider_entry("acme", "https://acme.test/mcp"))
    home.ensure_crew_home()
    home.crew_mcp_file().write_text("{broken")

    result, report = smoke(tmp_path, "--slug", "acme")

    assert only_row(report)["verdict"] == "SKIPPED"
    assert any(str(home.crew_mcp_file()) in problem for problem in report["unusable_sources"])
    assert home.crew_mcp_file().read_text() == "{broken"


def test_an_all_skipped_run_is_vacuous_when_a_minimum_was_required(providers, tmp_path):
    providers.append(provider_entry("acme", "https://acme.test/mcp"))

    result, report = smoke(tmp_path, "--slug", "acme", "--min-exercised", "1")

    assert (report["vacuous"], report["ok"], report["exercised_count"]) == (True, False, 0)
    assert result.exit_code == 3 and report["runbook"] == ["vacuous"]
    assert "vacuous" in result.output


def test_an_all_skipped_run_without_a_minimum_is_ok(providers, tmp_path):
    providers.append(provider_entry("acme", "https://acme.test/mcp"))

    result, report = smoke(tmp_path, "--slug", "acme")

    assert (report["vacuous"], report["ok"], report["verdict_counts"]["SKIPPED"]) == (False, True, 1)
    assert result.exit_code == 0


def test_a_negative_minimum_is_rejected(providers, tmp_path):
    result, report = smoke(tmp_path, "--min-exercised", "-1")

    assert result.exit_code == 2
    assert report == {}


def test_an_unknown_slug_is_rejected_and_no_report_is_written(providers, tmp_path):
    result, report = smoke(tmp_path, "--slug", "no-such-provider")

    assert getattr(result.exception, "code", None) == "unknown_provider"
    assert report == {}


# -- concurrency, custody ----------------------------------------------------------------------


def test_the_sweep_never_has_more_providers_in_flight_than_the_concurrency(providers, serve, tmp_path):
    base = serve({"mcp": {"/mcp": {"mode": "slow", "delay": 0.3, "tools": [SMOKE_TOOL]}}})
    overrides = []
    for slug in ("acme", "other", "third"):
        url = f"https://{slug}.test/mcp"
        providers.append(provider_entry(slug, url))
        configure(slug, url)
        hold_grant(url)
        overrides += ["--override-origin", f"https://{slug}.test={base}"]

    _, report = smoke(tmp_path, "--concurrency", "1", *overrides)

    assert report["verdict_counts"]["PASS"] == 3
    assert seen(base)["max_in_flight"] == 1


def test_a_full_pass_run_never_opens_the_grant_artifacts(providers, serve, tmp_path, monkeypatch):
    _, override = one_provider(providers, serve, {"mode": "open", "tools": [SMOKE_TOOL]})
    artifacts = {str(p) for p in grants.artifact_paths("https://acme.test/mcp")}
    opened: list[str] = []

    def guarded(real: Any) -> Any:
        def open_guard(file: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(file, (str, os.PathLike)) and os.fspath(file) in artifacts:
                opened.append(os.fspath(file))
                raise PermissionError("a grant artifact must never be opened")
            return real(file, *args, **kwargs)
        return open_guard

    monkeypatch.setattr(builtins, "open", guarded(builtins.open))
    monkeypatch.setattr(io, "open", guarded(io.open))
    monkeypatch.setattr(os, "open", guarded(os.open))

    _, report = smoke(tmp_path, "--slug", "acme", "--override-origin", override)

    assert only_row(report)["verdict"] == "PASS"
    assert opened == []


def test_python_m_l1_runs_the_real_registry_and_skips_what_is_not_configured(tmp_path):
    report_path = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "kirocrew_connections.endpoint_smoke", "--report", str(report_path),
                           "--min-exercised", "1"], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ))

    report = json.loads(report_path.read_text())
    assert done.returncode == 3, done.stderr
    assert len(report["rows"]) >= 29 and report["verdict_counts"]["SKIPPED"] == len(report["rows"])
    assert report["vacuous"] is True
