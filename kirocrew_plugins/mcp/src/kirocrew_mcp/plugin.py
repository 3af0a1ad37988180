"""kirocrew-mcp hook implementations (entry point ``mcp``). Imports stay cheap."""

from __future__ import annotations

from kirocrew_core import hookimpl
from kirocrew_core.contributions import DoctorCheck, DoctorResult


def check_scope_files() -> DoctorResult:
    """Every MCP scope file kiro-cli sessions depend on is absent or valid JSON."""
    from kirocrew_core import home
    from kirocrew_core.jsonfile import ReadState, read_json

    lines, worst = [], "ok"
    for label, path in (
        ("Kiro global", home.kiro_global_mcp_file()),
        ("kirocrew", home.crew_mcp_file()),
        ("rendered agent", home.rendered_agent_file()),
    ):
        read = read_json(path)
        if read.state is ReadState.DOCUMENT and not isinstance(read.document, dict):
            lines.append(f"{label}: {path}: top level is not a JSON object")
            worst = "fail"
        elif read.known:
            lines.append(f"{label}: {path}: {read.state.value}")
        else:
            where = f"{path}:{read.line}" if read.line else str(path)
            lines.append(f"{label}: {where}: {read.state.value}: {read.error}")
            worst = "fail"
    summary = "MCP scope files are readable" if worst == "ok" else "an MCP scope file cannot be used"
    return DoctorResult(worst, summary, "\n".join(lines))


@hookimpl
def doctor_checks() -> list[DoctorCheck]:
    return [DoctorCheck("mcp.scope-files", check_scope_files, "MCP scope files are absent or valid JSON")]
