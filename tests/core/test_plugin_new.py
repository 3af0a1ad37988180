"""``kirocrew plugin new``: the files it writes, and bad input refused with a stable code, nothing written.

That the plugin it writes installs from a wheel and works is tests/e2e/test_scaffolded_plugin_browser.py's.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kirocrew_core import scaffold
from kirocrew_core.errors import BadInputError, KirocrewError
from kirocrew_testing.fixtures import kirocrew_argv

DOCS = Path(__file__).resolve().parents[2] / "docs" / "plugins"
WORKED_EXAMPLE = DOCS / "worked-example.md"
EVERYTHING = ("--page", "--tool", "--server", "--doctor")


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """An empty folder to run the command in (the test's homes are in ``tmp_path`` too)."""
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


def _written(root: Path) -> set[str]:
    return {path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file()}


def _listing(folder: Path) -> list[str]:
    return sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*"))


def test_without_options_it_writes_a_page_and_a_tool_into_kirocrew_name(kirocrew, work):
    result = kirocrew("plugin", "new", "acme", cwd=work)
    assert result.returncode == 0, result.stderr
    root = work / "kirocrew-acme"
    assert str(root) in result.stdout
    assert _written(root) == {
        "pyproject.toml", "README.md", "src/kirocrew_acme/__init__.py", "src/kirocrew_acme/plugin.py",
        "src/kirocrew_acme/greeting.py", "src/kirocrew_acme/tools.py", "src/kirocrew_acme/page.py",
        "src/kirocrew_acme/templates/acme.html", "src/kirocrew_acme/static/acme.js",
        "tests/conftest.py", "tests/test_page.py", "tests/test_tool.py"}
    pyproject = (root / "pyproject.toml").read_text()
    assert 'build-backend = "hatchling.build"' in pyproject
    assert '[project.entry-points."kirocrew.plugins"]\nacme = "kirocrew_acme.plugin"' in pyproject
    assert oct((root / "src" / "kirocrew_acme").stat().st_mode & 0o777) == oct(0o777 & ~_umask())
    assert [entry.name for entry in work.iterdir()] == ["kirocrew-acme"]  # no staging folder left


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize(("options", "only"), [
    (("--doctor",), {"src/kirocrew_acme/doctor.py", "tests/test_doctor.py"}),
    (("--server",), {"src/kirocrew_acme/server.py", "src/kirocrew_acme/command.py", "tests/test_server.py"}),
    (("--tool",), {"src/kirocrew_acme/greeting.py", "src/kirocrew_acme/tools.py", "tests/test_tool.py"}),
])
def test_each_option_writes_its_seam_and_its_test_and_nothing_else(work, options, only):
    files = scaffold.render_plugin("acme", [option.removeprefix("--") for option in options])
    common = {"pyproject.toml", "README.md", "src/kirocrew_acme/__init__.py", "src/kirocrew_acme/plugin.py",
              "tests/conftest.py"}
    assert set(files) == common | only
    for path, text in files.items():
        if path.endswith(".py"):
            ast.parse(text, path)  # every generated module is Python
    hooks = {node.name for node in ast.parse(files["src/kirocrew_acme/plugin.py"]).body
             if isinstance(node, ast.FunctionDef)}
    assert hooks == {"--doctor": {"doctor_checks"}, "--tool": {"core_mcp_tools"},
                     "--server": {"register_commands", "host_mcp_servers", "managed_mcp_servers"}}[options[0]]


@pytest.mark.parametrize("parts", [EVERYTHING, ("--page",), ("--tool",), ("--server",), ("--doctor",)],
                         ids=lambda parts: "+".join(part.removeprefix("--") for part in parts))
def test_the_generated_code_passes_the_repositorys_ruff_rules(work, parts):
    root = scaffold.write_plugin(work / "kirocrew-acme",
                                 scaffold.render_plugin("acme", [part.removeprefix("--") for part in parts]))
    executable = Path(sys.executable).with_name("ruff")  # the test extra's, beside this Python
    config = Path(__file__).resolve().parents[2] / "pyproject.toml"
    # Our rules, the annotations rules included for its tests too (they are typed, for mypy --strict).
    checked = subprocess.run([str(executable), "check", "--no-cache", "--config", str(config),
                              str(root / "src"), str(root / "tests")], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("parts", [EVERYTHING, ("--doctor",)],
                         ids=lambda parts: "+".join(part.removeprefix("--") for part in parts))
def test_the_generated_plugin_and_its_tests_pass_mypy_strict_as_its_pyproject_configures_it(work, parts):
    """An author's ``mypy`` in the plugin's folder: kirocrew's packages are typed (py.typed), so nothing is skipped."""
    root = scaffold.write_plugin(work / "kirocrew-acme",
                                 scaffold.render_plugin("acme", [part.removeprefix("--") for part in parts]))
    assert '[tool.mypy]\nstrict = true' in (root / "pyproject.toml").read_text()
    env = {key: value for key, value in os.environ.items() if key != "MYPYPATH"}
    checked = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", os.devnull], cwd=root, env=env,
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0 and checked.stdout.startswith("Success"), checked.stdout + checked.stderr


@pytest.mark.parametrize("name", ["../evil", "a/b", "Acme", "acme-tools", "1acme", "acme__x", "acme_", "", "é",
                                  "a" * 33, "acme\n", "-h"])
def test_an_invalid_name_is_refused_and_nothing_is_written(kirocrew, work, name):
    before = _listing(work)
    result = kirocrew("plugin", "new", "--", name, cwd=work)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "error[invalid_plugin_name]" in result.stderr
    assert _listing(work) == before


@pytest.mark.parametrize("name", ["core", "cron", "mcp", "testing", "companion"])
def test_a_name_of_kirocrews_own_distributions_is_refused(kirocrew, work, name):
    result = kirocrew("plugin", "new", name, cwd=work)
    assert (result.returncode, "error[plugin_name_reserved]" in result.stderr) == (2, True), result.stderr
    assert list(work.iterdir()) == []


def test_the_reserved_names_are_the_repositorys_distributions():
    import tomllib

    repository = Path(__file__).resolve().parents[2]
    members = {tomllib.loads(path.read_text())["project"]["name"]
               for path in [*repository.glob("kirocrew_*/pyproject.toml"),
                            *repository.glob("kirocrew_plugins/*/pyproject.toml")]}
    assert {f"kirocrew-{name}" for name in scaffold.RESERVED_NAMES} == members


def test_a_target_that_holds_anything_is_refused_and_left_as_it_was(kirocrew, work):
    target = work / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("keep me")
    as_file = work / "a-file"
    as_file.write_text("keep me too")
    link = work / "a-link"
    link.symlink_to(work / "elsewhere")
    for where in (target, as_file, link):
        result = kirocrew("plugin", "new", "acme", "--dir", str(where), cwd=work)
        assert result.returncode == 2 and "error[target_exists]" in result.stderr, (where, result.stderr)
    assert _listing(work) == ["a-file", "a-link", "mine", "mine/notes.txt"]
    assert (target / "notes.txt").read_text() == "keep me" and as_file.read_text() == "keep me too"


def test_an_empty_folder_is_filled_and_a_missing_parent_is_refused(kirocrew, work):
    empty = work / "empty"
    empty.mkdir()
    assert kirocrew("plugin", "new", "acme", "--tool", "--dir", str(empty), cwd=work).returncode == 0
    assert (empty / "src" / "kirocrew_acme" / "tools.py").is_file()
    missing = kirocrew("plugin", "new", "acme", "--dir", str(work / "no" / "such"), cwd=work)
    assert missing.returncode == 2 and "error[target_parent_missing]" in missing.stderr
    assert not (work / "no").exists()


def test_a_write_that_fails_midway_leaves_no_folder_behind(work):
    # "src" is a file, so "src/x.py" cannot be written: the staging folder goes, the target never appears.
    with pytest.raises(KirocrewError) as failed:
        scaffold.write_plugin(work / "kirocrew-acme", {"README.md": "x", "src": "a file", "src/x.py": "y"})
    assert failed.value.code == "target_unwritable"
    assert list(work.iterdir()) == []


def test_a_folder_it_may_not_write_in_is_refused_with_a_code(kirocrew, work):
    from kirocrew_testing.requirements import without_file_privileges

    locked = work / "locked"
    locked.mkdir(mode=0o555)
    argv = without_file_privileges(kirocrew_argv("plugin", "new", "acme", "--dir", str(locked / "kirocrew-acme")))
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "error[target_unwritable]" in result.stderr, result.stderr
    assert list(locked.iterdir()) == []


def test_an_unknown_contribution_is_refused():
    with pytest.raises(BadInputError) as refused:
        scaffold.render_plugin("acme", ["widget"])
    assert refused.value.code == "bad_contribution"


def test_the_help_says_what_the_default_writes(kirocrew):
    shown = kirocrew("plugin", "new", "--help")
    assert shown.returncode == 0
    assert "Without an option it writes --page and --tool" in " ".join(shown.stdout.split())
    assert "plugin" in kirocrew("--help").stdout


# -- the worked example in the docs is the scaffold's output ------------------------------------------------

def _files_shown(page: str, replace: dict[str, str] | None = None) -> tuple[dict[str, str], str]:
    """``{path: code}``: the first fenced block (``` or ~~~) after each ``### `path` `` heading of ``page``; and
    the page with those blocks' code replaced by ``replace``'s, where it names the path."""
    shown: dict[str, str] = {}
    out: list[str] = []
    path: str | None = None
    fence: str | None = None
    lines: list[str] = []
    for line in page.splitlines(keepends=True):
        if fence is not None:
            if line.rstrip("\n") == fence:
                assert path is not None
                shown[path] = "".join(lines)
                out.append((replace or {}).get(path, shown[path]))
                path, fence = None, None
            else:
                lines.append(line)
                continue
        elif heading := re.fullmatch(r"### `([^`]+)`\n", line):
            path = heading.group(1)
        elif path is not None and line.startswith(("```", "~~~")):
            fence, lines = line[:3], []
        out.append(line)
    return shown, "".join(out)


def test_the_worked_example_page_shows_exactly_what_the_scaffold_writes():
    page = WORKED_EXAMPLE.read_text()
    shown, refreshed = _files_shown(page, _example())
    assert list(shown) == list(_example()), "the page's files, in order, are the scaffold's"
    assert refreshed == page, f"the page's code differs from what `kirocrew plugin new` writes: run {__file__}"
    assert "kirocrew plugin new acme " + " ".join(EVERYTHING) in page


def test_the_plugin_guides_smallest_plugin_is_what_plugin_new_hello_doctor_writes():
    guide = (DOCS / "writing-plugins.md").read_text()
    written = scaffold.render_plugin("hello", ["doctor"])
    assert "`kirocrew plugin new hello --doctor` writes one" in guide
    assert f"```toml\n{written['pyproject.toml']}```" in guide
    for path in written:
        assert f"  {path}" in guide, f"the guide's tree lacks {path}"


def _example() -> dict[str, str]:
    return scaffold.render_plugin("acme", [option.removeprefix("--") for option in EVERYTHING])


if __name__ == "__main__":  # rewrites the worked example's code from the templates, leaving its prose
    WORKED_EXAMPLE.write_text(_files_shown(WORKED_EXAMPLE.read_text(), _example())[1])
