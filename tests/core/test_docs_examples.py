"""Code shown in the docs runs as shown."""

from __future__ import annotations

import asyncio
import re
import textwrap
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _python_blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.S)


def test_the_kiro_seam_testing_example_runs_against_the_fake(fake_kiro_cli, tmp_path):
    [example] = [b for b in _python_blocks("plugins/kiro-seam.md") if "async def test_my_feature" in b]
    namespace: dict = {}
    exec(compile("from kirocrew_core.acp_runtime import AcpOptions, AcpRuntime\n" + example, "kiro-seam.md", "exec"),
         namespace)
    asyncio.run(namespace["test_my_feature"](fake_kiro_cli, tmp_path))


def test_the_kiro_seam_usage_example_drives_a_session_with_mcp_and_tools(fake_kiro_cli, tmp_path):
    [example] = [b for b in _python_blocks("plugins/kiro-seam.md") if "async def ask_owner" in b]
    body = textwrap.indent(example.replace("    ...\n", "    updates.append(update)\n"), "    ")
    source = (
        "from kirocrew_core.acp_runtime import AcpOptions, AcpRuntime\n"
        "updates = []\n"
        f"async def main(worktree):\n{body}\n"
        "    return result, servers, tools\n"
    )
    namespace: dict = {}
    exec(compile(source, "kiro-seam.md", "exec"), namespace)
    result, servers, tools = asyncio.run(namespace["main"](tmp_path))
    assert result.stop_reason == "end_turn"
    assert namespace["updates"], "the update sink saw the turn"
    assert isinstance(servers, list) and any(t["source"] == "built-in" for t in tools)
