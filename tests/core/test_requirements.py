"""A missing system prerequisite skips locally and fails where ``.ci/run`` promises it."""

from __future__ import annotations

import pytest

from kirocrew_testing.requirements import REQUIRE_ENV, unavailable


def test_a_missing_prerequisite_is_a_visible_skip_by_default(monkeypatch):
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="needs bwrap"):
        unavailable("needs bwrap")


def test_a_missing_prerequisite_fails_where_the_environment_promises_it(monkeypatch):
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="needs bwrap"):
        unavailable("needs bwrap")


def test_ci_promises_every_system_prerequisite():
    from pathlib import Path

    ci = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    assert f"export {REQUIRE_ENV}=1" in ci


def test_a_present_program_is_found_and_an_absent_one_names_its_package(monkeypatch, tmp_path):
    from kirocrew_testing.requirements import executable

    program = tmp_path / "toolx"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    assert executable("missing-tool", apt="pkg", also=("toolx",)) == str(program)
    with pytest.raises(pytest.skip.Exception, match=r"needs nothing-here \(apt: some-package; .ci/run installs it\)"):
        executable("nothing-here", apt="some-package")
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="nothing-here"):
        executable("nothing-here", apt="some-package")


def test_every_program_a_test_requires_is_installed_by_ci_and_hidden_by_the_bare_machine_check():
    """A test (or the test kit) asking for a system program names its Debian package: .ci/run must install it,
    and .ci/without-system-deps must hide the program, or the two kinds of run would not both be checked."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    ci = (root / ".ci" / "run").read_text()
    hidden = (root / ".ci" / "without-system-deps").read_text()
    calls = set()
    # The test kit asks too (kirocrew_testing.browser finds chromium for every browser test).
    sources = [*(root / "tests").rglob("*.py"), *(root / "kirocrew_testing" / "src").rglob("*.py")]
    for source in sources:
        if source == Path(__file__).resolve():
            continue  # this file's examples name made-up programs
        calls |= set(re.findall(r'executable\("([^"]+)", apt="([^"]+)"', source.read_text()))
    assert {"bwrap", "chromium", "git"} <= {program for program, _ in calls}
    for program, package in calls:
        assert re.search(rf"\b{re.escape(package)}\b", ci), f".ci/run does not install {package} (for {program})"
        assert f" {program} " in hidden, f".ci/without-system-deps does not hide {program}"
