"""The keystone file: fail-closed reads, owner-only atomic audited writes (CLI and gateway)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_desktop import audit_records, write_keystone

from kirocrew_computer import keystone


@pytest.fixture
def plugin_manager(plugin_manager):
    import kirocrew_computer.plugin

    plugin_manager.register(kirocrew_computer.plugin, name="computer")
    return plugin_manager


def test_an_absent_keystone_reads_as_off_and_says_how_to_turn_it_on() -> None:
    state = keystone.read_keystone()
    assert state.enabled is False
    assert "kirocrew computer keystone enable" in state.reason


@pytest.mark.parametrize("document", [
    '{"enabled": true,',                                   # malformed JSON
    "[true]",                                              # not an object
    {"enabled": "true"},                                   # a string is not exactly true
    {"enabled": 1},                                        # nor is 1
    {"enabled": True, "allowed_apps": "gedit"},            # a bad list poisons the whole file
    {"enabled": True, "surprise": 1},                      # unknown keys are not guessed at
])
def test_anything_doubtful_reads_as_off_with_the_reason(document: object) -> None:
    write_keystone(document)
    state = keystone.read_keystone()
    assert state.enabled is False
    assert state.reason.startswith("computer use is off")


def test_only_enabled_exactly_true_turns_it_on() -> None:
    write_keystone({"enabled": True, "allowed_apps": ["gedit"], "extra_denied_apps": []})
    state = keystone.read_keystone()
    assert state.enabled is True and state.allowed_apps == ("gedit",)


def test_the_cli_switch_writes_the_file_and_audits_every_change(kirocrew) -> None:
    assert kirocrew("computer", "keystone", "enable").returncode == 0
    assert kirocrew("computer", "keystone", "allow", "gedit").returncode == 0
    assert kirocrew("computer", "keystone", "deny", "xterm").returncode == 0
    shown = kirocrew("computer", "keystone", "show")
    assert json.loads(shown.stdout)["enabled"] is True
    stored = json.loads(keystone.keystone_file().read_text())
    assert stored == {"enabled": True, "allowed_apps": ["gedit"], "extra_denied_apps": ["xterm"]}
    assert oct(keystone.keystone_file().stat().st_mode & 0o777) == "0o600"
    assert kirocrew("computer", "keystone", "disable").returncode == 0
    assert keystone.read_keystone().enabled is False
    records = audit_records("computer_use.keystone")
    assert [r["fields"]["action"] for r in records] == ["enable", "allow", "deny", "disable"]
    assert all(r["actor"] == "owner" for r in records)
    assert kirocrew("audit", "verify").returncode == 0


def test_a_malformed_keystone_is_reported_and_left_byte_identical(kirocrew) -> None:
    path = write_keystone('{"enabled": false, oops')
    before = path.read_bytes()
    result = kirocrew("computer", "keystone", "enable")
    assert result.returncode != 0
    assert "keystone_unusable" in result.stderr
    assert path.read_bytes() == before
    assert audit_records("computer_use.keystone") == []


def test_the_owner_gateway_route_reads_and_replaces_the_keystone(gateway_client) -> None:
    assert gateway_client.get("/api/computer-use/config").json()["enabled"] is False
    answer = gateway_client.put("/api/computer-use/config",
                                json={"enabled": True, "allowed_apps": ["gedit"], "extra_denied_apps": []})
    assert answer.status_code == 200 and answer.json()["enabled"] is True
    assert keystone.read_keystone().allowed_apps == ("gedit",)
    assert [r["fields"]["action"] for r in audit_records("computer_use.keystone")] == ["put_config"]


@pytest.mark.parametrize("body", [{"enabled": "yes"}, {"enabled": True, "extra": 1}, {"allowed_apps": [""]}])
def test_a_bad_gateway_body_is_400_and_changes_nothing(gateway_client, body: dict) -> None:
    path = write_keystone({"enabled": False, "allowed_apps": [], "extra_denied_apps": []})
    before = path.read_bytes()
    answer = gateway_client.put("/api/computer-use/config", json=body)
    assert answer.status_code == 400 and answer.json()["code"] == "keystone_invalid"
    assert path.read_bytes() == before


def test_the_gateway_route_refuses_a_caller_without_the_owner_token(gateway_client) -> None:
    from starlette.testclient import TestClient

    with TestClient(gateway_client.app, base_url="http://127.0.0.1") as anonymous:
        answer = anonymous.put("/api/computer-use/config", json={"enabled": True})
    assert answer.status_code == 401
    assert keystone.read_keystone().enabled is False
