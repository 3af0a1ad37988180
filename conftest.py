"""Suite-wide isolation: every test runs with its own HOME, KIRO_HOME and KIROCREW_HOME,
and fails if it writes anywhere outside its temporary directories."""

from __future__ import annotations

import pytest

pytest_plugins = ["kirocrew_core.testing.fixtures"]


@pytest.fixture(autouse=True)
def _isolation(isolated_homes, write_guard):  # noqa: ANN001, ANN202 - fixtures by name
    yield
