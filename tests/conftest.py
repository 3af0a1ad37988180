"""Fixtures more than one test folder of this repository uses (kirocrew_testing's are loaded per module)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def conversations_rows(conversations_state_dir: Path) -> Any:
    """``conversations_rows(sql, *params)``: what the served host's conversations store holds on disk.

    Here, not in kirocrew_testing, because that distribution does not depend on kirocrew-conversations.
    """
    from kirocrew_conversations.state_paths import DATABASE_NAME
    from kirocrew_testing.browser import sqlite_rows

    return lambda sql, *params: sqlite_rows(conversations_state_dir / DATABASE_NAME, sql, *params)
