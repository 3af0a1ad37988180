"""Where a twin command's tool call goes: to the host, or in this process when ``KIROCREW_NO_HOST`` says so.

A twin (``kirocrew cron …``, ``kirocrew artifact …``, ``kirocrew knowledge …``) calls its tool
on the host as a ``cli`` client through the standard-library client
(:func:`kirocrew_core.host.tool_client.call_text`), so who it acts for is decided by its process
ancestry exactly as for the tool. ``KIROCREW_NO_HOST=1`` (:func:`host_disabled`) asks for the
same handler in this process instead, as the person, for environments where no background
process may run; both ways a refusal is raised with the same code and exit status.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

NO_HOST_ENV = "KIROCREW_NO_HOST"
_FALSE = frozenset({"", "0", "false", "no", "off"})

#: A tool call in this process: ``(text, None)``, or ``(message, code)`` for a refusal.
InProcess = Callable[[], Coroutine[Any, Any, tuple[str, str | None]]]


def host_disabled(env: Mapping[str, str] | None = None) -> bool:
    """True when ``KIROCREW_NO_HOST`` asks commands to work in process rather than through the host."""
    return (os.environ if env is None else env).get(NO_HOST_ENV, "").strip().lower() not in _FALSE


def call(server: str, tool: str, arguments: dict[str, Any], in_process: InProcess) -> str:
    """``tool``'s text from the hosted ``server``, or from ``in_process()`` without a host; a refusal raised."""
    from kirocrew_core.host import tool_client

    if not host_disabled():
        return tool_client.call_text(server, tool, arguments)
    import asyncio

    text, code = asyncio.run(in_process())
    if code is not None:
        raise tool_client.refusal(code, text)
    return text
