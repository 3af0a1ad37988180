"""Each distribution imports only the kirocrew distributions its ``pyproject.toml`` declares, and ships its types.

The architecture page (docs/architecture.md, "Distributions, and what each may import") states the
rule; this keeps it: an import of an undeclared member would break an install that lacks it.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MEMBERS = sorted(path.parent for path in [*REPO.glob("kirocrew_*/pyproject.toml"),
                                          *REPO.glob("kirocrew_plugins/*/pyproject.toml")])


def _project(member: Path) -> dict:
    return tomllib.loads((member / "pyproject.toml").read_text())["project"]


def _import_name(member: Path) -> str:
    return _project(member)["name"].replace("-", "_")


IMPORT_NAMES = {_import_name(member) for member in MEMBERS}


def _declared(member: Path) -> set[str]:
    names = {dep.split("==")[0].split(">=")[0].split("[")[0].strip() for dep in _project(member)["dependencies"]}
    return {name.replace("-", "_") for name in names} & IMPORT_NAMES


def _imported_members(path: Path) -> set[str]:
    """Every kirocrew member ``path`` imports, at any depth (function-local and TYPE_CHECKING too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found & IMPORT_NAMES


def test_every_member_distribution_is_seen():
    assert {"kirocrew_core", "kirocrew_mcp", "kirocrew_connections", "kirocrew_conversations",
            "kirocrew_computer", "kirocrew_companion", "kirocrew_testing"} <= IMPORT_NAMES


@pytest.mark.parametrize("member", MEMBERS, ids=lambda member: _import_name(member))
def test_a_distribution_imports_only_the_members_it_declares(member):
    own = _import_name(member)
    allowed = _declared(member) | {own}
    sources = sorted((member / "src" / own).rglob("*.py"))
    assert sources, f"no sources for {own}"
    offenders = [f"{path.relative_to(member)}: {name}" for path in sources
                 for name in sorted(_imported_members(path) - allowed)]
    assert offenders == []


@pytest.mark.parametrize("member", MEMBERS, ids=lambda member: _import_name(member))
def test_a_distribution_ships_its_types_in_its_wheel(member):
    """A plugin author's ``mypy`` checks calls into kirocrew only if its packages carry the PEP 561 marker."""
    own = _import_name(member)
    assert (member / "src" / own / "py.typed").is_file(), f"{own} has no py.typed"
    assert tomllib.loads((member / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"][
        "packages"] == [f"src/{own}"], "hatchling ships every file of the package folder, py.typed with it"
