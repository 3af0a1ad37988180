"""Fixtures of the conformance tests: ``mcp_client`` runs each third-party client in turn.

The clients and the report they return are in ``conformance_clients.py``; test modules import
it (and this folder's ``node_sdk.py``) by putting this folder on ``sys.path``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from kirocrew_testing.requirements import unavailable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conformance_clients import Runner, run_python_client, run_typescript_client
from node_sdk import ensure_installed


@pytest.fixture(scope="session")
def node_sdk_problem() -> str | None:
    """Why the pinned TypeScript SDK cannot be had, or None once it is in ``node_modules/``.

    Session-scoped, so pytest sets it up before any test's own fixtures: the one-time ``npm ci``
    (shared by xdist workers) happens outside the write guard that holds each test to its tmp dirs.
    """
    return ensure_installed()


@pytest.fixture(params=["typescript", "python"])
def mcp_client(request: pytest.FixtureRequest, node_sdk_problem: str | None) -> Runner:
    """Each third-party client in turn: ``mcp_client(server, calls)`` returns its report."""
    if request.param == "typescript":
        if node_sdk_problem:
            unavailable(node_sdk_problem)
        return run_typescript_client
    return run_python_client
