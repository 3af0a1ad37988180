"""Suite-wide isolation: every test runs with its own HOME, KIRO_HOME and KIROCREW_HOME,
fails if it writes anywhere outside its temporary directories, and fails if it
leaves a child process running."""

from __future__ import annotations

import pytest

pytest_plugins = ["kirocrew_testing.fixtures", "kirocrew_testing.process_guard"]


@pytest.fixture(autouse=True)
def _isolation(isolated_homes, write_guard, process_guard):
    yield
