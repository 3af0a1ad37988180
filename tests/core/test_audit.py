"""The SEL: an HMAC-chained JSONL log that tells an edit, a deletion or a torn write apart."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import audit, home
from kirocrew_core.errors import BadInputError, KirocrewError
from kirocrew_testing.processes import release_together

CONCURRENT_CHILD = """
import sys
from kirocrew_core import audit
actor, rounds = sys.argv[1], int(sys.argv[2])
sys.stdin.readline()  # wait for "go" so both children append at the same time
for i in range(rounds):
    audit.record("test.concurrent", actor=actor, i=i)
"""


def _log() -> Path:
    return home.audit_log_file()


def _lines() -> list[bytes]:
    return _log().read_bytes().splitlines(keepends=True)


def _canonical_line(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def _rewrite_line(index: int, change: dict[str, Any]) -> None:
    lines = _lines()
    document = json.loads(lines[index])
    document.update(change)
    lines[index] = _canonical_line(document)
    _log().write_bytes(b"".join(lines))


def _three_records() -> list[dict[str, Any]]:
    return [
        audit.record("gateway.login", actor="owner", outcome="ok", ip="127.0.0.1"),
        audit.record("mcp.apply", actor="owner", scope="user", servers=["a", "b"]),
        audit.record("connections.mint", outcome="denied", provider="example", url_minted=False),
    ]


def test_a_fresh_log_verifies_every_record() -> None:
    written = _three_records()
    report = audit.verify()
    assert report.ok and report.exists
    assert report.verified == 3
    assert [r["seq"] for r in written] == [1, 2, 3]
    assert written[0]["prev"] == ""
    assert written[1]["prev"] == written[0]["mac"]
    assert written[2]["prev"] == written[1]["mac"]


def test_an_absent_log_verifies_with_no_records_and_creates_nothing() -> None:
    report = audit.verify()
    assert report.ok and not report.exists and report.verified == 0
    assert not home.crew_home().exists()


def test_an_edited_record_is_reported_as_a_mac_mismatch_at_its_line() -> None:
    _three_records()
    _rewrite_line(1, {"fields": {"scope": "global", "servers": ["a", "b"]}})
    report = audit.verify()
    assert (report.reason, report.line, report.seq, report.verified) == ("mac_mismatch", 2, 2, 1)


def test_a_record_deleted_from_the_middle_is_reported_as_a_seq_gap() -> None:
    _three_records()
    lines = _lines()
    _log().write_bytes(lines[0] + lines[2])
    report = audit.verify()
    assert (report.reason, report.line, report.seq, report.verified) == ("seq_gap", 2, 3, 1)


def test_a_lost_first_record_is_reported_as_a_seq_gap_on_line_one() -> None:
    _three_records()
    _log().write_bytes(b"".join(_lines()[1:]))
    report = audit.verify()
    assert (report.reason, report.line, report.verified) == ("seq_gap", 1, 0)


def test_a_truncated_last_line_is_reported_as_truncated() -> None:
    _three_records()
    data = _log().read_bytes()
    _log().write_bytes(data[:-20])
    report = audit.verify()
    assert (report.reason, report.line, report.verified) == ("truncated", 3, 2)


def test_a_record_pointing_at_another_predecessor_is_a_prev_mismatch() -> None:
    _three_records()
    _rewrite_line(2, {"prev": "0" * 64})
    report = audit.verify()
    assert (report.reason, report.line, report.seq) == ("prev_mismatch", 3, 3)


def test_a_line_that_is_not_json_is_reported_as_bad_json() -> None:
    _three_records()
    lines = _lines()
    lines[1] = b"{not json\n"
    _log().write_bytes(b"".join(lines))
    report = audit.verify()
    assert (report.reason, report.line, report.verified) == ("bad_json", 2, 1)


def test_a_json_line_missing_record_keys_is_reported_as_bad_record() -> None:
    _three_records()
    lines = _lines()
    lines[2] = b'{"seq": 3}\n'
    _log().write_bytes(b"".join(lines))
    report = audit.verify()
    assert (report.reason, report.line, report.seq, report.verified) == ("bad_record", 3, 3, 2)


def test_secrets_are_redacted_before_they_reach_the_file() -> None:
    written = audit.record(
        "gateway.request",
        token="tok-123456",
        password="hunter2-secret",
        headers={"Authorization": "Bearer abc.def.ghi", "X-Api-Key": "key-987654", "Accept": "text/html"},
        oauth=[{"client_secret": "cs-555555", "refresh_token": "rt-444444", "code_verifier": "cv-333333"}],
        note="bearer zz-top-value",
        token_present=True,
        server="github",
    )
    raw = _log().read_text()
    for secret in ("tok-123456", "hunter2-secret", "abc.def.ghi", "key-987654", "cs-555555",
                   "rt-444444", "cv-333333", "zz-top-value"):
        assert secret not in raw
    fields = written["fields"]
    assert fields["token"] == fields["password"] == fields["note"] == "[redacted]"
    assert fields["headers"] == {
        "Authorization": "[redacted]", "X-Api-Key": "[redacted]", "Accept": "text/html"
    }
    assert fields["oauth"] == [{"client_secret": "[redacted]", "refresh_token": "[redacted]",
                                "code_verifier": "[redacted]"}]
    assert fields["token_present"] is True and fields["server"] == "github"
    assert audit.verify().ok


def test_the_key_and_the_log_are_owner_only() -> None:
    audit.record("test.modes")
    assert stat.S_IMODE(home.audit_key_file().stat().st_mode) == 0o600
    assert stat.S_IMODE(_log().stat().st_mode) == 0o600
    assert stat.S_IMODE(_log().parent.stat().st_mode) == 0o700
    assert len(home.audit_key_file().read_bytes()) == 32


def test_a_key_readable_by_others_is_refused_and_nothing_is_logged() -> None:
    audit.record("test.first")
    before = _log().read_bytes()
    os.chmod(home.audit_key_file(), 0o644)
    with pytest.raises(KirocrewError) as info:
        audit.record("test.second")
    assert info.value.code == "audit_key_insecure"
    assert _log().read_bytes() == before


def test_records_are_not_restarted_under_a_new_key_when_the_key_is_gone() -> None:
    _three_records()
    before = _log().read_bytes()
    home.audit_key_file().unlink()
    with pytest.raises(KirocrewError) as info:
        audit.record("test.after_key_loss")
    assert info.value.code == "audit_key_missing"
    assert _log().read_bytes() == before
    assert not home.audit_key_file().exists()


@pytest.mark.parametrize(
    ("event", "fields", "code"),
    [
        ("Not An Event", {}, "audit_event_invalid"),
        ("x" * 65, {}, "audit_event_invalid"),
        ("test.big", {"blob": "a" * (9 * 1024)}, "audit_record_too_large"),
        ("test.object", {"thing": object()}, "audit_field_invalid"),
        ("test.nan", {"ratio": float("nan")}, "audit_field_invalid"),
    ],
)
def test_bad_input_is_refused_with_a_code_and_writes_nothing(
    event: str, fields: dict[str, Any], code: str
) -> None:
    with pytest.raises(BadInputError) as info:
        audit.record(event, **fields)
    assert info.value.code == code
    assert not home.crew_home().exists()


def test_concurrent_appends_from_two_processes_form_one_chain_with_every_record() -> None:
    children = [
        subprocess.Popen([sys.executable, "-c", CONCURRENT_CHILD, actor, "25"],
                         stdin=subprocess.PIPE, text=True)
        for actor in ("alpha", "beta")
    ]
    release_together(children)
    report = audit.verify()
    assert report.ok and report.verified == 50
    records = [json.loads(line) for line in _lines()]
    for actor in ("alpha", "beta"):
        assert sorted(r["fields"]["i"] for r in records if r["actor"] == actor) == list(range(25))


def test_a_record_after_a_torn_line_chains_to_the_last_whole_record() -> None:
    first = audit.record("gateway.login", actor="owner")
    second = audit.record("mcp.apply", actor="owner")
    anchored = _anchor().read_bytes()
    audit.record("connections.mint", outcome="denied")
    # A crash cut the third record short, before its anchor update.
    _log().write_bytes(b"".join(_lines())[:-20])
    _anchor().write_bytes(anchored)
    fourth = audit.record("test.after_tear")
    assert fourth["seq"] == 3 and fourth["prev"] == second["mac"]
    assert _log().read_bytes().endswith(b"\n")
    # The torn line stays as evidence, sealed by a newline; verify stops on it.
    report = audit.verify()
    assert (report.reason, report.line, report.verified) == ("bad_json", 3, 2)
    assert first["mac"] != fourth["mac"]


def test_tail_returns_the_newest_records_oldest_first() -> None:
    for i in range(5):
        audit.record("test.tail", i=i)
    assert [r["fields"]["i"] for r in audit.tail(2)] == [3, 4]
    assert [r["seq"] for r in audit.tail(50)] == [1, 2, 3, 4, 5]
    assert audit.tail(0) == []


def test_tail_of_an_absent_log_is_empty() -> None:
    assert audit.tail(10) == []


def test_tail_shows_a_torn_last_line_as_malformed() -> None:
    _three_records()
    _log().write_bytes(_log().read_bytes()[:-20])
    entries = audit.tail(5)
    assert [e.get("seq") for e in entries[:2]] == [1, 2]
    assert "malformed" in entries[2]


def test_cli_verify_says_ok_for_an_absent_log(kirocrew: Any) -> None:
    result = kirocrew("audit", "verify")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok: 0 records")


def test_cli_verify_exits_0_for_an_intact_log_and_1_for_an_edited_one(kirocrew: Any) -> None:
    _three_records()
    intact = kirocrew("audit", "verify")
    assert intact.returncode == 0, intact.stderr
    assert intact.stdout.strip() == "ok: 3 records verified"

    _rewrite_line(1, {"actor": "mallory"})
    broken = kirocrew("audit", "verify")
    assert broken.returncode == 1
    assert broken.stdout.splitlines()[0] == "broken at line 2 (seq 2): mac_mismatch"

    as_json = kirocrew("audit", "verify", "--json")
    assert as_json.returncode == 1
    report = json.loads(as_json.stdout)
    summary = (report["ok"], report["reason"], report["line"], report["verified"])
    assert summary == (False, "mac_mismatch", 2, 1)


def test_cli_verify_reports_a_missing_key_as_an_error_code(kirocrew: Any) -> None:
    _three_records()
    home.audit_key_file().unlink()
    result = kirocrew("audit", "verify")
    assert result.returncode == 1
    assert "error[audit_key_missing]" in result.stderr


def test_cli_tail_prints_records_as_lines_or_json(kirocrew: Any) -> None:
    _three_records()
    human = kirocrew("audit", "tail", "-n", "2")
    assert human.returncode == 0, human.stderr
    lines = human.stdout.splitlines()
    assert len(lines) == 2
    assert " mcp.apply owner ok " in lines[0] and "scope=user" in lines[0]
    assert " connections.mint system denied " in lines[1] and "url_minted=false" in lines[1]

    as_json = kirocrew("audit", "tail", "-n", "2", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert [r["seq"] for r in json.loads(as_json.stdout)] == [2, 3]


# -- the head anchor: the log's end and its disappearance ---------------------


def _anchor() -> Path:
    return home.audit_anchor_file()


def _records(count: int) -> list[dict[str, Any]]:
    return [audit.record("test.anchor", i=i) for i in range(count)]


def _keep_first(count: int) -> None:
    _log().write_bytes(b"".join(_lines()[:count]))


def test_the_head_anchor_is_owner_only_and_names_the_newest_record() -> None:
    newest = _records(3)[-1]
    assert stat.S_IMODE(_anchor().stat().st_mode) == 0o600
    document = json.loads(_anchor().read_text())
    assert (document["seq"], document["mac"]) == (3, newest["mac"])
    report = audit.verify()
    assert (report.ok, report.verified, report.anchored) == (True, 3, 3)


def test_a_deleted_last_record_is_reported_as_tail_truncated() -> None:
    _records(3)
    _keep_first(2)
    report = audit.verify()
    assert (report.ok, report.reason, report.verified, report.anchored) == (False, "tail_truncated", 2, 3)
    assert "1 newest record" in report.detail


def test_keeping_only_the_first_ten_records_is_reported_as_tail_truncated() -> None:
    _records(20)
    _keep_first(10)
    report = audit.verify()
    assert (report.reason, report.verified, report.anchored) == ("tail_truncated", 10, 20)


def test_records_appended_after_a_truncation_continue_the_anchored_chain_so_the_gap_stays_visible() -> None:
    records = _records(20)
    _keep_first(10)
    after = audit.record("test.after_truncation")
    # Not re-anchored on the truncated log: the new record follows the anchored one.
    assert (after["seq"], after["prev"]) == (21, records[-1]["mac"])
    audit.record("test.after_truncation")
    report = audit.verify()
    assert (report.reason, report.line, report.seq, report.verified) == ("seq_gap", 11, 21, 10)
    assert json.loads(_anchor().read_text())["seq"] == 22


def test_an_emptied_log_is_reported_as_log_emptied() -> None:
    _records(3)
    _log().write_bytes(b"")
    report = audit.verify()
    assert (report.ok, report.exists, report.reason, report.verified) == (False, True, "log_emptied", 0)


def test_a_deleted_log_is_reported_as_log_missing() -> None:
    _records(3)
    _log().unlink()
    report = audit.verify()
    assert (report.ok, report.exists, report.reason) == (False, False, "log_missing")


def test_a_deleted_log_that_the_gateway_then_recreates_shows_the_records_before_it_are_gone() -> None:
    records = _records(3)
    _log().unlink()
    after = audit.record("test.after_deletion")
    assert (after["seq"], after["prev"]) == (4, records[-1]["mac"])
    report = audit.verify()
    assert (report.reason, report.line, report.seq, report.verified) == ("seq_gap", 1, 4, 0)


def test_a_deleted_anchor_is_reported_even_when_the_log_is_intact() -> None:
    _records(3)
    _anchor().unlink()
    report = audit.verify()
    assert (report.ok, report.reason, report.verified) == (False, "anchor_missing", 3)


def test_deleting_the_log_and_its_anchor_does_not_pass_for_a_fresh_install() -> None:
    _records(3)
    _log().unlink()
    _anchor().unlink()
    report = audit.verify()
    assert (report.ok, report.reason) == (False, "log_missing")
    # Appending again must not quietly anchor a new chain over the loss.
    audit.record("test.after_wipe")
    assert not _anchor().exists()
    assert audit.verify().reason == "anchor_missing"


def test_an_anchor_edited_without_the_key_is_reported_as_anchor_invalid() -> None:
    _records(3)
    document = json.loads(_anchor().read_text())
    document["seq"] = 2
    _anchor().write_text(json.dumps(document))
    assert audit.verify().reason == "anchor_invalid"
    _anchor().write_text("{not json")
    assert audit.verify().reason == "anchor_invalid"


def test_a_symlinked_anchor_is_refused_as_invalid_and_never_written_through(tmp_path: Path) -> None:
    _records(3)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(_anchor().read_bytes())
    _anchor().unlink()
    _anchor().symlink_to(elsewhere)
    before = elsewhere.read_bytes()
    assert audit.verify().reason == "anchor_invalid"
    audit.record("test.after_symlink")
    assert elsewhere.read_bytes() == before and _anchor().is_symlink()


def test_an_anchor_from_another_log_is_reported_as_anchor_mismatch() -> None:
    _records(3)
    foreign = json.loads(_anchor().read_text())
    _log().unlink()
    _anchor().unlink()
    home.audit_key_file().unlink()
    _records(3)  # a new log under a new key; then the old anchor is put back, re-signed
    key = home.audit_key_file().read_bytes()
    foreign["anchor_mac"] = audit.anchor_mac(key, foreign["seq"], foreign["mac"])
    _anchor().write_text(json.dumps(foreign))
    assert audit.verify().reason == "anchor_mismatch"


def test_a_crash_between_the_append_and_the_anchor_update_verifies_and_the_next_append_catches_up(
    kirocrew: Any,
) -> None:
    _records(3)
    stale = _anchor().read_bytes()
    audit.record("test.interrupted")
    _anchor().write_bytes(stale)  # the anchor as it was before the fourth append
    report = audit.verify()
    assert (report.ok, report.verified, report.anchored) == (True, 4, 3)
    shown = kirocrew("audit", "verify")
    assert shown.returncode == 0 and "the newest 1 not yet anchored" in shown.stdout
    audit.record("test.next")
    assert json.loads(_anchor().read_text())["seq"] == 5
    assert audit.verify().anchored == 5


def test_an_anchor_left_several_records_behind_still_vouches_for_them_and_is_caught_up() -> None:
    _records(3)
    stale = _anchor().read_bytes()
    _records(3)
    _anchor().write_bytes(stale)  # as if three anchor updates in a row had failed
    report = audit.verify()
    assert (report.ok, report.verified, report.anchored) == (True, 6, 3)
    _keep_first(2)
    assert audit.verify().reason == "tail_truncated"


def test_an_append_catches_up_an_anchor_left_behind() -> None:
    _records(3)
    stale = _anchor().read_bytes()
    _records(3)
    _anchor().write_bytes(stale)
    audit.record("test.catch_up")
    assert audit.verify().anchored == 7


def test_first_use_with_no_log_no_anchor_and_no_key_is_fine() -> None:
    report = audit.verify()
    assert report.ok and report.anchored is None
    audit.record("test.first")
    assert audit.verify().anchored == 1


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        ("delete_last", "tail_truncated"),
        ("keep_ten_then_append", "seq_gap"),
        ("empty", "log_emptied"),
        ("delete_log", "log_missing"),
        ("delete_anchor", "anchor_missing"),
    ],
)
def test_cli_verify_exits_1_with_the_code_for_each_kind_of_removal(kirocrew: Any, tamper: str, reason: str) -> None:
    _records(20)
    if tamper == "delete_last":
        _keep_first(19)
    elif tamper == "keep_ten_then_append":
        _keep_first(10)
        audit.record("test.after_truncation")
    elif tamper == "empty":
        _log().write_bytes(b"")
    elif tamper == "delete_log":
        _log().unlink()
    else:
        _anchor().unlink()
    result = kirocrew("audit", "verify")
    assert result.returncode == 1, result.stdout + result.stderr
    first_line = result.stdout.splitlines()[0]
    assert first_line.endswith(f": {reason}") and "None" not in first_line
    as_json = kirocrew("audit", "verify", "--json")
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["reason"] == reason
