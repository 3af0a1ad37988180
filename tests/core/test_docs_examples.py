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


def _section(page: str, heading: str) -> str:
    text = (DOCS / page).read_text()
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end == -1 else text[start:end]


def test_the_dashboard_page_example_is_the_example_plugin_verbatim():
    from kirocrew_core.gateway.shell import CONTENT_SECURITY_POLICY
    from kirocrew_testing import dashboard_demo

    section = _section("plugins/writing-plugins.md", "Adding a dashboard page")
    package = Path(dashboard_demo.__file__).parent
    sources = {"python": (package / "__init__.py").read_text(),
               "html": (package / "templates" / "echo.html").read_text(),
               "js": (package / "static" / "echo.js").read_text()}
    blocks = re.findall(r"```(python|html|js)\n(.*?)```", section, re.S)
    # The page's own files are the worked example's (tests/core/test_plugin_new.py holds them to the scaffold);
    # the section keeps the shell's api() example, which is the demo plugin's script.
    assert [lang for lang, _ in blocks] == ["js"]
    assert "(worked-example.md)" in section
    for lang, block in blocks:
        assert block in sources[lang], f"a {lang} block of 'Adding a dashboard page' is not in the example plugin"
    assert f"`Content-Security-Policy: {CONTENT_SECURITY_POLICY}`" in section


def test_the_browser_testing_example_passes_as_a_plugins_own_test(chromium_path, tmp_path):
    import os
    import subprocess
    import sys

    [example] = re.findall(r"```python\n(.*?)```", _section("plugins/testing-plugins.md", "The dashboard in a browser"),
                           re.S)
    suite = tmp_path / "plugin-tests"
    suite.mkdir()
    (suite / "conftest.py").write_text(
        "import pytest\n\npytest_plugins = ['kirocrew_testing.fixtures', 'kirocrew_testing.process_guard']\n\n\n"
        "@pytest.fixture(autouse=True)\ndef _isolation(process_guard, isolated_homes, write_guard):\n    yield\n")
    (suite / "test_example.py").write_text(example)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(suite), "--basetemp",
         str(tmp_path / "basetemp"), str(suite)],
        capture_output=True, text=True, timeout=180, cwd=suite, env=dict(os.environ), stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout
    assert list((tmp_path / "basetemp").rglob("echo-dark-400px.png"))


def test_the_policy_pages_examples_are_policies_the_gate_reads_and_they_decide_as_the_page_says(tmp_path):
    from kirocrew_core.gate.calls import Context, ToolCall
    from kirocrew_core.gate.engine import Policy
    from kirocrew_core.gate.policy_file import read_policy_file

    blocks = re.findall(r"```toml\n(.*?)```", (DOCS / "policy.md").read_text(), re.S)
    assert len(blocks) >= 2
    reads = []
    for index, block in enumerate(blocks):
        path = tmp_path / f"policy-{index}.toml"
        path.write_text(block)
        read = read_policy_file(path)
        assert read.state == "ok" and not read.problems, (block, read.problems)
        reads.append(read)
    examples = reads[0]
    policy = Policy.build(examples.rules, examples.defaults)
    ctx = Context("unrestricted", "kirocrew", str(tmp_path), str(tmp_path))
    assert policy.decide(ToolCall("shell", None, {"command": "git status && rm -rf build"}), ctx).decision == "deny"
    assert policy.decide(ToolCall("shell", None, {"command": "git push origin main"}), ctx).decision == "ask"
    assert policy.decide(ToolCall("list_issues", "github", {}), ctx).decision == "allow"
    assert policy.decide(ToolCall("create_issue", "github", {}), ctx).decision == "ask"
    assert reads[1].defaults == {"unrestricted": "allow", "read_only": "ask", "workspace_write": "ask"}
