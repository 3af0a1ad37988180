"""``list_sessions`` with ``summarize``: summaries a model writes, cached in the index, best effort.

Real parts: kiro-cli session files in the documented form, a real SQLite index, kirocrew-conversations'
summarizer (the installed plugin) driving the fake kiro-cli over ACP. The fake answers a prompt's
plain lines by echoing them, so the summary it "writes" is the prompt itself: what it holds proves
what was sent. The path through the host and an MCP client: tests/coretools/test_history_summaries_e2e.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core.history import summaries, tools
from kirocrew_core.history.index import HistoryIndex, Scope

from kirocrew_testing.kiro_store_files import append_flat, write_flat

WS = "/srv/project"


@pytest.fixture
def index(isolated_homes: Any, tmp_path: Path) -> HistoryIndex:
    return HistoryIndex(tmp_path / "index" / "index.sqlite3", tui_database=tmp_path / "no-tui.sqlite3",
                        sources=lambda: [])


def _listed(index: HistoryIndex, budget: float = summaries.BUDGET_SECS) -> str:
    index.refresh()
    return asyncio.run(tools.summarized_list(index, Scope.everything(), 20, budget=budget))


def _summary(listed: str) -> str:
    lines = [line for line in listed.splitlines() if line.startswith("Summary: ")]
    assert len(lines) == 1, listed
    return lines[0].removeprefix("Summary: ")


def test_without_a_summarizer_the_list_comes_with_the_reason(plugin_manager: Any, isolated_homes: Any,
                                                             index: HistoryIndex) -> None:
    write_flat(isolated_homes.kiro_home, "0f0e0d0c-1111-2222-3333-444455556666", title="Fix the parser", cwd=WS,
               messages=[("user", "why does the parser drop quotes?"), ("assistant", "It splits first.")])
    listed = _listed(index)
    assert listed.startswith("🗂️ Sessions in every workspace (1, newest first):") and "**Fix the parser**" in listed
    assert "Summary: " not in listed
    assert listed.endswith("_Summaries not available for 1 session: no installed plugin writes them "
                           "(kirocrew-conversations does)._")


def test_the_model_summarizes_a_redacted_transcript_once_until_the_session_changes(
        installed_plugin_manager: Any, fake_kiro_cli: Any, isolated_homes: Any, index: HistoryIndex,
        monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "s3cr3t-Vq8xZ2pL9kWm4NtR"
    monkeypatch.setenv("DEPLOY_API_TOKEN", secret)
    transcript = write_flat(isolated_homes.kiro_home, "0f0e0d0c-1111-2222-3333-444455556666",
                            title="Zebracorn migration", cwd=WS,
                            messages=[("user", f"migrate the zebracorn table with {secret}"),
                                      ("assistant", "Copy it in batches, then swap.")])
    first = _listed(index)
    summary = _summary(first)
    # the prompt held the instruction, the title and the transcript (quoted), and its answer is the summary
    assert summary.startswith("Summarize the past session whose transcript follows in at most 2 sentences")
    assert "Title: Zebracorn migration" in summary
    assert "> User: migrate the zebracorn table with <redacted> > Assistant: Copy it in batches, then swap." in summary
    assert secret not in first and "_Summaries not" not in first
    # the summarizer's own kiro-cli session is gone: it never becomes history itself
    assert sorted(p.name for p in (isolated_homes.kiro_home / "sessions" / "cli").iterdir()) == [
        "0f0e0d0c-1111-2222-3333-444455556666.json", "0f0e0d0c-1111-2222-3333-444455556666.jsonl"]

    # unchanged: the cache answers; with kiro-cli gone, a model run would have failed and said so
    monkeypatch.setenv("KIRO_CLI_PATH", str(fake_kiro_cli.path.with_name("gone")))
    assert _listed(index) == first

    # one more message: summarized again (and here it cannot be)
    append_flat(transcript, "user", "and the yak index?")
    changed = _listed(index)
    assert "Summary: " not in changed
    assert changed.endswith("_Summaries not available for 1 session: the model could not be run "
                            "(kiro_cli_not_installed)._")
    monkeypatch.setenv("KIRO_CLI_PATH", str(fake_kiro_cli.path))
    assert "> User: and the yak index?" in _summary(_listed(index))


def test_a_slow_model_leaves_the_list_within_the_budget(installed_plugin_manager: Any, fake_kiro_cli: Any,
                                                        isolated_homes: Any, index: HistoryIndex) -> None:
    fake_kiro_cli.switch(init_delay="60")  # kiro-cli starts, and does not answer in time
    write_flat(isolated_homes.kiro_home, "0f0e0d0c-1111-2222-3333-444455556666", title="Fix the parser", cwd=WS,
               messages=[("user", "why does the parser drop quotes?")])
    listed = _listed(index, budget=1.0)
    assert "**Fix the parser**" in listed and "Summary: " not in listed
    assert listed.endswith("_Summaries not available for 1 session: the model did not answer within 1 s._")
    row = index.sessions(Scope.everything(), limit=1)[0]
    assert index.summaries([row.key]) == {}  # nothing cached: the next call tries again


def test_a_call_summarizes_at_most_its_share_and_the_rest_on_a_later_call(
        installed_plugin_manager: Any, fake_kiro_cli: Any, isolated_homes: Any, index: HistoryIndex,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summaries, "PER_CALL", 2)
    for n in range(3):
        write_flat(isolated_homes.kiro_home, f"0f0e0d0c-1111-2222-3333-44445555666{n}", title=f"Session {n}",
                   cwd=WS, messages=[("user", f"question number {n}")], updated=f"2026-11-0{n + 1}T11:00:00Z")
    first = _listed(index)
    assert first.count("Summary: ") == 2 and "> User: question number 0" not in first  # the newest two
    assert first.endswith("_Summaries not written yet for 1 more session: at most 2 are written per call; "
                          "ask again for the rest._")
    second = _listed(index)
    assert second.count("Summary: ") == 3 and "> User: question number 0" in second
    assert "_Summaries not" not in second


def test_the_summary_agent_has_no_tools_and_no_servers() -> None:
    from kirocrew_conversations.summaries import AGENT_NAME, agent_spec

    spec = agent_spec()
    assert spec["name"] == AGENT_NAME
    assert (spec["tools"], spec["allowedTools"], spec["mcpServers"], spec["includeMcpJson"]) == ([], [], {}, False)


def test_the_history_page_shows_cached_summaries_and_writes_the_rest_when_asked(gateway_client: Any,
                                                                                 isolated_homes: Any) -> None:
    from kirocrew_core.history.index import shared

    for n, title in enumerate(("Older one", "Newer one")):
        write_flat(isolated_homes.kiro_home, f"0f0e0d0c-1111-2222-3333-44445555666{n}", title=title, cwd=WS,
                   messages=[("user", f"question {n}")], updated=f"2026-11-0{n + 1}T11:00:00Z")
    index = shared()
    index.refresh()
    older = next(row for row in index.sessions(Scope.everything(), limit=5) if row.title == "Older one")
    index.store_summary(older, "The <b>older</b> one, summarized.")

    page = gateway_client.get("/history")
    assert page.status_code == 200
    assert '<p class="summary">The &lt;b&gt;older&lt;/b&gt; one, summarized.</p>' in page.text  # escaped
    assert page.text.count('<p class="summary">') == 1
    assert '<a href="?summarize=1">Summarize these sessions</a>' in page.text
    assert "a model writes 1 summary;" in page.text

    # only the core built-ins here: no plugin writes summaries, and the page says so
    asked = gateway_client.get("/history?summarize=1").text
    assert ("<li>Summaries not available for 1 session: no installed plugin writes them "
            "(kirocrew-conversations does).</li>") in asked
    assert "Summarize these sessions" not in asked and asked.count('<p class="summary">') == 1


def test_two_calls_at_once_run_the_model_once(plugin_manager: Any, isolated_homes: Any, index: HistoryIndex) -> None:
    """The second call waits for the first's turn, then finds its summary cached."""
    from kirocrew_core.contributions import HistorySummarizer

    from kirocrew_testing.plugins import register_plugin

    asked: list[list[str]] = []

    async def summarize(requests: Any) -> Any:
        asked.append([request.key for request in requests])
        await asyncio.sleep(0)  # the other call gets to run meanwhile
        for request in requests:
            yield request.key, "summarized once"

    register_plugin(plugin_manager, "counting", history_summarizers=lambda: [HistorySummarizer("counting", summarize)])
    write_flat(isolated_homes.kiro_home, "0f0e0d0c-1111-2222-3333-444455556666", title="Fix the parser", cwd=WS,
               messages=[("user", "why does the parser drop quotes?")])
    index.refresh()

    async def both() -> list[str]:
        calls = [tools.summarized_list(index, Scope.everything(), 5) for _ in range(2)]
        return list(await asyncio.gather(*calls))

    first, second = asyncio.run(both())
    assert first == second and "\nSummary: summarized once" in first
    assert len(asked) == 1
