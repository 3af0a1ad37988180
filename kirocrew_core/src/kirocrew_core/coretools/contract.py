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
# How a tool resolves its caller: ``strict`` (anything that mutates or targets a session: the caller's
# session by its process ancestry; a caller that is no session's is refused before the handler runs),
# ``lenient`` (read-only and telemetry: the same answer, or None), ``none`` (the tool never looks).
Identity = Literal["strict", "lenient", "none"]
# Where a call comes from, by the caller's process ancestry (kirocrew_core.coretools.identity):
# ``session`` (a descendant of a kiro-cli the host started), ``person`` (of none, and not of the host:
# one of the owner's own processes), ``host`` (a process the host started for no session: nobody),
# ``unverified`` (no kernel credentials to go on), ``gone`` (the connection's process has exited).
Origin = Literal["session", "person", "host", "unverified", "gone"]


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
    ``origin`` is where the call comes from by process ancestry (:data:`Origin`), whatever the
    tool's identity.
    """

    tool: str
    session: CrewSession | None
    caller: CallerContext | None
    identity: Identity
    origin: Origin = "unverified"

    @property
    def is_person_command(self) -> bool:
        """The person's own ``kirocrew`` command (a CLI twin, caller session type ``cli``) outside every session.

        Only the ancestry makes it so: a twin run from a session's shell is that session, whatever its
        environment says, and one a cron job's command runs (a ``host`` origin) is nobody.
        """
        from kirocrew_core.host.protocol import SESSION_TYPE_CLI

        return self.origin == "person" and self.caller is not None and self.caller.session_type == SESSION_TYPE_CLI

    def acting_session(self, doing: str) -> CrewSession | None:
        """The caller's session, or None for the person; :class:`ToolRefused` ``caller_unverified`` for anyone else.

        For a tool that serves both the owner and sessions (``lenient``): a verified session acts as
        itself, the person (by ancestry: no session's descendant, not the host's) as the owner, and a
        caller that is neither (the host's own children, an unreadable ancestry) as nobody.
        ``doing`` completes the refusal: "<tool> <doing>, and this caller ...".
        """
        if self.session is not None:
            return self.session
        if self.origin == "person":
            return None
        raise ToolRefused(f"{self.tool} {doing}, and this caller could not be verified as a kirocrew session or the "
                          "owner, so it may not", code="caller_unverified")

    def require_session(self) -> CrewSession:
        """The caller's session, or :class:`ToolRefused` ``caller_unverified``."""
        if self.session is None:
            raise ToolRefused(f"{self.tool} needs a verified kirocrew session: this caller does not descend from "
                              "a kiro-cli the host started, so it cannot act on a session", code="caller_unverified")
        return self.session


def tool_args(raw: Any) -> dict[str, Any]:
    """The arguments object of a call (``{}`` when the client sent none)."""
    return dict(raw) if isinstance(raw, dict) else {}
