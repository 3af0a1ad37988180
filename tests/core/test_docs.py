"""The docs stay true: keys, commands, switches and links are checked against the code."""

from __future__ import annotations

import ast
import re
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from kirocrew_core import config, plugins
from kirocrew_core.cli import CORE_COMMANDS

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
USER_GUIDE = (DOCS / "user-guide.md").read_text()

# Plugins declare their config keys when they load (cron.* in kirocrew_cron.settings): load every installed one
# before the keys are listed, so the parametrisation is the same whichever tests ran first in this worker.
for _entry_point in entry_points(group=plugins.ENTRY_POINT_GROUP):
    _entry_point.load()


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


ARCHITECTURE = DOCS / "architecture.md"


def _hook_table() -> dict[str, list[str]]:
    """The architecture page's hook table: hook name → its cells (called from, policy, implementers)."""
    section = ARCHITECTURE.read_text().split("\n## Hooks\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `") and (name := re.match(r"`(\w+)`", cells[0])):
            rows[name.group(1)] = cells[1:]
    return rows


def _declared_hooks() -> set[str]:
    """Core's hooks and those the installed plugins add through ``addhooks``."""
    import pluggy

    pm = plugins.make_plugin_manager(env={})
    return {name for name, caller in vars(pm.hook).items()
            if isinstance(caller, pluggy.HookCaller) and caller.spec is not None}


def test_every_hook_is_a_row_of_the_architecture_hook_table_and_every_row_a_hook():
    assert set(_hook_table()) == _declared_hooks()


def test_each_call_site_the_architecture_hook_table_names_calls_that_hook():
    roots = [*REPO.glob("kirocrew_*/src"), *REPO.glob("kirocrew_plugins/*/src")]
    sources = {path.relative_to(root): path for root in roots for path in root.rglob("*.py")}
    for hook, (called_from, *_rest) in _hook_table().items():
        if "no caller yet" in called_from:
            continue
        site = re.match(r"`([\w/]+\.py)`: `(?:\w+\.)?(\w+)`", called_from)
        assert site, f"{hook}: name the call site as `package/module.py`: `function`"
        path = sources.get(Path(site.group(1)))
        assert path is not None, f"{hook}: {site.group(1)} is no module of the tree"
        text = path.read_text()
        bodies = [ast.get_source_segment(text, node) or "" for node in ast.walk(ast.parse(text))
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == site.group(2)]
        assert bodies, f"{hook}: {site.group(1)} has no {site.group(2)}()"
        assert any(f'"{hook}"' in body or f".hook.{hook}." in body for body in bodies), (
            f"{hook}: {site.group(1)}: {site.group(2)}() does not call it")


def test_each_hook_row_of_the_architecture_table_names_every_open_edition_plugin_implementing_it():
    from kirocrew_core.hookdocs import open_edition_implementers

    rows = _hook_table()
    for hook, implementers in open_edition_implementers().items():
        cell = rows[hook][-1]
        for plugin in implementers:
            # A built-in by its module name; a member by its entry-point name or its package.
            word = re.escape(plugin)
            named = word if "." in plugin else rf"(?<![\w-]){word}(?![\w-])|kirocrew_{word}\b"
            assert re.search(named, cell), f"docs/architecture.md: the {hook} row omits {plugin}, an implementer"
