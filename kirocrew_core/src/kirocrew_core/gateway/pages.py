"""Core's own dashboard pages: the Overview (doctor and plugins) and the refusal/sign-in page.

Both render through the shell's templates (:mod:`kirocrew_core.gateway.shell`); the
Overview is a status report (pages of the plugins, doctor results, installed plugins)
readable with a screen reader or a text browser, and needs no script.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kirocrew_core.gateway.shell import is_listed, render_page
from kirocrew_core.gateway.shell import render_refusal as _render_refusal

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import HTMLResponse

    from kirocrew_core.plugins import KirocrewPluginManager

_REFUSAL_TITLES = {401: "Sign in to kirocrew", 403: "Request refused", 421: "Wrong address"}


def _record_tool_problems(pm: KirocrewPluginManager) -> None:
    """Decide the kirocrew-core tool names, so the table shows each plugin's refusals (``tool_name_taken``)."""
    import contextlib

    from kirocrew_core.coretools.tool_names import ToolNameClash, collect_tools

    with contextlib.suppress(ToolNameClash):  # the doctor's core.plugins check, above the table, reports it
        collect_tools(pm)


def render_refusal(status: int, code: str, message: str) -> str:
    """The page a browser sees instead of a dashboard page it may not open."""
    return _render_refusal(status, code, _REFUSAL_TITLES.get(status, "Request refused"), message)


async def home(request: Request) -> HTMLResponse:
    """``GET /``, the Overview: the doctor checks run in a worker thread, since they spawn ``kiro-cli``."""
    from starlette.concurrency import run_in_threadpool

    from kirocrew_core.doctor import run_checks

    state = request.app.state.kirocrew
    outcomes = await run_in_threadpool(run_checks, state.pm)
    await run_in_threadpool(_record_tool_problems, state.pm)
    pages = [c for c in state.pages if is_listed(c.value)]
    return render_page(request, "core/overview.html", title="Overview", pages=pages, outcomes=outcomes,
                       records=state.pm.loaded_records())
