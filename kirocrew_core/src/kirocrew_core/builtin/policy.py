"""Core builtin plugin: the permission policy (``kirocrew policy``, the Policy page, core's protected paths).

Nothing heavy at import: this module is loaded by every ``kirocrew`` invocation; the gate, its
parser and its routes are imported by the functions that use them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core.markers import hookimpl

if TYPE_CHECKING:
    from kirocrew_core.cli import KirocrewCLI
    from kirocrew_core.contributions import ProtectedPath


@hookimpl
def register_commands(cli: KirocrewCLI) -> None:
    cli.add_lazy_command("policy", "kirocrew_core.gate.cli:policy",
                         "List, add, remove and check the permission policy's rules (what sessions may run).")


@hookimpl
def protected_paths() -> list[ProtectedPath]:
    """The crew home (its token, audit key and policy as secrets), the rendered agent, kiro-cli's OAuth grants."""
    from kirocrew_core.gate.protections import core_protected_paths

    return core_protected_paths()
