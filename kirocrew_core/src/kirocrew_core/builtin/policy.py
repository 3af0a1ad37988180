"""Core builtin plugin: the permission policy (``kirocrew policy``, the Policy page, core's protected paths).

Nothing heavy at import: this module is loaded by every ``kirocrew`` invocation; the gate, its
parser and its routes are imported by the functions that use them.
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
    from kirocrew_core.contributions import DoctorCheck, DoctorResult, ProtectedPath


@hookimpl
def register_commands(cli: KirocrewCLI) -> None:
    cli.add_lazy_command("policy", "kirocrew_core.gate.cli:policy",
                         "List, add, remove and check the permission policy's rules (what sessions may run).")


@hookimpl
def protected_paths() -> list[ProtectedPath]:
    """The crew home (its token, audit key and policy as secrets), the rendered agent, kiro-cli's OAuth grants."""
    from kirocrew_core.gate.protections import core_protected_paths

    return core_protected_paths()


def check_policy() -> DoctorResult:
    """``policy.toml`` is absent or usable; when it is not, which policy is in force meanwhile."""
    from kirocrew_core.contributions import DoctorResult
    from kirocrew_core.gate.policy_file import load_policy, read_policy_file

    read = read_policy_file()
    if read.state == "absent":
        return DoctorResult("ok", "no policy.toml: the default permission policy applies", str(read.path))
    if read.usable:
        notes = "\n".join(read.problems)
        return DoctorResult("warn" if read.problems else "ok",
                            f"policy.toml has {len(read.rules)} rule(s)" + (" and notes" if notes else ""),
                            notes or str(read.path))
    in_force = load_policy()
    return DoctorResult("fail", "policy.toml cannot be used; the last good policy (or ask-everything) is in force",
                        "\n".join(in_force.problems))


@hookimpl
def doctor_checks() -> list[DoctorCheck]:
    from kirocrew_core.contributions import DoctorCheck

    return [DoctorCheck("core.policy", check_policy, "the permission policy (policy.toml) can be used")]


@hookimpl
def gateway_routes() -> list[BaseRoute]:
    from kirocrew_core.gate.api import routes

    return routes()


async def _policy(request: Request) -> Response:
    from kirocrew_core.gate.page import policy_page

    return await policy_page(request)


@hookimpl
def dashboard_pages() -> list[DashboardPage]:
    return [DashboardPage("/policy", "Policy", _policy,
                          "What crew sessions may run without asking: the rules in order of precedence, adding "
                          "and removing yours, checking a call, and the recent decisions.",
                          package="kirocrew_core.gate")]
