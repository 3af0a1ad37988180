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
* **Who a caller is** comes from its process ancestry, decided by the host's registry
  (:mod:`kirocrew_core.coretools.identity`), never from the session key or ``KIROCREW_HOST_PID`` it
  claims: a session that drops or forges them is still itself. A caller whose ancestry cannot be read,
  or a process the host started for no session (a cron command job), is refused ``caller_unverified``
  and sees nothing; one whose opening process has exited is refused ``caller_gone``.

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

    Decided by the host's registry from the caller's process ancestry, never from what the caller
    claims (its session key or ``KIROCREW_HOST_PID`` are only claims): a descendant of a kiro-cli the
    host started is that session; a caller that descends from none, read all the way up, is the
    person. Refused: ``caller_gone`` when the process that opened the connection has exited (its pid
    may be someone else's now), ``caller_unverified`` when the ancestry could not be read or the caller
    is a process the host started for no session (a cron command job), and for a session that serves
    no conversation. Blocking: resolving reads process facts, so a coroutine calls it through
    ``asyncio.to_thread``.
    """
    if caller is None:
        return PERSON
    from kirocrew_core.coretools.identity import registry

    found = registry().resolve(caller)
    if found.origin == "person":
        return PERSON
    if found.origin == "gone":
        raise conversation_error("caller_gone", "the process that opened this connection has exited, so it is "
                                 "no one's any more; nothing was done")
    if found.origin != "session" or found.session is None:
        raise conversation_error("caller_unverified", "kirocrew could not tell who this caller is (its process "
                                 "ancestry could not be read, or it is a process the host started for no "
                                 "session), so it sees and changes no conversation")
    if found.session.kind != "conversation":
        raise conversation_error("caller_unverified", f"a {found.session.kind} session acts on no conversation")
    return Viewer(found.session.target_id)


def current_viewer() -> Viewer:
    """:func:`viewer_of` the caller of the request being handled (blocking, see there)."""
    from kirocrew_core.host.caller import current_caller

    return viewer_of(current_caller())


def require_owner(viewer: Viewer) -> None:
    """``owner_decision_required`` unless the person decides (a permission request is the owner's)."""
    if not viewer.is_person:
        raise conversation_error("owner_decision_required", OWNER_DECISION)
