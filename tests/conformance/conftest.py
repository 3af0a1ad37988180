"""Fixtures of the conformance tests: ``mcp_client`` runs each third-party client in turn.

The clients and the report they return are in ``conformance_clients.py``; test modules import
it (and this folder's ``node_sdk.py``) by putting this folder on ``sys.path``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from kirocrew_core.testing.requirements import unavailable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conformance_clients import Runner, run_python_client, run_typescript_client  # noqa: E402
from node_sdk import ensure_installed  # noqa: E402


@pytest.fixture(scope="session")
def node_sdk() -> None:
    """The pinned TypeScript SDK in ``node_modules/`` (installed once, shared by xdist workers)."""
    problem = ensure_installed()
    if problem:
        unavailable(problem)


@pytest.fixture(params=["typescript", "python"])
def mcp_client(request: pytest.FixtureRequest) -> Runner:
    """Each third-party client in turn: ``mcp_client(server, calls)`` returns its report."""
    if request.param == "typescript":
        request.getfixturevalue("node_sdk")
        return run_typescript_client
    return run_python_client
