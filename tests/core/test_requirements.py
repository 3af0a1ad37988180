"""A missing system prerequisite skips locally and fails where ``.ci/run`` promises it."""

from __future__ import annotations

import pytest

from kirocrew_core.testing.requirements import REQUIRE_ENV, unavailable


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
