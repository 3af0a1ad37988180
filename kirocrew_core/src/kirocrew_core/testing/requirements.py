"""Skip a test whose system prerequisite is missing — except where the prerequisite is promised.

Locally a missing package (bubblewrap, Xvfb, AT-SPI) is a visible skip. ``.ci/run`` installs
every one of them and sets ``KIROCREW_REQUIRE_SYSTEM_DEPS=1``, so there the same gap fails
loudly instead of silently skipping a feature that should work.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIRE_ENV = "KIROCREW_REQUIRE_SYSTEM_DEPS"


def unavailable(reason: str) -> NoReturn:
    """Skip with ``reason``, or fail with it when the environment promises the prerequisite."""
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1: this environment must provide it)", pytrace=False)
    pytest.skip(reason)
