"""``task_run`` / ``kirocrew run TASK.md``: a task spec run as a new conversation.

The spec is a file (a path relative to the calling session's workspace, or absolute) or
inline text after ``__inline__:``. A session's file must lie under its workspace or a
configured sub-agent root, as a sub-agent's ``cwd`` must; the conversation works in the
session's workspace (or ``cwd``) on the session's agent and model (without a session, the kirocrew
agent, as any run), under the session's authority. The person (the CLI)
names absolute paths. The new conversation is a top-level one, not a sub-agent: it does
not count against the cap and reports to nobody; it is followed like any conversation, and
it is in the calling session's tree (``created_by``), so that session may follow it with the
conversations tools (:mod:`kirocrew_conversations.scope`).
"""

from __future__ import annotations

import os
import secrets
import stat
from typing import TYPE_CHECKING

from kirocrew_core.coretools.contract import ToolRefused

from kirocrew_conversations import limits
from kirocrew_conversations.subagents import INLINE_PREFIX, workspace_for
from kirocrew_conversations.vocabulary import UNRESTRICTED

if TYPE_CHECKING:
    from kirocrew_conversations.service import ConversationsService
    from kirocrew_conversations.store import Conversation, Run


async def start_task(service: ConversationsService, caller: Conversation | None, spec: str, *,
                     name: str | None = None, cwd: str | None = None) -> tuple[Conversation, Run]:
    """Create the task's conversation and queue the spec's text as its first run."""
    roots = service.config.subagent_roots
    workspace = workspace_for(cwd, caller, roots)
    text = spec[len(INLINE_PREFIX):] if spec.startswith(INLINE_PREFIX) else _read_spec(spec, caller, roots)
    if not text.strip():
        raise ToolRefused("the task spec is empty", code="task_spec_empty")
    authority = caller.authority if caller is not None else UNRESTRICTED
    service.require_authority(authority)
    store = service.store
    from kirocrew_conversations.orchestrator import db_call

    agent, model = await service.subagents.settings_of(caller)  # the caller's agent and model
    conversation = await db_call(store.create_conversation, name=name or f"task-{secrets.token_hex(4)}",
                                 workspace=workspace, authority=authority, mode=agent, model=model,
                                 created_by=caller.id if caller is not None else None)
    run = await service.orchestrator.submit(conversation.id, text)
    return conversation, run


def _read_spec(spec: str, caller: Conversation | None, roots: tuple[str, ...]) -> str:
    base = (caller.workspace.worktree_path or caller.workspace.path) if caller is not None else None
    if not os.path.isabs(spec):
        if base is None:
            raise ToolRefused("the task spec path must be absolute", code="task_spec_not_found")
        spec = os.path.join(base, spec)
    path = os.path.realpath(spec)
    if caller is not None:
        try:
            workspace_for(os.path.dirname(path), caller, roots)  # the same containment as a sub-agent's cwd
        except ToolRefused as exc:
            raise ToolRefused("the task spec must be a file under this session's workspace or a configured "
                              "sub-agent root", code="cwd_not_allowed") from exc
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        raise ToolRefused("the task spec file does not exist or cannot be read", code="task_spec_not_found") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ToolRefused("the task spec is not a regular file", code="task_spec_not_found")
        data = handle.read(limits.TASK_SPEC_MAX_CHARS * 4 + 1)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolRefused("the task spec is not UTF-8 text", code="task_spec_not_found") from None
    if len(text) > limits.TASK_SPEC_MAX_CHARS or len(data) > limits.TASK_SPEC_MAX_CHARS * 4:
        raise ToolRefused(f"the task spec is longer than {limits.TASK_SPEC_MAX_CHARS} characters",
                          code="task_spec_too_large")
    return text
