"""The launch gates as a lane: every exit status through the real ``kirocrew`` CLI, every report against the schema.

The subprocess gets its test providers from a real plugin distribution on
``PYTHONPATH`` (the ``registry_loaders()`` hook, as a third-party plugin would), the
provider's https ``.test`` URLs routed to the probe fixture server on 127.0.0.1
with ``--override-origin``; the isolated homes hold its MCP entries and grants.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from kirocrew_core import grants, home
from kirocrew_testing.distributions import make_plugin_distribution
from kirocrew_testing.fixtures import run_kirocrew

from kirocrew_connections import gate_report
from kirocrew_connections.endpoint_smoke import L1Row
from kirocrew_connections.endpoint_smoke import _row as l1_row

DOCS = Path(__file__).resolve().parents[2] / "docs" / "connections.md"
MCP_URL = "https://acme.test/mcp"
ISSUER = "https://auth.acme.test/tenant"
APPROVAL_HOST = "auth.acme.test"
SMOKE_TOOL = "list_things"
SECRET = "sk-live-gate-lane-0123456789abcdef"

PLUGIN = '''
import json

from kirocrew_core import hookimpl
from kirocrew_core.contributions import RegistryLoader

ENTRIES = json.loads({entries!r})


@hookimpl
def registry_loaders():
    return [RegistryLoader("connections.providers", lambda: ENTRIES, "the gate lane's fixture providers")]
'''


def provider_entry(*, age_days: int = 1, **changes: Any) -> dict[str, Any]:
    verified = (datetime.now(UTC) - timedelta(days=age_days)).date().isoformat()
    entry = {
        "slug": "acme", "name": "Acme", "tier": 2, "category": "developer-tools", "mcp_url": MCP_URL,
        "recommended_scopes": ["read"], "revoke_page_url": "https://example.test/revoke",
        "docs_url": "https://example.test/docs", "gotcha_copy": "A fixture provider.",
        "smoke_fixture": {"tool": SMOKE_TOOL, "args": {}},
        "l0_expectations": {"authorization_server": ISSUER, "dcr": True, "pkce": True, "verified_on": verified},
        "approval_hosts": [APPROVAL_HOST], "launch_gate_passed": False, "vendor_approval_pending": False,
        "revoke_verified_on": verified, "revoke_verified_note": "fixture",
    }
    entry.update(changes)
    return entry


def metadata(*, pkce: bool = True) -> dict[str, Any]:
    """The fixture's RFC 9728 and RFC 8414 documents for Acme (PKCE dropped when ``pkce`` is False)."""
    server = {"issuer": ISSUER, "authorization_endpoint": "https://auth.acme.test/tenant/authorize",
              "token_endpoint": "https://auth.acme.test/tenant/token",
              "registration_endpoint": "https://auth.acme.test/tenant/register",
              "code_challenge_methods_supported": ["S256"] if pkce else ["plain"]}
    return {"/.well-known/oauth-protected-resource/mcp": {"json": {"resource": MCP_URL,
                                                                    "authorization_servers": [ISSUER]}},
            "/.well-known/oauth-authorization-server/tenant": {"json": server}}


class Lane:
    """Runs ``kirocrew connections <rung>`` in a subprocess with the fixture providers installed."""

    def __init__(self, tmp_path: Path, probe_server: Callable[[dict[str, Any]], str]) -> None:
        self.tmp_path = tmp_path
        self.probe_server = probe_server
        self.entries: list[dict[str, Any]] = [provider_entry()]
        self.base = ""
        self.report_path = tmp_path / "reports" / "gate-report.json"
        self.env_extra: dict[str, str] = {}

    def serve(self, *, pkce: bool = True, mcp: dict[str, Any] | None = None) -> None:
        self.base = self.probe_server({"documents": metadata(pkce=pkce), "mcp": {"/mcp": mcp or {"mode": "challenge"}}})

    def configure(self, *, grant: bool = True, **extra: Any) -> None:
        """Acme's entry in the crew MCP scope, and (by default) a grant pair for it."""
        home.ensure_crew_home()
        home.crew_mcp_file().write_text(json.dumps({"mcpServers": {"acme": {"url": MCP_URL, **extra}}}))
        if grant:
            token, registration = grants.artifact_paths(MCP_URL)
            token.parent.mkdir(parents=True, exist_ok=True)
            token.write_text(json.dumps({"access_token": SECRET}))
            registration.write_text(json.dumps({"client_id": "fixture", "client_secret": SECRET}))

    def run(self, rung: str, *args: str, report: Path | None = None) -> tuple[subprocess.CompletedProcess[str],
                                                                              dict[str, Any] | None]:
        site = make_plugin_distribution(self.tmp_path / "site", distribution="kirocrew-gate-fixture",
                                        module="kirocrew_gate_fixture",
                                        source=PLUGIN.format(entries=json.dumps(self.entries)))
        env = dict(os.environ, **self.env_extra)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH", "")]))
        target = report or self.report_path
        overrides = ["--override-origin", f"https://acme.test={self.base}",
                     "--override-origin", f"https://auth.acme.test={self.base}"] if self.base else []
        done = run_kirocrew("connections", rung, "--report", str(target), "--timeout", "10", *overrides, *args,
                            env=env, timeout=120)
        document = json.loads(target.read_text()) if target.is_file() else None
        if document is not None:
            jsonschema.validate(document, gate_report.schema(), cls=jsonschema.Draft202012Validator)
            assert document["exit_status"] == done.returncode, (document, done.stderr)
            assert SECRET not in target.read_text()
        assert SECRET not in done.stdout + done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        return done, document


@pytest.fixture
def lane(tmp_path: Path, probe_server: Callable[[dict[str, Any]], str]) -> Lane:
    return Lane(tmp_path, probe_server)


def acme(report: dict[str, Any], rung: str) -> dict[str, Any]:
    return next(r for r in report["rows"] if r["rung"] == rung and r["slug"] == "acme")


# -- 0: green ------------------------------------------------------------------------------------


def test_l0_with_matching_metadata_exits_0_with_a_report_of_the_common_shape(lane):
    lane.serve()

    done, report = lane.run("l0", "--slug", "acme")

    assert done.returncode == 0, done.stderr
    assert report is not None
    assert (report["rung"], report["ok"], report["outcome"], report["runbook"]) == ("l0", True, "green", [])
    assert report["verdict_counts"] == {"PASS": 1, "DRIFTING": 0, "FAIL": 0}
    row = acme(report, "l0")
    assert (row["verdict"], row["reason"], row["runbook"]) == ("PASS", None, None)
    assert report["started_at"] <= report["finished_at"]


def test_l1_with_a_held_grant_exits_0_and_counts_it_as_exercised(lane):
    lane.serve(mcp={"mode": "challenge"})
    lane.configure()

    done, report = lane.run("l1", "--slug", "acme", "--min-exercised", "1")

    assert done.returncode == 0, done.stderr
    assert report is not None and report["exercised_count"] == 1
    assert (acme(report, "l1")["verdict"], acme(report, "l1")["depth"]) == ("GRANT_HELD", "challenge")


# -- 1: a real finding ---------------------------------------------------------------------------------


def test_l0_metadata_that_no_longer_matches_exits_1_and_points_at_the_drift_runbook(lane):
    lane.serve(pkce=False)

    done, report = lane.run("l0", "--slug", "acme")

    assert done.returncode == 1
    assert report is not None and report["outcome"] == "finding"
    row = acme(report, "l0")
    assert (row["verdict"], row["runbook"]) == ("FAIL", "l0-drift")
    assert "pkce is false" in row["reason"]
    assert report["runbook"] == ["l0-drift"]


def test_l0_under_the_drift_gate_exits_0_on_the_first_failure_and_1_once_it_trips(lane):
    lane.serve(pkce=False)
    state = lane.tmp_path / "l0-state.json"

    first, report = lane.run("l0", "--slug", "acme", "--state", str(state), "--drift-threshold", "2")
    assert first.returncode == 0 and report is not None
    assert (acme(report, "l0")["verdict"], acme(report, "l0")["runbook"]) == ("DRIFTING", "l0-drift")

    second, report = lane.run("l0", "--slug", "acme", "--state", str(state), "--drift-threshold", "2")
    assert second.returncode == 1 and report is not None
    assert acme(report, "l0")["verdict"] == "FAIL"


def test_l0_stale_baselines_exit_1_only_when_enforced(lane):
    lane.entries = [provider_entry(age_days=90)]
    lane.serve()

    warned, report = lane.run("l0", "--slug", "acme")
    assert warned.returncode == 0 and report is not None and report["runbook"] == ["stale-baselines"]

    enforced, report = lane.run("l0", "--slug", "acme", "--fail-on-stale")
    assert enforced.returncode == 1 and report is not None and report["runbook"] == ["stale-baselines"]


def test_l1_a_refused_credential_exits_1_and_the_secret_never_lands_in_the_report(lane):
    lane.serve(mcp={"mode": "token", "token": "the-fresh-one"})
    lane.configure(headers={"Authorization": f"Bearer {SECRET}"})

    done, report = lane.run("l1", "--slug", "acme")  # run() asserts SECRET is in no report and no output

    assert done.returncode == 1
    assert report is not None
    row = acme(report, "l1")
    assert (row["verdict"], row["runbook"]) == ("NEEDS_RECONSENT", "needs-reconsent")
    assert row["credential_presented"] is True


def test_l1_a_failing_endpoint_exits_1_and_points_at_the_fail_runbook(lane):
    lane.serve(mcp={"mode": "forbidden"})
    lane.configure()

    done, report = lane.run("l1", "--slug", "acme")

    assert done.returncode == 1 and report is not None
    assert (acme(report, "l1")["verdict"], acme(report, "l1")["runbook"]) == ("FAIL", "l1-fail")


def test_a_provider_that_outlasts_its_whole_budget_points_at_the_total_timeout_runbook():
    row = L1Row(slug="acme", name="Acme", verdict="FAIL", errors=["exceeded its total timeout of 61s"])

    assert l1_row(row)["runbook"] == "total-timeout"


def test_a_finding_outranks_a_vacuous_run(lane):
    lane.serve(mcp={"mode": "forbidden"})
    lane.configure()

    done, report = lane.run("l1", "--slug", "acme", "--min-exercised", "2")

    assert done.returncode == 1 and report is not None
    assert report["vacuous"] is True and report["runbook"] == ["l1-fail", "vacuous"]


# -- 2: usage or configuration -------------------------------------------------------------------------


@pytest.mark.parametrize("rung", ["l0", "l1", "gates"])
def test_an_unknown_slug_exits_2_and_writes_no_report(lane, rung):
    done, report = lane.run(rung, "--slug", "no-such-provider")

    assert done.returncode == 2
    assert "error[unknown_provider]" in done.stderr
    assert report is None


@pytest.mark.parametrize("rung", ["l0", "l1", "gates"])
def test_a_bad_option_exits_2_and_writes_no_report(lane, rung):
    done, report = lane.run(rung, "--concurrency", "0")

    assert done.returncode == 2
    assert report is None


def test_an_unusable_drift_state_exits_2_with_a_report_saying_nothing_was_checked(lane):
    lane.serve()
    state = lane.tmp_path / "state.json"
    state.write_text("{not json")

    done, report = lane.run("l0", "--slug", "acme", "--state", str(state))

    assert done.returncode == 2
    assert "error[l0_state_unusable]" in done.stderr
    assert report is not None
    assert (report["outcome"], report["rows"], report["runbook"]) == ("config_error", [], ["config-error"])
    assert report["fatal_error"]["code"] == "l0_state_unusable"
    assert state.read_text() == "{not json"


@pytest.mark.parametrize("rung", ["l0", "l1"])
def test_a_registry_that_cannot_be_loaded_exits_2_with_a_config_error_report(lane, rung):
    lane.entries = [provider_entry(mcp_url="http://acme.test/mcp")]  # the registry refuses non-https
    lane.env_extra = {"KIROCREW_STRICT_PLUGINS": "1"}

    done, report = lane.run(rung)

    assert done.returncode == 2, done.stderr
    assert report is not None and report["outcome"] == "config_error" and report["rows"] == []
    assert report["fatal_error"]["code"] in done.stderr


# -- 3: vacuous ---------------------------------------------------------------------------------------


def test_l1_where_nothing_holds_a_grant_is_vacuous_and_exits_3(lane):
    lane.serve()
    lane.configure(grant=False)

    done, report = lane.run("l1", "--slug", "acme", "--min-exercised", "1")

    assert done.returncode == 3
    assert report is not None
    assert (report["outcome"], report["vacuous"], report["runbook"]) == ("vacuous", True, ["vacuous"])
    assert acme(report, "l1")["verdict"] == "SKIPPED" and acme(report, "l1")["runbook"] is None


# -- 4: infrastructure ----------------------------------------------------------------------------------


@pytest.mark.parametrize("rung", ["l0", "l1", "gates"])
def test_a_report_that_cannot_be_written_exits_4(lane, rung):
    lane.serve()
    blocker = lane.tmp_path / "not-a-directory"
    blocker.write_text("")

    done, _ = lane.run(rung, "--slug", "acme", report=blocker / "report.json")

    assert done.returncode == 4
    assert "error[report_unwritable]" in done.stderr


def test_baselines_that_cannot_be_written_exit_4_and_the_report_still_says_what_was_found(lane):
    lane.serve()
    blocker = lane.tmp_path / "not-a-directory"
    blocker.write_text("")

    done, report = lane.run("l0", "--slug", "acme", "--record", "--baselines", str(blocker / "baselines.json"))

    assert done.returncode == 4
    assert report is not None
    assert (report["outcome"], report["fatal_error"]["code"]) == ("infrastructure", "baselines_unwritable")
    assert report["runbook"] == ["write-failed"] and acme(report, "l0")["verdict"] == "PASS"


def test_a_drift_state_that_cannot_be_saved_exits_4_and_the_report_still_says_what_was_found(lane):
    lane.serve(pkce=False)
    blocker = lane.tmp_path / "not-a-directory"
    blocker.write_text("")

    done, report = lane.run("l0", "--slug", "acme", "--state", str(blocker / "state.json"))

    assert done.returncode == 4
    assert "error[state_unwritable]" in done.stderr
    assert report is not None and report["fatal_error"]["code"] == "state_unwritable"
    assert report["runbook"] == ["l0-drift", "write-failed"] and acme(report, "l0")["verdict"] == "DRIFTING"


# -- the combined run --------------------------------------------------------------------------------------


def test_gates_runs_both_rungs_into_one_report_with_the_worse_exit_status(lane):
    lane.serve(mcp={"mode": "forbidden"})
    lane.configure()

    done, report = lane.run("gates", "--slug", "acme", "--min-exercised", "1")

    assert done.returncode == 1 and report is not None
    assert report["rung"] == "gates"
    assert [(r["rung"], r["verdict"]) for r in report["rows"]] == [("l0", "PASS"), ("l1", "FAIL")]
    assert (report["rungs"]["l0"]["exit_status"], report["rungs"]["l1"]["exit_status"]) == (0, 1)
    assert report["verdict_counts"]["PASS"] == 1 and report["verdict_counts"]["FAIL"] == 1
    assert done.stdout.index("L0 PASS") < done.stdout.index("L1 FAIL")


def test_gates_green_on_l0_and_vacuous_on_l1_exits_3(lane):
    lane.serve()
    lane.configure(grant=False)

    done, report = lane.run("gates", "--slug", "acme", "--min-exercised", "1")

    assert done.returncode == 3 and report is not None and report["outcome"] == "vacuous"


def test_gates_with_an_unusable_l0_state_still_runs_l1_and_exits_2(lane):
    lane.serve(mcp={"mode": "forbidden"})
    lane.configure()

    done, report = lane.run("gates", "--slug", "acme", "--state", str(lane.tmp_path / "lost.json"),
                            "--prior-run-expected")

    assert done.returncode == 2, done.stderr
    assert report is not None
    assert report["rungs"]["l0"]["outcome"] == "config_error" and report["rungs"]["l1"]["exit_status"] == 1
    assert [r["rung"] for r in report["rows"]] == ["l1"]
    assert report["runbook"] == ["config-error", "l1-fail"]


def test_the_precedence_of_exit_statuses_is_infrastructure_config_finding_vacuous_green():
    assert gate_report.worst([0, 3, 1]) == 1
    assert gate_report.worst([3, 0]) == 3
    assert gate_report.worst([1, 2]) == 2
    assert gate_report.worst([2, 4, 1]) == 4
    assert gate_report.worst([]) == 0


# -- the docs ------------------------------------------------------------------------------------------------


def test_the_runbook_in_the_docs_has_a_row_for_every_symptom_key_and_every_exit_status():
    text = DOCS.read_text()
    runbook = text[text.index("### Runbook"):]
    runbook = runbook[:runbook.index("\n## ")] if "\n## " in runbook else runbook
    for key in gate_report.RUNBOOK_KEYS:
        assert re.search(rf"^\| `{re.escape(key)}` \|", runbook, re.M), key
    statuses = text[text.index("### Exit status"):]
    for status in gate_report.OUTCOMES:
        assert re.search(rf"^\| {status} \|", statuses, re.M), status


def test_the_documented_schedule_runs_a_command_that_exists_with_options_it_takes(kirocrew):
    text = DOCS.read_text()
    commands = re.findall(r"kirocrew connections gates [^\n`']*", text)
    assert commands, "the docs schedule the combined run"
    helped = kirocrew("connections", "gates", "--help")
    assert helped.returncode == 0
    for command in commands:
        for option in re.findall(r"--[a-z-]+", command):
            assert option in helped.stdout, (option, command)
