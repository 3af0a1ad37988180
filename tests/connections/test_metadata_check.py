"""L0: public OAuth metadata checked against committed expectations, on a real loopback server.

The test provider (registered through ``registry_loaders()``) names https URLs on
``.test`` hosts, as the registry demands; ``--override-origin`` routes them to the
fixture server on 127.0.0.1, so nothing leaves the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from click.testing import CliRunner, Result


from kirocrew_connections import gate_report
from kirocrew_connections.metadata_check import l0_command

MCP_URL = "https://acme.test/mcp"
ISSUER = "https://auth.acme.test/tenant"
APPROVAL_HOST = "auth.acme.test"
PRM_PATH = "/.well-known/oauth-protected-resource/mcp"
PRM_ROOT = "/.well-known/oauth-protected-resource"
AS_PATH = "/.well-known/oauth-authorization-server/tenant"
CHECKS = ["protected_resource_metadata", "authorization_server_metadata", "dcr_expectation", "pkce_expectation"]


def today() -> datetime:
    return datetime.now(UTC)


def provider_entry(*, issuer: str = ISSUER, dcr: bool = True, pkce: bool = True, age_days: int = 1) -> dict[str, Any]:
    verified = (today() - timedelta(days=age_days)).date().isoformat()
    return {
        "slug": "acme", "name": "Acme", "tier": 2, "category": "developer-tools", "mcp_url": MCP_URL,
        "recommended_scopes": ["read"], "revoke_page_url": "https://example.test/revoke",
        "docs_url": "https://example.test/docs", "gotcha_copy": "A fixture provider.",
        "smoke_fixture": {"tool": "list_things", "args": {}},
        "l0_expectations": {"authorization_server": issuer, "dcr": dcr, "pkce": pkce, "verified_on": verified},
        "approval_hosts": [APPROVAL_HOST], "launch_gate_passed": False, "vendor_approval_pending": False,
        "revoke_verified_on": verified, "revoke_verified_note": "fixture",
    }


def prm(resource: Any = MCP_URL, issuer: str = ISSUER) -> dict[str, Any]:
    return {"json": {"resource": resource, "authorization_servers": [issuer]}}


def as_metadata(issuer: str = ISSUER, **fields: Any) -> dict[str, Any]:
    document = {"issuer": issuer, "authorization_endpoint": "https://auth.acme.test/tenant/authorize",
                "token_endpoint": "https://auth.acme.test/tenant/token",
                "registration_endpoint": "https://auth.acme.test/tenant/register",
                "code_challenge_methods_supported": ["S256"]}
    document.update(fields)
    return {"json": {k: v for k, v in document.items() if v is not None}}


@pytest.fixture
def serve(probe_server: Callable[[dict[str, Any]], str]) -> Callable[[dict[str, Any]], str]:
    """``serve(documents)``: a fixture server answering with these metadata documents."""
    return lambda documents: probe_server({"documents": documents})


def probe(tmp_path: Path, base: str, *args: str) -> tuple[Result, dict[str, Any]]:
    report_path = tmp_path / "l0-report.json"
    result = CliRunner().invoke(l0_command, [
        "--report", str(report_path), "--slug", "acme", "--timeout", "10",
        "--override-origin", f"https://acme.test={base}", "--override-origin", f"https://auth.acme.test={base}",
        *args])
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    if report:
        jsonschema.validate(report, gate_report.schema(), cls=jsonschema.Draft202012Validator)
    return result, report


def checks(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    [row] = report["rows"]
    return {c["name"]: c for c in row["checks"]}


def failing(report: dict[str, Any]) -> list[str]:
    return [name for name, c in checks(report).items() if not c["ok"]]


def requests_seen(base: str) -> list[dict[str, Any]]:
    return httpx.get(f"{base}/_requests", timeout=10).json()["requests"]


# -- strict mode ------------------------------------------------------------------------------


def test_metadata_matching_the_expectations_passes_every_check(providers, serve, tmp_path):
    providers.append(provider_entry())
    base = serve({PRM_PATH: prm(), AS_PATH: as_metadata()})

    result, report = probe(tmp_path, base)

    assert result.exit_code == 0, result.output
    assert (report["schema_version"], report["scope"], report["gate"], report["ok"]) == (4, "static-metadata",
                                                                                       "immediate", True)
    assert list(checks(report)) == CHECKS and failing(report) == []
    assert report["rows"][0]["observed"] == {"authorization_server": ISSUER, "dcr": True, "pkce": True}
    assert checks(report)["pkce_expectation"]["observed"]["pkce"] is True
    assert report["origin_overrides"]["https://acme.test"] == base
    seen = requests_seen(base)
    assert {r["method"] for r in seen} == {"GET"}
    assert {r["accept_encoding"] for r in seen} == {"identity"}


def test_the_protected_resource_metadata_falls_back_to_the_origin_root(providers, serve, tmp_path):
    providers.append(provider_entry())
    base = serve({PRM_ROOT: prm(), AS_PATH: as_metadata()})

    result, report = probe(tmp_path, base)

    assert failing(report) == [] and result.exit_code == 0
    assert [r["path"] for r in requests_seen(base)][:2] == [PRM_PATH, PRM_ROOT]


def test_a_resource_array_covering_the_mcp_origin_is_accepted(providers, serve, tmp_path):
    providers.append(provider_entry())
    base = serve({PRM_PATH: prm(resource=["https://other.test", "https://acme.test"]), AS_PATH: as_metadata()})

    _, report = probe(tmp_path, base)

    assert failing(report) == []


def test_a_resource_for_another_origin_fails(providers, serve, tmp_path):
    providers.append(provider_entry())
    base = serve({PRM_PATH: prm(resource="https://other.test/mcp"), AS_PATH: as_metadata()})

    result, report = probe(tmp_path, base)

    assert failing(report) == ["protected_resource_metadata"]
    assert result.exit_code == 1 and report["verdict_counts"]["FAIL"] == 1


def test_an_advertised_issuer_other_than_the_committed_one_fails_strict_mode(providers, serve, tmp_path):
    providers.append(provider_entry())
    base = serve({PRM_PATH: prm(issuer="https://login.acme.test"), AS_PATH: as_metadata()})

    result, report = probe(tmp_path, base)

    assert failing(report) == ["protected_resource_metadata"]
    assert report["rows"][0]["observed"]["authorization_server"] == "https://login.acme.test"
    assert result.exit_code == 1
    assert AS_PATH in [r["path"] for r in requests_seen(base)]  # the committed issuer, not the advertised one


def test_an_issuer_path_with_a_trailing_slash_is_fetched_without_it_and_compared_exactly(providers, serve,
                                                                                          tmp_path):
    providers.append(provider_entry(issuer=ISSUER + "/"))
    base = serve({PRM_PATH: prm(issuer=ISSUER + "/"), AS_PATH: as_metadata(issuer=ISSUER + "/")})

    _, report = probe(tmp_path, base)

    assert failing(report) == []
    assert AS_PATH in [r["path"] for r in requests_seen(base)]


def test_a_trailing_slash_disagreement_between_issuers_fails(providers, serve, tmp_path):
    providers.append(provider_entry())
    base = serve({PRM_PATH: prm(), AS_PATH: as_metadata(issuer=ISSUER + "/")})

    _, report = probe(tmp_path, base)

    assert "authorization_server_metadata" in failing(report)


def test_a_dcr_or_pkce_difference_fails_its_expectation(providers, serve, tmp_path):
    providers.append(provider_entry())
    base = serve({PRM_PATH: prm(), AS_PATH: as_metadata(registration_endpoint=None,
                                                          code_challenge_methods_supported=["plain"])})

    _, report = probe(tmp_path, base)

    assert failing(report) == ["dcr_expectation", "pkce_expectation"]
    assert report["rows"][0]["observed"] == {"authorization_server": ISSUER, "dcr": False, "pkce": False}


def test_an_authorization_endpoint_that_is_not_public_https_fails(providers, serve, tmp_path):
    providers.append(provider_entry())
    base = serve({PRM_PATH: prm(), AS_PATH: as_metadata(authorization_endpoint="https://127.0.0.1/authorize",
                                                          token_endpoint="http://auth.acme.test/token")})

    _, report = probe(tmp_path, base)

    error = checks(report)["authorization_server_metadata"]["error"]
    assert "authorization_endpoint and token_endpoint" in error


def test_a_redirect_is_never_followed(providers, serve, tmp_path):
    providers.append(provider_entry())
    base = serve({PRM_PATH: {"status": 302, "headers": {"Location": "{base}/moved"}, "json": {}},
                  "/moved": prm(), AS_PATH: as_metadata()})

    _, report = probe(tmp_path, base)

    assert "redirect" in checks(report)["protected_resource_metadata"]["error"]
    assert "/moved" not in [r["path"] for r in requests_seen(base)]


def test_a_compressed_response_is_refused(providers, serve, tmp_path):
    providers.append(provider_entry())
    base = serve({PRM_PATH: prm(), AS_PATH: {**as_metadata(), "headers": {"Content-Encoding": "gzip"}}})

    _, report = probe(tmp_path, base)

    assert "compressed" in checks(report)["authorization_server_metadata"]["error"]


def test_a_document_larger_than_16_kib_is_refused(providers, serve, tmp_path):
    providers.append(provider_entry())
    padded = json.dumps({**as_metadata()["json"], "padding": "x" * 20_000})
    base = serve({PRM_PATH: prm(), AS_PATH: {"body": padded}})

    _, report = probe(tmp_path, base)

    assert "larger than" in checks(report)["authorization_server_metadata"]["error"]


def test_an_unreachable_provider_fails_every_check(providers, serve, tmp_path):
    providers.append(provider_entry())
    result, report = probe(tmp_path, "http://127.0.0.1:9")

    assert failing(report) == CHECKS and result.exit_code == 1


# -- record mode ------------------------------------------------------------------------------------


def test_record_mode_captures_dcr_and_pkce_and_stamps_today(providers, serve, tmp_path):
    providers.append(provider_entry(dcr=True, age_days=30))
    base = serve({PRM_PATH: prm(), AS_PATH: as_metadata(registration_endpoint=None)})
    baselines = tmp_path / "baselines.json"

    result, report = probe(tmp_path, base, "--record", "--baselines", str(baselines))

    assert result.exit_code == 0, result.output
    lines = baselines.read_text().splitlines()
    assert lines[0] == "[" and lines[-1] == "]" and len(lines) == 3
    [entry] = json.loads(baselines.read_text())
    assert entry == {"slug": "acme", "l0_expectations": {
        "authorization_server": ISSUER, "dcr": False, "pkce": True, "verified_on": today().date().isoformat()}}
    assert report["baselines"]["recorded"] == ["acme"]


def test_record_mode_never_moves_the_issuer_and_asks_for_approval(providers, serve, tmp_path):
    providers.append(provider_entry())
    base = serve({PRM_PATH: prm(issuer="https://login.acme.test"), AS_PATH: as_metadata()})
    baselines = tmp_path / "baselines.json"

    result, report = probe(tmp_path, base, "--record", "--baselines", str(baselines))

    [entry] = json.loads(baselines.read_text())
    assert entry["l0_expectations"]["authorization_server"] == ISSUER
    assert entry["needs_approval"] == {"advertised_authorization_server": "https://login.acme.test"}
    assert report["rows"][0]["needs_approval"] is True
    assert "NEEDS APPROVAL" in checks(report)["protected_resource_metadata"]["error"]
    assert result.exit_code == 1


# -- the drift gate and staleness ------------------------------------------------------------------------


def test_the_drift_gate_fails_only_after_consecutive_failures_and_a_pass_resets_it(providers, serve, tmp_path):
    providers.append(provider_entry())
    broken = serve({PRM_PATH: prm(), AS_PATH: as_metadata(code_challenge_methods_supported=[])})
    healthy = serve({PRM_PATH: prm(), AS_PATH: as_metadata()})
    state = tmp_path / "l0-state.json"

    first, report = probe(tmp_path, broken, "--state", str(state), "--drift-threshold", "2")
    assert (first.exit_code, report["gate"], report["drift"]["consecutive_failures"]) == (0, "drift", {"acme": 1})
    assert report["verdict_counts"]["DRIFTING"] == 1 and report["rows"][0]["runbook"] == "l0-drift"

    second, report = probe(tmp_path, broken, "--state", str(state), "--drift-threshold", "2")
    assert (second.exit_code, report["drift"]["tripped"]) == (1, ["acme"])

    third, report = probe(tmp_path, healthy, "--state", str(state), "--drift-threshold", "2")
    assert (third.exit_code, report["drift"]["consecutive_failures"]) == (0, {"acme": 0})


def test_a_missing_state_file_is_fatal_when_a_prior_run_is_expected(providers, serve, tmp_path):
    providers.append(provider_entry())
    base = serve({PRM_PATH: prm(), AS_PATH: as_metadata()})

    result, report = probe(tmp_path, base, "--state", str(tmp_path / "lost.json"), "--prior-run-expected")

    assert (report["gate"], report["ok"]) == ("fatal", False)
    assert "--prior-run-expected" in report["fatal_error"]["message"]
    assert report["exit_status"] == 2 and getattr(result.exception, "exit_code", None) == 2
    assert requests_seen(base) == []


def test_a_malformed_state_file_is_fatal_and_left_as_it_was(providers, serve, tmp_path):
    providers.append(provider_entry())
    base = serve({PRM_PATH: prm(), AS_PATH: as_metadata()})
    state = tmp_path / "state.json"
    state.write_text("{not json")

    _, report = probe(tmp_path, base, "--state", str(state))

    assert report["gate"] == "fatal"
    assert state.read_text() == "{not json"


def test_prior_run_expected_without_a_state_file_is_bad_input(providers, tmp_path):
    providers.append(provider_entry())

    result, report = probe(tmp_path, "http://127.0.0.1:9", "--prior-run-expected")

    assert getattr(result.exception, "exit_code", None) == 2 and report == {}


def test_a_stale_baseline_is_reported_and_fails_only_when_enforced(providers, serve, tmp_path):
    providers.append(provider_entry(age_days=61))
    base = serve({PRM_PATH: prm(), AS_PATH: as_metadata()})

    warned, report = probe(tmp_path, base)
    assert warned.exit_code == 0
    assert report["staleness"]["overdue"] == ["acme"] and report["staleness"]["enforced"] is False

    enforced, report = probe(tmp_path, base, "--fail-on-stale")
    assert enforced.exit_code == 1 and report["ok"] is False and failing(report) == []


def test_a_baseline_exactly_at_the_warn_window_is_not_stale(providers, serve, tmp_path):
    providers.append(provider_entry(age_days=60))
    base = serve({PRM_PATH: prm(), AS_PATH: as_metadata()})

    result, report = probe(tmp_path, base, "--fail-on-stale")

    assert report["staleness"]["overdue"] == [] and result.exit_code == 0


# -- the command line ------------------------------------------------------------------------------------------


def test_a_malformed_origin_override_is_a_usage_error(providers, tmp_path):
    result = CliRunner().invoke(l0_command, ["--report", str(tmp_path / "r.json"),
                                             "--override-origin", "https://acme.test/path=http://127.0.0.1:1"])

    assert result.exit_code == 2
    assert not (tmp_path / "r.json").exists()


def test_python_m_l0_reports_an_unknown_provider_as_bad_input(tmp_path):
    done = subprocess.run([sys.executable, "-m", "kirocrew_connections.metadata_check", "--slug", "no-such-provider",
                           "--report", str(tmp_path / "r.json")],
                          capture_output=True, text=True, timeout=60, env=dict(os.environ))

    assert done.returncode == 2
    assert "error[unknown_provider]" in done.stderr
    assert not (tmp_path / "r.json").exists()
