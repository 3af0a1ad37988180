"""Core's fallback for ``agent_file_ready``: the rendered agent's file exists and holds a JSON object.

``trylast``, so kirocrew-mcp (which also waits for the host's render) is asked first; without
kirocrew-mcp installed this plain check is all there is. Every ``kirocrew`` invocation loads this
module, so asyncio is imported only when the hook is called.
"""

from __future__ import annotations

from collections.abc import Awaitable

from kirocrew_core.markers import hookimpl


@hookimpl(trylast=True)
def agent_file_ready() -> Awaitable[str | None]:
    import asyncio

    from kirocrew_core.agent_file import file_problem

    return asyncio.to_thread(file_problem)
