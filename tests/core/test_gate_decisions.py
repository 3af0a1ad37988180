"""Every gate decision in the security event log: queued, written in batches, chained like any record."""

from __future__ import annotations

import pytest
from kirocrew_core import audit
from kirocrew_core.errors import BadInputError
from kirocrew_core.gate.decisions import AUDIT_EVENT, DecisionLog, recent


def test_queued_decisions_are_written_in_order_in_one_chain_that_verifies(isolated_homes):
    log = DecisionLog()
    for index in range(120):
        log.submit("allow" if index % 3 else "deny", rule=f"r-{index}", tool="shell", fingerprint=f"{index:016x}",
                   conversation="conv_x", run="run_y", authority="unrestricted")
    log.flush()
    written = [r for r in audit.tail(500) if r["event"] == AUDIT_EVENT]
    assert [r["fields"]["rule"] for r in written] == [f"r-{i}" for i in range(120)]
    assert [r["seq"] for r in written] == list(range(written[0]["seq"], written[0]["seq"] + 120))
    assert audit.verify().ok
    assert recent(5)[0]["rule"] == "r-119" and recent(5)[0]["outcome"] == "allow"


def test_a_batch_with_one_bad_record_writes_none_of_it(isolated_homes):
    audit.record("before", actor="owner")
    with pytest.raises(BadInputError):
        audit.record_many([("policy_decision", "system", "allow", {"rule": "a"}),
                           ("Not An Event", "system", "allow", {})])
    assert [r["event"] for r in audit.tail(10)] == ["before"]
    assert audit.verify().ok


def test_records_keep_a_fingerprint_of_the_input_never_the_input(isolated_homes):
    from kirocrew_core.gate.calls import ToolCall

    call = ToolCall("shell", None, {"command": "curl -H 'Authorization: Bearer sk-live-secret' example.com"})
    log = DecisionLog()
    log.submit("deny", rule="r-1", tool=call.ref, fingerprint=call.fingerprint())
    log.flush()
    [record] = [r for r in audit.tail(5) if r["event"] == AUDIT_EVENT]
    assert record["fields"]["fingerprint"] == call.fingerprint() and len(call.fingerprint()) == 16
    assert "sk-live-secret" not in str(record) and "curl" not in str(record)
