"""`python3 bootstrap.py test` lints before pytest (a finding stops the command with a message naming the linter)
and byte-compiles the members' sources first, while one collection caches the rewritten test modules."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _bootstrap(root: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """bootstrap.py, pointed at ``root`` and at this interpreter (the test venv has ruff and mypy)."""
    spec = importlib.util.spec_from_file_location("kirocrew_bootstrap_under_test", REPO / "bootstrap.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "ROOT", root)
    monkeypatch.setattr(module, "PYTHON", Path(sys.executable))
    monkeypatch.delenv("KIROCREW_SKIP_LINT", raising=False)
    return module


def _project(root: Path, source: str, *, low_imports_high: bool = False) -> Path:
    """A tree for the three linters: ``mod.py`` for ruff and mypy, and a package ``layered`` whose contract
    forbids ``layered.low`` to import ``layered.high`` (it does when ``low_imports_high``)."""
    (root / "pyproject.toml").write_text(
        '[tool.ruff]\ncache-dir = "cache/ruff"\n[tool.ruff.lint]\nselect = ["F"]\n'
        '[tool.mypy]\nfiles = ["mod.py"]\ncache_dir = "cache/mypy"\n'
        '[tool.importlinter]\nroot_packages = ["layered"]\n'
        '[[tool.importlinter.contracts]]\nname = "low never imports high"\ntype = "forbidden"\n'
        'source_modules = ["layered.low"]\nforbidden_modules = ["layered.high"]\n'
    )
    (root / "mod.py").write_text(source)
    package = root / "layered"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "high.py").write_text("from layered import low\n\nVALUE = low.VALUE\n")
    (package / "low.py").write_text("from layered import high\n\nVALUE = high\n" if low_imports_high else "VALUE = 1\n")
    return root


def test_a_clean_tree_passes_the_three_linters(tmp_path, monkeypatch):
    bootstrap = _bootstrap(_project(tmp_path, "def f(x: int) -> int:\n    return x\n"), monkeypatch)
    bootstrap.lint()  # returns: pytest would be exec'd next


def test_a_ruff_finding_stops_the_test_command_naming_ruff(tmp_path, monkeypatch, capfd):
    bootstrap = _bootstrap(_project(tmp_path, "import os\n"), monkeypatch)
    with pytest.raises(SystemExit) as stopped:
        bootstrap.lint()
    assert stopped.value.code not in (0, None)
    err = capfd.readouterr()
    assert "F401" in err.out and "lint failed: ruff found problems" in err.err


def test_a_mypy_finding_stops_the_test_command_naming_mypy(tmp_path, monkeypatch, capfd):
    bootstrap = _bootstrap(_project(tmp_path, 'def f(x: int) -> int:\n    return "x"\n'), monkeypatch)
    with pytest.raises(SystemExit) as stopped:
        bootstrap.lint()
    assert stopped.value.code not in (0, None)
    err = capfd.readouterr()
    assert "[return-value]" in err.out and "lint failed: mypy found problems" in err.err


def test_a_broken_package_contract_stops_the_test_command_naming_import_linter(tmp_path, monkeypatch, capfd):
    clean = "def f(x: int) -> int:\n    return x\n"
    bootstrap = _bootstrap(_project(tmp_path, clean, low_imports_high=True), monkeypatch)
    with pytest.raises(SystemExit) as stopped:
        bootstrap.lint()
    assert stopped.value.code not in (0, None)
    err = capfd.readouterr()
    assert "layered.low -> layered.high" in err.out and "lint failed: import-linter found problems" in err.err



def test_the_members_sources_are_byte_compiled_before_the_suite_even_where_python_writes_no_bytecode(
        tmp_path, monkeypatch):
    bootstrap = _bootstrap(tmp_path, monkeypatch)
    package = tmp_path / "kirocrew_core" / "src" / "kirocrew_core_under_test"
    package.mkdir(parents=True)
    (package / "mod.py").write_text("VALUE = 1\n")
    (tmp_path / "kirocrew_core" / "tests").mkdir()
    (tmp_path / "kirocrew_core" / "tests" / "test_mod.py").write_text("def test(): pass\n")
    # The members are the folders of what the root pyproject pins.
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "kirocrew"\ndependencies = ["kirocrew-core>=0"]\n')
    (tmp_path / "kirocrew_core" / "pyproject.toml").write_text('[project]\nname = "kirocrew-core"\n')
    # Every process the suite starts inherits this; it would otherwise compile kirocrew's modules each time.
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    bootstrap.precompile()
    tag = sys.implementation.cache_tag
    assert (package / "__pycache__" / f"mod.{tag}.pyc").is_file()
    assert not (tmp_path / "kirocrew_core" / "tests" / "__pycache__").exists()  # only the members' src trees


def test_one_collection_beside_the_linters_caches_the_rewritten_test_modules_for_every_worker(tmp_path, monkeypatch):
    bootstrap = _bootstrap(tmp_path, monkeypatch)
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_mod.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    (tests / "test_other.py").write_text("def test_two():\n    assert True\n")
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # as in CI: no process the suite starts writes bytecode
    warmup = bootstrap.start_rewrite_warmup(["-q", "tests/test_mod.py", "-k", "one"])
    assert warmup is not None
    assert warmup.wait(60) == 0
    cached = sorted(path.name for path in (tests / "__pycache__").iterdir())
    # pytest's own cache name (its version in the tag): what a worker reads instead of rewriting; only the named path.
    assert len(cached) == 1 and cached[0].startswith("test_mod.") and "-pytest-" in cached[0]


def test_no_warmup_runs_when_the_linters_are_skipped(tmp_path, monkeypatch):
    bootstrap = _bootstrap(tmp_path, monkeypatch)
    monkeypatch.setenv("KIROCREW_SKIP_LINT", "1")
    assert bootstrap.start_rewrite_warmup([]) is None
