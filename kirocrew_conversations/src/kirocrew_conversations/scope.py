"""Who a conversations tool call acts for, and so what it may see and do: one rule for all 17 tools.

``kirocrew-conversations`` is mounted in every crew session (the rendered ``kirocrew`` agent), so
its tools must tell the person from a session, per call, from the verified caller
(:func:`kirocrew_core.host.caller.current_caller`, resolved by the host's session registry):

* **The person** — the dashboard's routes, ``kirocrew conversations`` outside any session, an MCP
  client that is not a crew session (its caller resolves to no session and claims none), and every
  caller of a standalone server — sees and does everything.
* **A crew session** (a kiro-cli the host started for a conversation) sees and acts on only the
  conversations it created and their descendants: what it started with ``kiro_spawn``,
  ``kiro_delegate`` or ``kiro_fork``, its sub-agents, its ``task_run`` tasks and its cron jobs'
  conversations, and theirs in turn — the rule the ``spawn_*`` tools follow. Its own conversation is
  not among them: a session neither steers nor answers nor reconfigures itself; the person does.
  Anything else is ``conversation_not_found``, word for word what an id that does not exist gets, so
  a session cannot even learn that another's conversation exists.
* **A caller claiming a session the host cannot verify** (a session key or ``KIROCREW_HOST_PID``
  that resolves to none: a stale key, a copied one, another host's session) is refused
  ``caller_unverified`` and sees nothing — kirocrew-cron's rule for such callers. Taking it for the
  person would hand a session that lost its proof everything.

**Permission requests are the owner's.** Every ``needs_attention`` permission request is a call the
owner's permission policy asked *the owner* about, so no session may answer one, not even of a
conversation it created: otherwise any session could get past every ``ask`` rule by spawning a child
and approving its calls. ``kiro_permission_decide`` from a session is ``owner_decision_required``
before anything is looked up. A question card (``ask_question``) is a session asking whoever runs it,
so a session answers the cards of its own conversations' runs, and only those.

**A standalone server** (``mcp-conversations --standalone``) has no host and so no registry of
sessions: its callers are the stdio client that started it and the person's ``kirocrew
conversations`` commands on its owner-only control socket. Both carry no caller block, and both are
the person, as the CLI is for kirocrew-cron. No crew session of a host reaches it: a session's
``kirocrew-conversations`` is the relay to its host, and a host's conversations live in a state
directory a standalone server cannot own while that host runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kirocrew_conversations.errors import conversation_error

if TYPE_CHECKING:
    from kirocrew_core.host.caller import CallerContext

OWNER_DECISION = ("permission requests are the owner's: kirocrew asked the owner about this call, so a crew "
                  "session cannot answer it (not even for a conversation it created); nothing was decided. Tell "
                  "the user, who answers on the conversation's page or with kirocrew conversations decide")


@dataclass(frozen=True)
class Viewer:
    """Who a call acts for: the person (``session_conversation`` None) or a crew session's conversation."""

    session_conversation: str | None = None

    @property
    def is_person(self) -> bool:
        return self.session_conversation is None


PERSON = Viewer()


def viewer_of(caller: CallerContext | None) -> Viewer:
    """The viewer of a call by ``caller`` (None: no host connection, an in-process or standalone caller).

    Blocking: resolving a session reads process facts, so a coroutine calls it through
    ``asyncio.to_thread``. Refused ``caller_unverified`` for a claimed session the host cannot verify
    and for a session that serves no conversation.
    """
    if caller is None:
        return PERSON
    from kirocrew_core.coretools.identity import registry

    session = registry().resolve_strict(caller)
    if session is None:
        if caller.session_key or caller.host_pid_env is not None:
            raise conversation_error("caller_unverified", "this caller names a kirocrew session the host cannot "
                                     "verify, so it sees and changes no conversation; the person uses the "
                                     "dashboard or kirocrew conversations outside any session")
        return PERSON
    if session.kind != "conversation":
        raise conversation_error("caller_unverified", f"a {session.kind} session acts on no conversation")
    return Viewer(session.target_id)


def current_viewer() -> Viewer:
    """:func:`viewer_of` the caller of the request being handled (blocking, see there)."""
    from kirocrew_core.host.caller import current_caller

    return viewer_of(current_caller())


def require_owner(viewer: Viewer) -> None:
    """``owner_decision_required`` unless the person decides (a permission request is the owner's)."""
    if not viewer.is_person:
        raise conversation_error("owner_decision_required", OWNER_DECISION)
