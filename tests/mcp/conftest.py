"""These tests render with managed servers they register themselves (often a stand-in ``kirocrew-core``).

Core's own ``kirocrew-core`` entry (the builtin ``kirocrew_core.builtin.coretools``) is taken out
of the test's plugin manager, so what a test renders is exactly what it registered; tests that
run real processes render the installed plugins, core's server included.
"""

from __future__ import annotations

from typing import Any

import pytest

CORE_TOOLS_BUILTIN = "kirocrew_core.builtin.coretools"


@pytest.fixture(autouse=True)
def _only_the_managed_servers_a_test_registers(request: pytest.FixtureRequest) -> None:
    if "plugin_manager" in request.fixturenames:
        pm: Any = request.getfixturevalue("plugin_manager")
        if pm.get_plugin(CORE_TOOLS_BUILTIN) is not None:
            pm.unregister(name=CORE_TOOLS_BUILTIN)
