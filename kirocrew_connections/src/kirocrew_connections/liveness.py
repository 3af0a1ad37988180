"""The Test action: does a connection answer inside a real kiro-cli session?

kiro-cli holds the bearer, so the only honest liveness check is one kiro-cli
runs itself. :func:`run_connection_test` starts a promptless ACP session
under the rendered ``kirocrew`` agent and executes two native commands with no
model turn: ``/mcp`` (did the server initialize and list its tools?) then
``/tools`` (which of its tools does the agent actually expose?). No provider
tool is ever called and no grant artifact is read; the verdict comes from
:func:`classify`, which the mint reuses so Test and Connect agree on "usable".
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kirocrew_core import home

USABLE = "usable"
NO_TOOLS = "no_tools"
FAILED = "failed"

#: One budget for spawn, session and both commands: a wedged kiro-cli is a verdict, not a hang.
TEST_TIMEOUT_SECS = 100.0
AGENT_NAME = "kirocrew"
#: kiro-cli asked for a fresh consent in the Test session over a pair that was on disk: the provider refused
#: the stored grant (revoked there, or its refresh token died). kiro-cli deletes such a token itself.
GRANT_REFUSED = "grant_refused"
#: kiro-cli asked for a consent and no pair was on disk: nothing was ever authorized here.
NOT_AUTHORIZED = "not_authorized"
_SERVER_SETTLED = frozenset({"initialized", "running", "failed", "disabled"})


@dataclass(frozen=True)
class ToolTestVerdict:
    """``verdict`` (usable | no_tools | failed), a stable ``code`` and the exposed ``tool_count``."""

    verdict: str
    code: str
    tool_count: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "code": self.code, "toolCount": self.tool_count}


def _failed(code: str) -> ToolTestVerdict:
    return ToolTestVerdict(FAILED, code, 0)


_NO_TOOLS = ToolTestVerdict(NO_TOOLS, "no_tools_exposed", 0)


def classify(results: Sequence[Any], alias: str) -> ToolTestVerdict:
    """Judge the ``data`` of ``/mcp`` and ``/tools`` (in that order) for the server ``alias``.

    A ``/mcp`` row that is not ``running`` is a failure, never an empty tool set:
    loading, failed and disabled each keep their own code so the card can say why.
    Only ``/tools`` rows sourced ``mcp:<alias>`` count, so a server that lists
    tools the agent does not mount is reported as exposing none.
    """
    if len(results) != 2:
        return _failed("invalid_tool_inventory")
    mcp_data, tools_data = results
    servers = mcp_data.get("servers") if isinstance(mcp_data, dict) else None
    if not isinstance(servers, list):
        return _failed("invalid_tool_inventory")
    row = next((r for r in servers if isinstance(r, dict) and r.get("name") == alias), None)
    if row is None:
        return _failed("mcp_server_not_loaded")
    status = row.get("status")
    if status != "running":
        if status in ("loading", "failed", "disabled"):
            return _failed(f"mcp_server_{status}")
        return _failed("mcp_server_unavailable")
    count = row.get("toolCount")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        return _failed("invalid_tool_inventory")
    if count == 0:
        return _NO_TOOLS
    tools = tools_data.get("tools") if isinstance(tools_data, dict) else None
    if not isinstance(tools, list):
        return _failed("invalid_tool_inventory")
    source = f"mcp:{alias}"
    exposed = {
        t["name"] for t in tools
        if isinstance(t, dict) and t.get("source") == source and isinstance(t.get("name"), str) and t["name"]
    }
    if not exposed:
        return _NO_TOOLS
    return ToolTestVerdict(USABLE, "tools_available", len(exposed))


def work_dir() -> Path:
    """Where the Test session runs: a private, empty folder, so no project agent or mcp.json joins in."""
    path = home.state_dir("connections") / "test"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


async def _inventory(session: Any, alias: str) -> ToolTestVerdict:
    results: list[Any] = []
    for command in ("mcp", "tools"):
        answer = await session.execute_command(command)
        if answer.success is False:
            return _failed(f"{command}_command_failed")
        results.append(answer.data)
    return classify(results, alias)


def _settled(state: Any, alias: str) -> bool:
    status = state.mcp_status.get(alias)
    return alias in state.oauth_servers or (status is not None and status.state in _SERVER_SETTLED)


async def _run_commands(alias: str, settle_timeout: float) -> tuple[ToolTestVerdict, bool]:
    """The verdict, and whether kiro-cli asked for a consent for ``alias`` during the session."""
    from kirocrew_core.acp_runtime import AcpOptions, AcpRuntime

    cwd = await asyncio.to_thread(work_dir)
    # No prompt is ever sent, so no model turn and no tool call can happen; with no
    # permission handler any request kiro-cli might make is rejected.
    async with AcpRuntime.start(AcpOptions(agent=AGENT_NAME, cwd=cwd)) as runtime:
        session = await runtime.new_session(cwd, mcp_servers=[])
        verdict = await _inventory(session, alias)
        if verdict.code == "mcp_server_loading":
            # Still starting: it may be waiting on a consent kiro-cli just asked for (a refused grant).
            await session.wait_until(lambda state: _settled(state, alias), settle_timeout)
            if alias not in session.oauth_servers:
                verdict = await _inventory(session, alias)
        return verdict, alias in session.oauth_servers


async def run_connection_test(alias: str, *, grant_url: str | None = None,
                              timeout: float = TEST_TIMEOUT_SECS) -> ToolTestVerdict:
    """Run the Test session for the server mounted as ``alias``; never raises for a runtime failure.

    ``grant_url`` is the provider's MCP URL: its grant pair is stat-ed (never
    opened) before the session, so a consent kiro-cli asks for during it reads
    :data:`GRANT_REFUSED` when a pair was there (the provider refused it) and
    :data:`NOT_AUTHORIZED` when none was. Cancellation still propagates (the
    runtime's own teardown runs on the way out).
    """
    from kirocrew_core.errors import KirocrewError

    present = await asyncio.to_thread(_agent_presence)
    if present is False:
        # Without the rendered agent kiro-cli falls back to its default agent, whose
        # servers are not the ones this card configured: a verdict there would be about
        # something else.
        return _failed("agent_not_rendered")
    held = await asyncio.to_thread(_grant_held, grant_url)
    try:
        async with asyncio.timeout(timeout):
            verdict, consent_asked = await _run_commands(alias, timeout / 2)
            if consent_asked:
                return _failed(GRANT_REFUSED if held else NOT_AUTHORIZED)
            return verdict
    except TimeoutError:
        return _failed("connection_test_timeout")
    except KirocrewError as exc:
        if exc.code == "acp_timeout":
            return _failed("connection_test_timeout")
        return _failed(exc.code if exc.code in _PASSED_THROUGH else "connection_test_failed")
    except (OSError, ValueError):
        return _failed("connection_test_failed")


# Runtime failures whose own code tells the owner what to fix.
_PASSED_THROUGH = frozenset({"kiro_cli_not_installed", "kiro_exited"})


def _grant_held(url: str | None) -> bool:
    """Whether the provider's grant pair was on disk (stat only; unknowable counts as held)."""
    from kirocrew_core.grants import grant_presence

    return url is not None and grant_presence(url) is not False


def _agent_presence() -> bool | None:
    from kirocrew_core.grants import artifact_presence

    return artifact_presence(home.rendered_agent_file())
