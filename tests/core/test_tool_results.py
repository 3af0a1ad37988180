"""kirocrew_core.tool_results: the result shapes every kirocrew MCP server answers with."""

from __future__ import annotations

from types import SimpleNamespace

from kirocrew_core import tool_results


def test_an_error_result_is_flagged_has_no_structured_content_and_reads_back_to_its_code():
    result = tool_results.error_result("run_not_found", "no run 'r_1'\nsecond line")
    assert result.is_error is True and result.structured_content is None
    assert [block.text for block in result.content] == ["error[run_not_found]: no run 'r_1'\nsecond line"]
    assert tool_results.read_error(result) == ("run_not_found", "no run 'r_1'\nsecond line")


def test_a_structured_result_carries_the_payload_twice_and_a_text_result_once():
    structured = tool_results.structured_result({"ok": True, "name": "é"})
    assert structured.is_error is False and structured.structured_content == {"ok": True, "name": "é"}
    assert [block.text for block in structured.content] == ['{"ok":true,"name":"é"}']
    text = tool_results.text_result("Dropped 2 cached window snapshots.")
    assert text.is_error is False and text.structured_content is None
    assert [block.text for block in text.content] == ["Dropped 2 cached window snapshots."]


def test_an_error_text_in_another_form_is_read_as_internal_error_with_that_text():
    foreign = SimpleNamespace(content=[SimpleNamespace(text="Error: something broke")])
    assert tool_results.read_error(foreign) == ("internal_error", "Error: something broke")
    assert tool_results.read_error(SimpleNamespace(content=[])) == ("internal_error", "the server reported an error")
