"""The package contracts (import-linter, configured in the root ``pyproject.toml``) cover every distribution,
and each public module is what other distributions may use of its distribution.

``python3 bootstrap.py test`` runs import-linter itself before pytest; these tests keep the configuration
honest: a new distribution cannot slip past the contracts by not being named in them, and a public module
names (in ``__all__``) everything others import from it, each of which resolves.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CORE, TESTING = "kirocrew_core", "kirocrew_testing"


def _members() -> set[str]:
    files = [*REPO.glob("kirocrew_*/pyproject.toml"), *REPO.glob("kirocrew_plugins/*/pyproject.toml")]
    return {tomllib.loads(path.read_text())["project"]["name"].replace("-", "_") for path in files}


def _config() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]


def _contract(contract_id: str) -> dict:
    [found] = [c for c in _config()["contracts"] if c["id"] == contract_id]
    return found


def _sources(package: str) -> list[Path]:
    return sorted(Path(importlib.import_module(package).__file__ or "").parent.rglob("*.py"))


def test_every_distribution_is_a_root_package_of_the_contracts() -> None:
    assert set(_config()["root_packages"]) == _members()


def test_core_is_forbidden_every_other_distribution() -> None:
    contract = _contract("core-imports-no-plugin")
    assert contract["source_modules"] == [CORE]
    assert set(contract["forbidden_modules"]) == _members() - {CORE}


def test_every_plugin_is_independent_of_the_others_but_for_their_public_modules() -> None:
    contract = _contract("plugins-through-public")
    assert set(contract["modules"]) == _members() - {CORE, TESTING}
    for expression in contract["ignore_imports"]:
        importer, imported = (side.strip() for side in expression.split("->"))
        assert importer.endswith(".**") and imported.endswith(".public"), expression
        assert importer.removesuffix(".**") != imported.removesuffix(".public")


def _type_only_imports(module: str) -> set[str]:
    """The modules ``module`` imports only under ``if TYPE_CHECKING:``, nowhere at run time."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    guarded = {id(found) for node in ast.walk(tree) if isinstance(node, ast.If)
               and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
               for statement in node.body for found in ast.walk(statement)}
    imports = [(node.module, id(node) in guarded) for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom) and node.module]
    imports += [(alias.name, id(node) in guarded) for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names]
    return {name for name, _ in imports if name} - {name for name, type_only in imports if not type_only}


def test_the_host_reaches_no_page_relay_or_cli_through_any_chain_but_type_only_imports() -> None:
    contract = _contract("host-is-called-into")
    assert contract.get("allow_indirect_imports", False) is False, "every chain counts, not only direct imports"
    for expression in contract.get("ignore_imports", []):
        importer, imported = (side.strip() for side in expression.split("->"))
        assert imported in _type_only_imports(importer), f"{expression} is a runtime import, not type-only"


def _public_modules() -> list[str]:
    return sorted(f"{package}.public" for package in _members()
                  if importlib.util.find_spec(f"{package}.public") is not None)


def test_the_public_modules_are_the_ones_the_contracts_let_through() -> None:
    ignored = _contract("plugins-through-public")["ignore_imports"]
    allowed = {expression.split("->")[1].strip() for expression in ignored}
    assert allowed <= set(_public_modules())


@pytest.mark.parametrize("public", _public_modules())
def test_a_public_module_names_what_others_import_from_it_and_each_name_resolves(public: str) -> None:
    module = importlib.import_module(public)
    names = set(module.__all__)
    assert all(getattr(module, name, None) is not None for name in names)
    owner = public.split(".")[0]
    used = {
        alias.name
        for package in _members() - {owner}
        for path in _sources(package)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module == public
        for alias in node.names
    }
    assert used <= names, used - names


def test_importing_the_conversations_public_module_loads_none_of_its_heavy_modules() -> None:
    """Plugins import it from their hooks (``kirocrew --help`` and the host's start load every plugin)."""
    probe = ("import sys, kirocrew_conversations.public as p; p.AUTHORITIES; "
             "print(sorted(m for m in sys.modules if m.startswith('kirocrew_conversations.')))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    for heavy in ("service", "orchestrator", "store", "hosted"):
        assert f"'kirocrew_conversations.{heavy}'" not in loaded, loaded
