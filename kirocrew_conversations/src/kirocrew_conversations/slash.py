"""Which messages are Kiro slash commands, and the rule that keeps them from running unasked.

kiro-cli executes a prompt whose text starts with ``/`` as a slash command
(``/model``, ``/agent``, ``/clear`` ...), and it strips leading whitespace first,
so ``"  /clear"`` clears the context too. Such a command can switch the model or
agent, or drop the conversation's context, behind the server's back. So, for us,
a message is a slash command when its first non-whitespace character is ``/``;
its name is what follows up to the first whitespace. A conversation runs one only
if its ``allowedSlashCommands`` names it (empty by default), and only if the live
Kiro session announces that command when the run starts. Anything else is refused
with ``slash_command_refused`` and nothing is queued or sent.

Error messages name commands without their slash: client-facing text is redacted, and
``/name`` reads as an absolute path there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from kirocrew_conversations import limits
from kirocrew_conversations.errors import conversation_error

# How long to wait for a fresh session's command announcement before treating it as absent.
ANNOUNCE_WAIT_SECS = 5.0


def command_name(text: str) -> str | None:
    """The slash command ``text`` would run (without the ``/``), or None when it is an ordinary message."""
    stripped = text.lstrip()
    if not stripped.startswith("/"):
        return None
    return stripped[1:].split(None, 1)[0] if stripped[1:].strip() else ""


def announced(session: Any) -> tuple[str, ...]:
    """The slash command names a kiro session announced (``_kiro.dev/commands/available``), bounded."""
    listed = (session.available_commands or {}).get("commands")
    if not isinstance(listed, list):
        return ()
    names = (c["name"][:64] for c in listed if isinstance(c, dict) and isinstance(c.get("name"), str) and c["name"])
    return tuple(names)[:limits.CATALOG_MAX_ITEMS]


async def wait_announced(session: Any, timeout: float = ANNOUNCE_WAIT_SECS) -> tuple[str, ...] | None:
    """The commands ``session`` announced, waiting up to ``timeout`` s; None when kiro has not said yet.

    kiro sends ``_kiro.dev/commands/available`` just after it answers ``session/new`` or
    ``session/load``, so a caller that looks right after opening a session must wait for it.
    """
    if not await session.wait_until(lambda s: s.available_commands is not None, timeout):
        return None
    return announced(session)


def bare(name: str) -> str:
    """A command name as kiro announces it (``/compact``) or as a client writes it (``compact``)."""
    return name[1:] if name.startswith("/") else name


def check_allowed(text: str, allowed: Sequence[str]) -> str | None:
    """The command ``text`` runs if the conversation allows it; ``slash_command_refused`` otherwise."""
    name = command_name(text)
    if name is None:
        return None
    if name not in allowed:
        shown = f"'{name}'" if name and name.isascii() and name.isprintable() and len(name) <= 64 else "(unnamed)"
        allowed_text = ", ".join(allowed) or "none"
        raise conversation_error(
            "slash_command_refused",
            f"the message starts with a slash, so Kiro would run it as the slash command {shown}, which this "
            f"conversation does not allow (allowed: {allowed_text}); start the message with text instead")
    return name


def check_announced(name: str, announced: Iterable[str]) -> None:
    """Refuse a command the live Kiro session does not announce (``slash_command_refused``)."""
    if name not in {bare(a) for a in announced}:
        raise conversation_error("slash_command_refused",
                                 f"kiro-cli does not announce the slash command '{name[:64]}' in this session; "
                                 "it was not sent")


def normalize_allowlist(names: Sequence[str], announced: Iterable[str]) -> tuple[str, ...]:
    """The allowlist as bare names; each must be a command kiro has announced (``kiro_capabilities``)."""
    known = {bare(a) for a in announced}
    wanted = tuple(dict.fromkeys(bare(n) for n in names))
    unknown = [n for n in wanted if n not in known]
    if unknown:
        listed = ", ".join(sorted(known)) or "none: kiro-cli announced no slash commands"
        raise conversation_error("unknown_slash_command",
                                 f"not a slash command kiro_capabilities lists: {', '.join(unknown)}"
                                 f" (available: {listed})"[:500])
    return wanted
