"""kirocrew-conversations' public surface: the one module other distributions import from it.

Everything else in ``kirocrew_conversations`` is internal and may change shape; a name here keeps
its meaning. The root ``pyproject.toml``'s import-linter contracts hold every other distribution to
this module, so a refactor inside kirocrew-conversations stops at this file. kirocrew-cron runs its
agent jobs as conversation runs and its command jobs under the conversations' authorities, and
uses:

Authorities (what a run may do):

- ``AUTHORITIES``, ``UNRESTRICTED``: the built-in authority names, narrowest first, and the widest.
- ``installed_authorities(pm=None)``: every authority that can be asked for here by name, the
  built-in ``unrestricted`` included; ``authority_availability(name, installed)`` says whether one
  runs here and why not; ``require_authority(name, installed)`` returns it or raises
  ``authority_unavailable`` (nothing ever runs unrestricted instead); ``authority_launch(name, workspace)``
  is the argv prefix and environment a command runs with under that authority (its backend's launcher).
- ``CREDENTIALS``: the folders of the user's home a sandboxed run never writes (credential stores).

The host's conversations:

- ``hosted_service()``: the host's running :class:`ConversationsService`, or None;
  ``await ready_service()`` starts it if needed and returns it.
- ``session_placement(conversation_id)``: ``(authority, cwd)`` a session of that conversation works
  with now, the most it may give work it hands on (refused ``caller_unverified`` when the service is
  not running or the conversation is gone).
- ``ConversationsService``, ``Conversation``, ``Run``, ``Workspace``: its types.
- ``db_call(fn, *args, **kwargs)``: run a store call the way the service does (quick reads inline,
  the rest in a worker thread).

Redaction:

- ``redact_text(text, limit=...)``: what a conversation's errors and events pass before a client
  sees them; ``workspace_fingerprint(path)``: a workspace named without its path.

Cheap to import: the heavy names load on first use (``kirocrew --help`` and the host's start import
plugins that import this module).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from kirocrew_conversations.vocabulary import AUTHORITIES, UNRESTRICTED

if TYPE_CHECKING:
    from kirocrew_conversations.authority import availability as authority_availability
    from kirocrew_conversations.authority import installed as installed_authorities
    from kirocrew_conversations.authority import launch as authority_launch
    from kirocrew_conversations.authority import require as require_authority
    from kirocrew_conversations.orchestrator import db_call
    from kirocrew_conversations.redact import redact_text, workspace_fingerprint
    from kirocrew_conversations.sandbox.policy import CREDENTIALS
    from kirocrew_conversations.service import ConversationsService
    from kirocrew_conversations.store import Conversation, Run, Workspace

__all__ = [
    "AUTHORITIES",
    "CREDENTIALS",
    "UNRESTRICTED",
    "Conversation",
    "ConversationsService",
    "Run",
    "Workspace",
    "authority_availability",
    "authority_launch",
    "db_call",
    "hosted_service",
    "installed_authorities",
    "ready_service",
    "redact_text",
    "require_authority",
    "session_placement",
    "workspace_fingerprint",
]

# name -> (module, attribute) for what loads on first use
_LAZY = {
    "authority_availability": ("kirocrew_conversations.authority", "availability"),
    "installed_authorities": ("kirocrew_conversations.authority", "installed"),
    "authority_launch": ("kirocrew_conversations.authority", "launch"),
    "require_authority": ("kirocrew_conversations.authority", "require"),
    "db_call": ("kirocrew_conversations.orchestrator", "db_call"),
    "redact_text": ("kirocrew_conversations.redact", "redact_text"),
    "workspace_fingerprint": ("kirocrew_conversations.redact", "workspace_fingerprint"),
    "CREDENTIALS": ("kirocrew_conversations.sandbox.policy", "CREDENTIALS"),
    "ConversationsService": ("kirocrew_conversations.service", "ConversationsService"),
    "Conversation": ("kirocrew_conversations.store", "Conversation"),
    "Run": ("kirocrew_conversations.store", "Run"),
    "Workspace": ("kirocrew_conversations.store", "Workspace"),
}


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def hosted_service() -> ConversationsService | None:
    """The host's conversations service while it runs in this process, else None."""
    from kirocrew_conversations.hosted import hosted

    return hosted().service


async def ready_service() -> ConversationsService:
    """The host's conversations service, started if it is not yet (it raises what the start raised)."""
    from kirocrew_conversations.hosted import hosted

    return await hosted().ready()


def session_placement(conversation_id: str) -> tuple[str, str]:
    """``(authority, cwd)`` a session of ``conversation_id`` works with now (blocking store reads)."""
    from kirocrew_conversations.hosted import hosted

    return hosted().session_placement(conversation_id)
