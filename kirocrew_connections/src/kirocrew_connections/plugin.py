"""kirocrew-connections hook implementations (entry point ``connections``).

Every ``kirocrew`` run that loads plugins imports this module, so it stays cheap: the command group is
registered by import path and the routes import their handlers only per request.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kirocrew_core import hookimpl
from kirocrew_core.contributions import DashboardPage, HostService, ProtectedPath, SecretFile

from kirocrew_connections.clients import register_config_keys

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.routing import BaseRoute

    from kirocrew_core.cli import KirocrewCLI
    from kirocrew_mcp.public import ServerManager

log = logging.getLogger(__name__)

# connections.<slug>.client_id for the shipped pre-registered providers (declared before any config read).
register_config_keys()


@hookimpl
def register_commands(cli: KirocrewCLI) -> None:
    cli.add_lazy_command("connections", "kirocrew_connections.cli:connections",
                         "Connect accounts through OAuth MCP servers: providers, L0/L1 checks.")


@hookimpl
def protected_paths() -> list[ProtectedPath]:
    """Pre-registered OAuth client secrets: a session reads them only with the owner's say-so, never writes them."""
    from kirocrew_connections.clients import clients_dir

    return [ProtectedPath(clients_dir(), secret=True, label="OAuth client secrets")]


@hookimpl
def secret_files() -> list[SecretFile]:
    """Each pre-registered OAuth client's secret (one file per provider): no stored or shown result carries one.

    The ``KIROCREW_CONNECTIONS_<SLUG>_CLIENT_SECRET`` variables are secret-named: the redactor knows those itself.
    """
    from kirocrew_connections.clients import clients_dir

    return [SecretFile(clients_dir(), label="OAuth client secrets")]


@hookimpl
def gateway_routes() -> list[BaseRoute]:
    from kirocrew_connections.api import routes

    return routes()


@hookimpl
def dashboard_pages() -> list[DashboardPage]:
    from kirocrew_connections.page import PACKAGE, connections_page

    return [DashboardPage("/connections", "Connections", connections_page,
                          "Connect accounts (Notion, Linear, …): Connect, Test and Disconnect per provider",
                          package=PACKAGE)]


@hookimpl
def mcp_server_managers(servers: Sequence[Mapping[str, Any]]) -> dict[str, ServerManager]:
    """The entries Connect installed (a visible provider's slug with its MCP URL) are the Connections page's."""
    from kirocrew_mcp.public import ServerManager

    from kirocrew_connections.cards import managed_entries
    from kirocrew_connections.registry import routed_registry

    manager = ServerManager("Connections", "/connections")
    return {name: manager for name in managed_entries(routed_registry().visible(), servers)}


_boot_tasks: set[Any] = set()  # the scavenge task, kept referenced until it ends


def _scavenge_warm_generations() -> None:
    """A previous gateway's warm generation trees whose host and runtime are provably dead go (off the loop)."""
    try:
        from kirocrew_connections.warm_files import scavenge_generations  # never the engine itself

        removed = scavenge_generations()
    except Exception as exc:  # noqa: BLE001 - unproven residue is kept; boot never fails for it
        log.warning("warm mint scavenge failed: %s", type(exc).__name__)
        return
    if removed:
        log.info("removed %d dead warm mint generation(s)", removed)


@hookimpl
def gateway_startup(app: Starlette) -> None:
    """Schedule the warm-generation scavenge in a worker thread; it never delays serving."""
    import asyncio

    task = asyncio.get_running_loop().create_task(asyncio.to_thread(_scavenge_warm_generations))
    _boot_tasks.add(task)
    task.add_done_callback(_boot_tasks.discard)


@hookimpl
def agent_tool_aliases(servers: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Same-named tools of the providers the agent file mounts, renamed ``<slug>_<tool>`` for every claimant."""
    from kirocrew_connections.registry import routed_registry
    from kirocrew_connections.tool_aliases import mounted_tool_aliases

    return mounted_tool_aliases(routed_registry().all(), servers)


@hookimpl
def gateway_shutdown(app: Starlette) -> Any:
    """Retire the warm process, then release held mint processes (each owns a consent listener).

    A gateway that never minted or warmed imports nothing.
    """
    if sys.modules.get("kirocrew_connections.warm") is None and sys.modules.get("kirocrew_connections.mint") is None:
        return None
    return _stop_mints()


async def _stop_mints() -> None:
    warm = sys.modules.get("kirocrew_connections.warm")
    if warm is not None:
        try:
            await warm.shutdown_warm_mint()
        except Exception as exc:  # noqa: BLE001 - the cold mints must still be released
            log.warning("warm mint shutdown failed: %s", type(exc).__name__)
    mint = sys.modules.get("kirocrew_connections.mint")
    if mint is not None:
        await mint.aclose_engine()


async def _nothing() -> None:
    return None


def _mints_busy() -> str | None:
    """A mint waiting for the owner's consent keeps the host up; a host that never minted imports nothing."""
    mint = sys.modules.get("kirocrew_connections.mint")
    count = mint.mints_in_progress() if mint is not None else 0
    return f"{count} connection mint(s) in progress" if count else None


@hookimpl
def host_services() -> list[HostService]:
    """No work at start or stop (``gateway_shutdown`` releases the mints); only what keeps the host busy."""
    return [HostService("connections", _nothing, _nothing, _mints_busy)]
