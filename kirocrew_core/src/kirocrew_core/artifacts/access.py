"""Who may see and change which artifact: the owner everything, a session its conversation tree's and the shared.

A crew session's **conversation tree** is every conversation under the same topmost conversation
(the one the person started): a conversation, the sub-agents and conversations it spawned, theirs,
and the conversations above it. An artifact remembers the tree it was made in (``tree``), so a
sub-agent's design note is its parent's to read and revise, and another project's conversation
never learns it exists (it gets ``artifact_not_found``, word for word what a slug that does not
exist gets). The owner may **share** an artifact (``shared``): then every session sees and acts on
it, but only the owner deletes it. A cron job's run that is no conversation's is a tree of its own
(``cron:<job>``).

Who the caller is comes from :class:`~kirocrew_core.coretools.contract.ToolCall` (its process
ancestry, never a claim in the arguments) through :meth:`ToolCall.acting_session`; the tree from the
plugins that keep conversations (the ``conversation_ancestry`` hook), and whether a cron job started
the conversation from the plugin that runs the jobs (``conversation_origin``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kirocrew_core.coretools.contract import CrewSession, ToolCall


@dataclass(frozen=True)
class Actor:
    """Who a store call acts for: the owner (``tree`` None) or a crew session of one conversation tree.

    ``source`` is where what it saves comes from (:data:`~.names.SOURCES`), decided by who it is.
    """

    tree: str | None = None
    conversation: str | None = None
    session: str | None = None  # the session key's fingerprint (never the key)
    source: str = "manual"

    @property
    def is_owner(self) -> bool:
        return self.tree is None

    @property
    def author(self) -> str:
        return "owner" if self.is_owner else "agent"

    @property
    def label(self) -> str:
        """What an event names the actor by."""
        if self.is_owner:
            return "owner"
        return f"conversation:{self.conversation}" if self.conversation else self.tree or ""

    def provenance(self, claimed_source: str | None) -> dict[str, Any]:
        """The fields a new artifact records about who made it: from this actor, the claim only for ``import``."""
        source = "import" if claimed_source == "import" else self.source
        return {"source": source, "session": self.session, "conversation": self.conversation, "tree": self.tree,
                "created_by": self.author}


OWNER = Actor()
OWNER_CLI = Actor(source="cli")


def may_see(actor: Actor, meta: dict[str, Any]) -> bool:
    return actor.is_owner or meta.get("tree") == actor.tree or bool(meta.get("shared"))


def may_delete(actor: Actor, meta: dict[str, Any]) -> bool:
    return actor.is_owner or meta.get("tree") == actor.tree


def actor_of(call: ToolCall) -> Actor:
    """The actor of a tool call; :class:`ToolRefused` ``caller_unverified`` for a caller that is neither."""
    session = call.acting_session("acts on the owner's artifacts")
    if session is None:
        return OWNER_CLI if call.is_person_command else OWNER
    return session_actor(session)


def session_actor(session: CrewSession) -> Actor:
    from kirocrew_core.coretools.identity import fingerprint

    if session.kind != "conversation":
        return Actor(tree=f"{session.kind}:{session.target_id}", session=fingerprint(session.key),
                     source="cron" if session.kind == "cron" else "chat")
    above = ancestry(session.target_id)
    source = "cron" if origin(session.target_id) == "cron" else "subagent" if above else "chat"
    return Actor(tree=above[-1] if above else session.target_id, conversation=session.target_id,
                 session=fingerprint(session.key), source=source)


def origin(conversation_id: str) -> str | None:
    """What started ``conversation_id`` when no person or session did (``"cron"``), or None: the first answer."""
    from kirocrew_core.plugins import call_hook, get_plugin_manager

    call = call_hook(get_plugin_manager(), "conversation_origin", on_error="raise", conversation_id=conversation_id)
    for contribution in call.contributions:
        if contribution.value is not None:
            return str(contribution.value)
    return None


def ancestry(conversation_id: str) -> list[str]:
    """The conversations above ``conversation_id``, nearest first: the first plugin that knows it answers."""
    from kirocrew_core.plugins import call_hook, get_plugin_manager

    call = call_hook(get_plugin_manager(), "conversation_ancestry", on_error="raise", conversation_id=conversation_id)
    for contribution in call.contributions:
        if contribution.value:
            return [str(item) for item in contribution.value]
    return []
