"""The docs stay true: keys, commands, switches and links are checked against the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kirocrew_core import config, plugins
from kirocrew_core.cli import CORE_COMMANDS

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
USER_GUIDE = (DOCS / "user-guide.md").read_text()


def _format(value) -> str:
    return config.format_value(value)


@pytest.mark.parametrize("key", [k.name for k in config.registered_keys()])
def test_every_config_key_is_documented_with_its_default(key):
    spec = config.lookup_key(key)
    assert f"| `{key}` | `{_format(spec.default)}` |" in USER_GUIDE


@pytest.mark.parametrize("command", sorted(CORE_COMMANDS))
def test_every_core_command_is_in_the_user_guide(command):
    assert f"`kirocrew {command}" in USER_GUIDE


@pytest.mark.parametrize("switch", [plugins.LOAD_ENV, plugins.DISABLE_ENV, plugins.STRICT_ENV, plugins.TRACE_ENV])
def test_every_plugin_switch_is_documented_for_plugin_authors(switch):
    assert f"`{switch}=" in (DOCS / "plugins" / "writing-plugins.md").read_text()


def test_the_readme_quick_start_is_exactly_the_two_bootstrap_commands():
    readme = (REPO / "README.md").read_text()
    block = re.search(r"## Quick start.*?```sh\n(.*?)```", readme, re.S)
    assert block, "README needs a Quick start section with one sh block"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert commands == ["python3 bootstrap.py serve", "python3 bootstrap.py test"]


def test_ci_runs_the_readme_test_command():
    assert "python3 bootstrap.py test" in (REPO / ".ci" / "run").read_text()


def _markdown_files():
    return sorted([REPO / "README.md", *DOCS.rglob("*.md")])


@pytest.mark.parametrize("page", _markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_in_the_docs_resolves(page):
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
        if "://" in target:
            continue
        assert (page.parent / target).exists(), f"{page.name} links to missing {target}"
