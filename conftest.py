"""Suite-wide isolation: every test runs with its own HOME, KIRO_HOME and KIROCREW_HOME,
fails if it writes anywhere outside its temporary directories, and fails if it
leaves a child process running."""

from __future__ import annotations

import pytest

pytest_plugins = ["kirocrew_testing.fixtures", "kirocrew_testing.process_guard"]


# process_guard first, so it is torn down last: isolated_homes' teardown stops a host the test
# started on demand before the guard looks for processes left running.
@pytest.fixture(autouse=True)
def _isolation(process_guard, isolated_homes, write_guard):
    yield
