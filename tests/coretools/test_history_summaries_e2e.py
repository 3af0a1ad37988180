"""``list_sessions`` with ``summarize`` through the host: the summarizer runs where the tools run.

One host. A kiro-cli session file sits in this workspace and one in another. The owner's MCP client
asks for every workspace's sessions with summaries: kirocrew-conversations runs the fake kiro-cli on
its tool-less agent, and the fake's answer (it echoes a prompt's plain lines) is the summary, so it
shows the transcript was sent. A conversation's own call sees only its workspace's summaries. Then
kiro-cli is taken away: the unchanged session's summary still comes (from the index's cache), a
session with one more message says why it has none, and gets its new summary once kiro-cli is back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kirocrew_core import home

from kirocrew_testing.core_sessions import CrewHarness
from kirocrew_testing.kiro_store_files import append_flat, write_flat


def _summaries(listed: str) -> dict[str, str]:
    """Each listed session's title and summary."""
    found = {}
    for block in listed.split("\n\n")[1:]:
        lines = block.splitlines()
        if lines[0].startswith("**") and len(lines) == 3:
            found[lines[0].split("**")[1]] = lines[2].removeprefix("Summary: ")
    return found


def test_summaries_through_the_host_are_cached_scoped_and_renewed(crew: CrewHarness, run_async: Any,
                                                                  tmp_path: Path) -> None:
    # kiro-cli through a path the test can take away (the host reads KIRO_CLI_PATH at each start)
    wrapper = tmp_path / "kiro-bin" / "kiro-cli"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec "{crew.env["KIRO_CLI_PATH"]}" "$@"\n')
    wrapper.chmod(0o755)
    crew.env["KIRO_CLI_PATH"] = str(wrapper)

    kiro = home.kiro_home()
    transcript = write_flat(kiro, "5e55a0c1-0000-4000-8000-000000000001", title="Zebracorn migration",
                            cwd=str(crew.workspace), messages=[("user", "how do we migrate the zebracorn table?"),
                                                               ("assistant", "In batches, then swap.")])
    write_flat(kiro, "5e55a0c1-0000-4000-8000-000000000002", title="Other project", cwd=str(crew.root / "elsewhere"),
               messages=[("user", "the secret plans of another project")])
    args = {"all_workspaces": True, "summarize": True}

    async def owner_list() -> str:
        async with crew.core() as plain:
            text, code = await plain.call("list_sessions", **args)
        assert code is None, text
        return text

    async def scoped_list() -> str:
        async with crew.conversations() as conv:
            script = f"!mcp kirocrew-core list_sessions {json.dumps({'summarize': True})}\n!result"
            run = await crew.delegate(conv, script, name="lister")
        return str(run["reply"]["text"])

    first = run_async(owner_list())
    summaries = _summaries(first)
    assert "> User: how do we migrate the zebracorn table? > Assistant: In batches, then swap." in summaries[
        "Zebracorn migration"]
    assert "> User: the secret plans of another project" in summaries["Other project"]
    assert "_Summaries not" not in first

    wrapper.rename(wrapper.with_name("kiro-cli.away"))
    append_flat(transcript, "user", "and the yak index?")
    without_kiro = run_async(owner_list())
    # unchanged: from the cache; changed: summarized again, which cannot happen now, and the list says why
    assert _summaries(without_kiro)["Other project"] == summaries["Other project"]
    assert "Zebracorn migration" not in _summaries(without_kiro)
    assert without_kiro.endswith("_Summaries not available for 1 session: the model could not be run "
                                 "(kiro_cli_not_installed)._")

    wrapper.with_name("kiro-cli.away").rename(wrapper)
    renewed = _summaries(run_async(owner_list()))
    assert "> User: and the yak index?" in renewed["Zebracorn migration"]
    assert renewed["Other project"] == summaries["Other project"]

    # a conversation's call: its workspace only, the other project's title and summary never in it
    scoped = run_async(scoped_list())
    assert scoped.startswith("result: 🗂️ Sessions in this workspace (")
    assert _summaries(scoped)["Zebracorn migration"] == renewed["Zebracorn migration"]
    assert "Other project" not in scoped and "secret plans" not in scoped
