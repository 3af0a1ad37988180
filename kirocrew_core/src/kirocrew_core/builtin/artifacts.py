"""Core builtin plugin: artifacts (the ``artifact_*`` and ``deploy_artifact`` tools, ``kirocrew artifact`` and
``kirocrew deploy``, and the built-in ``local`` deploy destination).

Also the Artifacts page and its routes (:mod:`kirocrew_core.artifacts.page`, :mod:`kirocrew_core.artifacts.api`).

Nothing heavy at import: this module is loaded by every ``kirocrew`` invocation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core.contributions import DashboardPage
from kirocrew_core.markers import hookimpl

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

    from kirocrew_core.cli import KirocrewCLI
    from kirocrew_core.contributions import CoreMcpTool, DeployDestination, HostedMcpServer


@hookimpl
def register_commands(cli: KirocrewCLI) -> None:
    cli.add_lazy_command("artifact", "kirocrew_core.artifacts.cli:artifact",
                         "List, read, save, revise and review artifacts sessions made (twins of the artifact_* tools).")
    cli.add_lazy_command("deploy", "kirocrew_core.artifacts.cli:deploy",
                         "Confirm, discard or list the deploys sessions asked for (deploy_artifact).")


@hookimpl
def core_mcp_tools() -> list[CoreMcpTool]:
    from kirocrew_core.artifacts.tools import artifact_tools

    return artifact_tools()


@hookimpl(trylast=True)
def deploy_destinations() -> list[DeployDestination]:
    """The local web root; ``trylast`` so an edition's own ``local`` wins."""
    from kirocrew_core.artifacts.deploy import local_destination

    return [local_destination()]


@hookimpl
def host_mcp_servers() -> list[HostedMcpServer]:
    """``kirocrew-artifacts-admin``: the owner's decisions, which ``kirocrew artifact``/``deploy`` call."""
    from kirocrew_core.artifacts.admin import hosted_server

    return [hosted_server()]


@hookimpl
def gateway_routes() -> list[BaseRoute]:
    from kirocrew_core.artifacts.api import routes

    return routes()


async def _list(request: Request) -> Response:
    from kirocrew_core.artifacts.page import artifacts_page

    return await artifacts_page(request)


async def _one(request: Request) -> Response:
    from kirocrew_core.artifacts.page import artifact_page

    return await artifact_page(request)


@hookimpl
def dashboard_pages() -> list[DashboardPage]:
    return [DashboardPage("/artifacts", "Artifacts", _list,
                          "What sessions made for you, versioned: read, compare versions, comment on a passage, "
                          "resolve; confirm or discard the deploys they asked for.", package="kirocrew_core.artifacts"),
            DashboardPage("/artifacts/{slug}", "Artifact", _one, package="kirocrew_core.artifacts")]
