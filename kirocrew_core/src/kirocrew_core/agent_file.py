"""Whether a kiro-cli session may start on the rendered ``kirocrew`` agent: its file is there and usable.

kiro-cli reads its agent file once, when it starts, and on a missing or unparseable
one it runs on its default agent instead, with none of kirocrew's MCP servers. So
before kirocrew starts a kiro-cli on the rendered agent it asks the
``agent_file_ready`` hook (kirocrew-mcp waits for the host's startup render), and a
file that is not ready fails the start with ``agent_file_unavailable``: no kiro-cli
is spawned. Sessions on other agents are not checked: those files are the user's,
and kiro-cli refusing the mode says so.

- ``AgentFileUnavailable``: the error (code ``agent_file_unavailable``).
- ``file_problem(path=None, *, check=None) -> str | None``: the plain check, core's
  fallback for the hook: the file exists and holds a JSON object (and passes ``check``,
  a plugin's own test of the document).
- ``await require_ready(agent, pm=None)``: raises ``AgentFileUnavailable`` when
  ``agent`` is the rendered one and a plugin says why its file is not ready.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kirocrew_core import home
from kirocrew_core.errors import KirocrewError

if TYPE_CHECKING:
    from kirocrew_core.plugins import KirocrewPluginManager

AGENT_FILE_UNAVAILABLE = "agent_file_unavailable"
#: What the person can do about it, appended to every reason.
REMEDY = "render it with `kirocrew mcp rebuild` (a host renders it when it starts)"


class AgentFileUnavailable(KirocrewError):
    """The rendered agent's file is missing or unusable, so no kiro-cli was started on it."""

    code = AGENT_FILE_UNAVAILABLE


def file_problem(path: str | os.PathLike[str] | None = None, *,
                 check: Callable[[dict[str, Any]], str | None] | None = None) -> str | None:
    """Why the agent file at ``path`` (default: the rendered one) cannot be loaded; None when it can.

    ``check`` gets the parsed object and returns what is wrong with it (empty or None: nothing).
    """
    from kirocrew_core.jsonfile import ReadState, read_json

    read = read_json(home.rendered_agent_file() if path is None else path)
    name = read.path.name
    if read.state is ReadState.ABSENT:
        return f"the agent file {name} does not exist"
    if read.state is ReadState.EMPTY:
        return f"the agent file {name} is empty"
    if read.state is ReadState.UNREADABLE:
        return f"the agent file {name} cannot be read ({read.error})"
    if read.state is ReadState.MALFORMED:
        where = f" at line {read.line}" if read.line else ""
        return f"the agent file {name} is not valid JSON{where} ({read.error})"
    if not isinstance(read.document, dict):
        return f"the agent file {name} does not hold a JSON object"
    problem = check(read.document) if check is not None else None
    return f"the agent file {name} is malformed: {problem}" if problem else None


async def require_ready(agent: str | None, pm: KirocrewPluginManager | None = None) -> None:
    """Return once a session may start on ``agent``; :class:`AgentFileUnavailable` when it may not.

    Only the rendered agent (:data:`~kirocrew_core.home.RENDERED_AGENT`) is checked. Every
    ``agent_file_ready`` implementation is asked; the first reason in call order is the error's
    message, and a plugin that fails counts as a reason (fail closed: kiro-cli would run on its
    default agent).
    """
    if agent != home.RENDERED_AGENT:
        return
    from kirocrew_core.plugins import HookFailedError, acall_hook, get_plugin_manager

    try:
        call = await acall_hook(pm or get_plugin_manager(), "agent_file_ready", on_error="fail_closed",
                                check=_check_reason)
    except HookFailedError as exc:
        raise AgentFileUnavailable(f"the {agent} agent file could not be checked: {exc.failure.error}; "
                                   f"no kiro-cli was started") from exc
    reasons = [str(c.value) for c in call.contributions]
    if reasons:
        raise AgentFileUnavailable(f"{reasons[0]}; no kiro-cli was started on the {agent} agent. {REMEDY}")


def _check_reason(value: object) -> str | None:
    if value is None or (isinstance(value, str) and value.strip()):
        return None
    return f"agent_file_ready must return None or a non-empty reason, not {type(value).__name__}"
