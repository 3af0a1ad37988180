"""Small test plugins, so a test registers hook implementations without boilerplate.

    register_plugin(plugin_manager, "policy", governance_ceiling=lambda: ["@notion"])
    plugin_manager.register(ManagedServers(server), name="managed")
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kirocrew_core.contributions import ManagedMcpServer
from kirocrew_core.markers import hookimpl


def make_plugin(name: str, **impls: Callable[..., Any]) -> type:
    """A plugin (a class pluggy can register) whose hook implementations are ``impls``."""
    return type(name, (), {hook: staticmethod(hookimpl(fn)) for hook, fn in impls.items()})


def register_plugin(pm: Any, name: str, **impls: Callable[..., Any]) -> type:
    """Register :func:`make_plugin` ``(name, **impls)`` on ``pm`` under ``name``; return it."""
    plugin = make_plugin(name, **impls)
    pm.register(plugin, name=name)
    return plugin


class ManagedServers:
    """Implements ``managed_mcp_servers``; change ``.servers`` to change what it returns."""

    def __init__(self, *servers: ManagedMcpServer) -> None:
        self.servers = list(servers)

    @hookimpl
    def managed_mcp_servers(self) -> list[ManagedMcpServer]:
        return self.servers


class BlockingServerSource:
    """An ``extra_mcp_servers`` source that holds the agent-file render until the test lets it go.

    ``entered`` is set once a render is inside it; ``release.set()`` lets it return ``servers``.
    """

    def __init__(self, servers: dict[str, dict[str, Any]], wait_secs: float = 60.0) -> None:
        import threading

        self.servers, self.wait_secs = servers, wait_secs
        self.entered, self.release = threading.Event(), threading.Event()

    @hookimpl
    def extra_mcp_servers(self) -> dict[str, dict[str, Any]]:
        self.entered.set()
        assert self.release.wait(self.wait_secs), "the test never released the render"
        return self.servers


def installed_managed_server_names() -> frozenset[str]:
    """Names of the managed MCP servers the installed plugins render into every agent file.

    For tests of the real CLI that compare a rendered agent file with the user's servers:
    the installed plugins' own servers (``kirocrew-conversations``, ...) are there too.
    """
    from kirocrew_core.contributions import flatten
    from kirocrew_core.plugins import collect, make_plugin_manager

    return frozenset(c.value.name for c in flatten(collect(make_plugin_manager(), "managed_mcp_servers")))
