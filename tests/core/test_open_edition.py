"""The open edition is one list: ``OPEN_EDITION_MEMBERS`` in the plugin manager, and every place that names it.

The root ``pyproject.toml`` pins the members, ``bootstrap.py`` installs what it pins, and the README,
the user guide, the plugin guide and the architecture page list them; each must say exactly the code's list.
"""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

import pytest

from kirocrew_core.plugins import OPEN_EDITION, OPEN_EDITION_MEMBERS, make_plugin_manager

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def _names(text: str) -> list[str]:
    return re.findall(r"`(kirocrew-[a-z]+)`", text)


def _pinned() -> list[str]:
    pinned = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return [re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0] for requirement in pinned]


def _bootstrapped() -> list[str]:
    spec = importlib.util.spec_from_file_location("kirocrew_bootstrap", REPO / "bootstrap.py")
    assert spec is not None and spec.loader is not None
    bootstrap = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bootstrap)
    return [tomllib.loads((REPO / folder / "pyproject.toml").read_text())["project"]["name"]
            for folder in bootstrap.open_edition()]


def _readme() -> list[str]:
    table = (REPO / "README.md").read_text().split("## What is here", 1)[1].split("\n\n", 2)[1]
    rows = [line.split("|")[1:3] for line in table.splitlines() if line.startswith("| `kirocrew-")]
    return [name.strip().strip("`") for name, what in rows if "not in the open edition" not in what]


def _user_guide() -> list[str]:
    said = re.search(r"the open edition is the `kirocrew`\s+distribution \(it pins (.*?)\)",
                     (DOCS / "user-guide.md").read_text(), re.S)
    assert said, "the user guide no longer says what the kirocrew distribution pins"
    return _names(said.group(1))


def _plugin_guide() -> list[str]:
    said = re.search(r"The open edition's own members \((.*?)\)", (DOCS / "plugins" / "writing-plugins.md").read_text(),
                     re.S)
    assert said, "the plugin guide no longer names the open edition's members"
    return _names(said.group(1))


def _architecture() -> list[str]:
    tree = (DOCS / "architecture.md").read_text().split("## Distributions", 1)[1].split("```", 2)[1]
    return [name for line in tree.splitlines() if "not in the open edition" not in line
            for name in re.findall(r"\s(kirocrew-[a-z]+)\s", line)]


@pytest.mark.parametrize("where, listed", [
    ("the root pyproject.toml's dependencies", _pinned),
    ("bootstrap.py's install", _bootstrapped),
    ("README.md's table", _readme),
    ("docs/user-guide.md", _user_guide),
    ("docs/plugins/writing-plugins.md", _plugin_guide),
    ("docs/architecture.md's tree", _architecture),
], ids=lambda value: value if isinstance(value, str) else "")
def test_every_list_of_the_open_edition_is_the_codes(where, listed):
    assert sorted(listed()) == sorted(OPEN_EDITION_MEMBERS), f"{where} lists another open edition than the code"


def test_every_open_edition_member_is_installed_and_loads_as_one():
    pm = make_plugin_manager(env={})
    loaded = {record.distribution for record in pm.loaded_records() if record.status == "loaded"}
    assert OPEN_EDITION - loaded == set()
    cron = [name for name, record in pm.records.items() if record.distribution == "kirocrew-cron"]
    assert cron and all(pm.is_open_edition(name) and pm.is_strict(name) for name in cron)  # a broken cron fails loudly
