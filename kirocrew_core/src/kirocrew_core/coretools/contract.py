"""What a ``kirocrew-core`` tool handler receives, and the session a call resolves to.

Kept free of heavy imports: plugins build :class:`~kirocrew_core.contributions.CoreMcpTool`
values at import time and name these types in their handlers' signatures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from kirocrew_core.errors import KirocrewError

if TYPE_CHECKING:
    from kirocrew_core.host.caller import CallerContext

# What a session key names: a conversation's kiro-cli (its runs; a sub-agent and a cron job's run are
# runs of conversations of their own). ``cron`` is reserved for a job run outside any conversation
# (none today); a tool that serves only conversations refuses other kinds. The kind is part of a job
# owner's name in kirocrew-cron (``conversation:<id>``).
SessionKind = Literal["conversation", "cron"]
# How a tool resolves its caller: ``strict`` (anything that mutates or targets a session: the
# injected key or a verified sidecar, never a walk, never an unsigned file; an unresolved caller
# is refused before the handler runs), ``lenient`` (read-only and telemetry: the strict answer, or
# None), ``none`` (the tool never looks).
Identity = Literal["strict", "lenient", "none"]


@dataclass(frozen=True)
class CrewSession:
    """A crew session the host issued a key to: who a verified call comes from.

    ``target_id`` is what the session acts for (the conversation id, the cron job id);
    ``agent`` the Kiro agent its kiro-cli runs (its tool policy); ``workspace`` its working
    directory's workspace root, when it has one.
    """

    key: str
    kind: SessionKind
    target_id: str
    agent: str | None = None
    workspace: str | None = None


class ToolRefused(KirocrewError):
    """A tool call refused with a stable code: the call's result is an error naming it, nothing changed."""


@dataclass(frozen=True)
class ToolCall:
    """One ``tools/call`` as a handler sees it.

    ``session`` is resolved per call from ``caller`` by the tool's :data:`Identity`
    (always set for a ``strict`` tool: the server refuses an unresolved caller itself).
    ``caller`` is the verified caller block of the host connection (None outside the host).
    """

    tool: str
    session: CrewSession | None
    caller: CallerContext | None
    identity: Identity

    def require_session(self) -> CrewSession:
        """The caller's session, or :class:`ToolRefused` ``caller_unverified``."""
        if self.session is None:
            raise ToolRefused(f"{self.tool} needs a verified kirocrew session: this caller has no session key "
                              "the host issued (or a verified pid sidecar), so it cannot act on a session",
                              code="caller_unverified")
        return self.session


def tool_args(raw: Any) -> dict[str, Any]:
    """The arguments object of a call (``{}`` when the client sent none)."""
    return dict(raw) if isinstance(raw, dict) else {}
