"""Doctor checks for the render's invariants (wired up by ``kirocrew_mcp.plugin``).

- :func:`check_agent_file`: the rendered agent exists, kiro-cli 2.x would load
  it, ``includeMcpJson`` is false, every managed server is present and launches
  the live executable, no never-auto-approvable server carries a grant, and the
  last rebuild skipped no source (its warnings are shown).
- :func:`check_provider_globals`: no managed name sits in the Kiro global or a
  seam scope (leftover state from an older install; ``kirocrew cli-setup``
  cleans it).

Both only read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kirocrew_core import home
from kirocrew_core.contributions import DoctorResult, DoctorStatus
from kirocrew_core.jsonfile import ReadState, read_json

if TYPE_CHECKING:
    from kirocrew_core.plugins import KirocrewPluginManager


def _worst(a: DoctorStatus, b: DoctorStatus) -> DoctorStatus:
    order = {"ok": 0, "warn": 1, "fail": 2}
    return a if order[a] >= order[b] else b


def check_agent_file(pm: KirocrewPluginManager | None = None) -> DoctorResult:
    """The rendered agent file is present, loadable and holds what the rebuild promises."""
    from kirocrew_mcp import managed
    from kirocrew_mcp.render import AGENT_FIELDS, last_rebuild_state

    path = home.rendered_agent_file()
    read = read_json(path)
    if read.state in (ReadState.ABSENT, ReadState.EMPTY):
        return DoctorResult("warn", "the kirocrew agent is not rendered yet", f"{path}: run `kirocrew mcp rebuild`")
    if read.state is not ReadState.DOCUMENT or not isinstance(read.document, dict):
        detail = f"{path}: {read.state.value}: {read.error or 'top level is not a JSON object'}"
        return DoctorResult("fail", "kiro-cli cannot load the kirocrew agent", detail + "; run `kirocrew mcp rebuild`")
    doc: dict[str, Any] = read.document
    status: DoctorStatus = "ok"
    lines: list[str] = []
    unknown = sorted(set(doc) - set(AGENT_FIELDS))
    if unknown:
        status = "fail"
        lines.append(f"fields kiro-cli 2.x refuses: {', '.join(unknown)} (the whole agent fails to load)")
    if doc.get("includeMcpJson") is not False:
        status = "fail"
        lines.append("includeMcpJson is not false: kiro-cli would merge the Kiro global a second time")
    raw_servers = doc.get("mcpServers")
    servers = raw_servers if isinstance(raw_servers, dict) else {}
    try:
        owned = managed.managed_servers(pm)
    except Exception as exc:  # noqa: BLE001 - a conflict is itself the finding
        owned = {}
        status = "fail"
        lines.append(str(exc))
    executable = managed.kirocrew_executable() if owned else None
    for name, server in owned.items():
        entry = servers.get(name)
        if not isinstance(entry, dict):
            status = _worst(status, "warn")
            lines.append(f"managed server {name} is missing; run `kirocrew mcp rebuild`")
            continue
        command, args = managed.managed_invocation(server, executable)
        if entry.get("command") != command or entry.get("args") != args:
            status = _worst(status, "warn")
            lines.append(f"managed server {name} launches a stale command; run `kirocrew mcp rebuild`")
        if not server.may_auto_approve and "autoApprove" in entry:
            status = "fail"
            lines.append(f"{name} carries autoApprove, which bypasses the approval gate")
    state = last_rebuild_state()
    warnings = [w for w in state.get("warnings", []) if isinstance(w, str)] if isinstance(state, dict) else []
    if warnings:
        status = _worst(status, "warn")
        lines.append("the last rebuild said:")
        lines.extend(f"  {w}" for w in warnings)
    summary = {
        "ok": f"the kirocrew agent is rendered with {len(servers)} MCP servers",
        "warn": "the kirocrew agent needs attention",
        "fail": "the kirocrew agent is broken",
    }[status]
    return DoctorResult(status, summary, "\n".join([str(path), *lines]))


def check_provider_globals(pm: KirocrewPluginManager | None = None) -> DoctorResult:
    """No managed server name lingers in a shared global (Kiro's or a seam scope's)."""
    from kirocrew_mcp.cleanup import reserved_managed_names
    from kirocrew_mcp.scopes import KIND_CREW, all_scopes, read_scope_servers

    # The same names `kirocrew cli-setup` removes, so doctor and the cleanup agree.
    names = reserved_managed_names(pm)
    found: list[str] = []
    for scope in all_scopes(pm):
        if scope.kind == KIND_CREW:
            continue
        read = read_scope_servers(scope)
        found.extend(f"{scope.path}: {name}" for name in sorted(names & set(read.servers)))
    if not found:
        return DoctorResult("ok", "no kirocrew-managed server is in a shared MCP global")
    return DoctorResult(
        "warn",
        "kirocrew-managed servers linger in a shared MCP global (left by an older install)",
        "\n".join([*found, "run `kirocrew cli-setup`, or press \"Remove them\" on the dashboard's MCP servers page"]),
    )
