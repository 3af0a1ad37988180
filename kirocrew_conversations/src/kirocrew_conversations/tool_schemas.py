"""The 17 tools' contracts: strict input schemas, output schemas and descriptions.

Strict means a caller cannot smuggle anything unbounded past us: every object forbids extra
properties, every string has a length cap, every list an item cap, every number both bounds
(a meta-test walks every schema). The numbers come from :mod:`limits`.

    python -m kirocrew_conversations.tool_schemas > docs/conversations/tools.md
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from kirocrew_conversations import limits as L
from kirocrew_conversations import questions as Q
from kirocrew_conversations.errors import NOT_KIROCREW_AGENT
from kirocrew_conversations.vocabulary import (
    ARCHIVE_FILTERS,
    ATTENTION_KINDS,
    AUTHORITIES,
    ALWAYS_SCOPES,
    CONVERSATION_STATES,
    DEFAULT_AGENT,
    OWNER_DECISIONS,
    DELIVERIES,
    EFFORTS,
    EVENT_KINDS,
    MERGE_STATES,
    RUN_STATUSES,
    WAIT_MODES,
    WORKSPACE_MODES,
)
from kirocrew_core.errors import BadInputError, KirocrewError

DIALECT = "https://json-schema.org/draft/2020-12/schema"

ALLOWED_SLASH_COMMANDS_MAX = 32

_ID_PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9_-]{{0,{L.ID_MAX_CHARS - 1}}}$"
_NAME_PATTERN = rf"^[a-z0-9][a-z0-9._-]{{0,{L.NAME_MAX_CHARS - 1}}}$"
_ABSOLUTE_PATH_PATTERN = r"^/[^\x00]*$"
_MODEL_PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9._:/-]{{0,{L.MODEL_MAX_CHARS - 1}}}$"
_AGENT_MODE_PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{L.AGENT_MODE_MAX_CHARS - 1}}}$"
# git check-ref-format's main rules: no "..", no control/space/~^:?*[\\, no leading "-" or "/".
_GIT_REF_PATTERN = r"^(?!-)(?!/)(?!.*\.\.)(?!.*@\{)(?!.*//)(?!.*\.lock$)(?!.*/$)[^\x00-\x20~^:?*\[\\\x7f]+$"
_CURSOR_PATTERN = r"^[A-Za-z0-9_=-]+$"
_SLASH_COMMAND_PATTERN = r"^/?[a-z][a-z0-9_-]{0,62}$"
_IMAGE_MIME_PATTERN = r"^image/[a-z0-9][a-z0-9.+-]{0,62}$"


# -- schema builders ------------------------------------------------------------------------------
def _string(max_length: int, description: str = "", *, pattern: str | None = None, min_length: int = 1,
            nullable: bool = False) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": ["string", "null"] if nullable else "string", "minLength": min_length,
                              "maxLength": max_length}
    if pattern:
        schema["pattern"] = pattern
    if description:
        schema["description"] = description
    return schema


def _enum(values: tuple[str, ...], description: str = "", *, nullable: bool = False) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": ["string", "null"] if nullable else "string",
                              "enum": [*values, None] if nullable else list(values),
                              "maxLength": max(len(v) for v in values)}
    if description:
        schema["description"] = description
    return schema


def _integer(minimum: int, maximum: int, description: str = "", *, nullable: bool = False,
             default: int | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": ["integer", "null"] if nullable else "integer",
                              "minimum": minimum, "maximum": maximum}
    if default is not None:
        schema["default"] = default
    if description:
        schema["description"] = description
    return schema


def _count(description: str = "", *, nullable: bool = False) -> dict[str, Any]:
    return _integer(0, L.COUNT_MAX, description, nullable=nullable)


def _boolean(description: str = "", *, default: bool | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "boolean"}
    if default is not None:
        schema["default"] = default
    if description:
        schema["description"] = description
    return schema


def _array(items: dict[str, Any], max_items: int, description: str = "", *, min_items: int = 0,
           unique: bool = False) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "array", "items": items, "minItems": min_items, "maxItems": max_items}
    if unique:
        schema["uniqueItems"] = True
    if description:
        schema["description"] = description
    return schema


def _object(properties: dict[str, Any], required: tuple[str, ...] = (), description: str = "",
            *, nullable: bool = False, **extra: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": ["object", "null"] if nullable else "object", "properties": properties,
                              "required": list(required), "additionalProperties": False, **extra}
    if description:
        schema["description"] = description
    return schema


def _all_required(properties: dict[str, Any], description: str = "", *, nullable: bool = False) -> dict[str, Any]:
    """Outputs always carry every key (null when unknown), so clients never guess at absence."""
    return _object(properties, tuple(properties), description, nullable=nullable)


# -- shared pieces --------------------------------------------------------------------------------
def _conversation_id(
    description: str = "Opaque conversation ID returned by an earlier call. Never construct one.",
) -> dict[str, Any]:
    return _string(L.ID_MAX_CHARS, description, pattern=_ID_PATTERN)


def _run_id(description: str = "Opaque run ID returned by an earlier call. Never construct one.") -> dict[str, Any]:
    return _string(L.ID_MAX_CHARS, description, pattern=_ID_PATTERN)


_MODEL = _string(L.MODEL_MAX_CHARS, "Model ID from kiro_capabilities' live catalog (any other fails with "
                 "unknown_model). Every run's Kiro session is put on its model, mode and effort before the prompt; "
                 "if kiro-cli refuses, the run fails with settings_not_applied and nothing runs.",
                 pattern=_MODEL_PATTERN)
_EFFORT = _enum(EFFORTS, "Reasoning effort.")
_AGENT_MODE = _string(L.AGENT_MODE_MAX_CHARS, "Kiro agent (ACP session mode) as advertised by kiro_capabilities "
                      "modes (any other fails with unknown_mode); unset, the conversation's default, else "
                      f"{DEFAULT_AGENT} (kiro_capabilities defaults.mode), kirocrew's rendered agent, the one "
                      "that mounts kirocrew's MCP servers. Another agent runs with a warning "
                      f"({NOT_KIROCREW_AGENT}).", pattern=_AGENT_MODE_PATTERN)
_AUTHORITY = _enum(AUTHORITIES, "Execution authority. `unrestricted` (the default) runs Kiro directly on the host "
                   "with all tools trusted; `read_only` and `workspace_write` are sandboxed and fail rather than "
                   "fall back.")
_MESSAGE = _string(L.MESSAGE_MAX_CHARS, "The prompt for this run. Kept only until delivered to Kiro.")
_IMAGES = _array(
    _object({
        "path": _string(L.PATH_MAX_CHARS, "Absolute local path of the image file.", pattern=_ABSOLUTE_PATH_PATTERN),
        "mimeType": _string(64, "Image MIME type, e.g. image/png.", pattern=_IMAGE_MIME_PATTERN),
        "sizeBytes": _integer(1, L.IMAGE_MAX_BYTES, "Declared file size in bytes."),
    }, ("path", "mimeType", "sizeBytes")),
    L.MAX_IMAGES,
    f"Up to {L.MAX_IMAGES} images. Send only when kiro_capabilities reports prompt.images true; otherwise the "
    "call fails with unsupported_capability.",
    min_items=1,
)
_RUN_OVERRIDES = {"model": _MODEL, "effort": _EFFORT, "mode": _AGENT_MODE, "authority": _AUTHORITY}
_ALLOWED_SLASH_COMMANDS = _array(
    _string(64, "A command as kiro_capabilities slashCommands lists it (e.g. /compact).",
            pattern=_SLASH_COMMAND_PATTERN),
    ALLOWED_SLASH_COMMANDS_MAX,
    "The Kiro slash commands a message of this conversation may run (default none). A message whose first "
    "non-whitespace character is / is a slash command, refused with slash_command_refused unless listed here. "
    "Each must be listed by kiro_capabilities slashCommands (unknown_slash_command otherwise). [] allows none.",
    unique=True)
_CURSOR = _string(L.CURSOR_MAX_CHARS, "Opaque cursor from a previous page's nextCursor.", pattern=_CURSOR_PATTERN)
_LIMIT = _integer(1, L.PAGE_SIZE_MAX, "Page size.", default=L.PAGE_SIZE_DEFAULT)
_TEXT = _string(L.TEXT_MAX_CHARS, min_length=0)
_TIMESTAMP = _string(40, "RFC 3339 UTC timestamp.", nullable=True)

_BASE_REF_SHOWN = _string(L.GIT_REF_MAX_CHARS, "The base ref the worktree was made from, as it was given (e.g. main "
                          "or HEAD); null in shared mode.", nullable=True)
_BASE_COMMIT = _string(64, "The commit the base ref resolved to when the worktree was made (a full hex object id); "
                           "a branch that moves later does not change it. Null in shared mode, or for a worktree "
                           "made before it was recorded.", nullable=True, pattern=r"^[0-9a-f]{40}([0-9a-f]{24})?$")
_WORKSPACE_IDENTITY = _all_required({
    "mode": _enum(WORKSPACE_MODES),
    "fingerprint": _string(L.FINGERPRINT_MAX_CHARS, "Stable hash of the workspace; filter kiro_status with it."),
    "label": _string(L.NAME_MAX_CHARS * 4, "Last path component only; never an absolute path.", min_length=0),
    "branch": _string(L.GIT_REF_MAX_CHARS, "Worktree branch, or null in shared mode.", nullable=True),
    "baseRef": _BASE_REF_SHOWN,
    "baseCommit": _BASE_COMMIT,
}, "Redacted workspace identity.")
_SETTINGS = _all_required({
    "model": _string(L.MODEL_MAX_CHARS, nullable=True),
    "effort": _enum(EFFORTS, nullable=True),
    "mode": _string(L.AGENT_MODE_MAX_CHARS, nullable=True),
    "authority": _enum(AUTHORITIES),
    "workspace": _WORKSPACE_IDENTITY,
}, "Settings resolved for the run (or the conversation's defaults), recorded forever.")
_DEFAULTS = {**_SETTINGS, "properties": {
    **_SETTINGS["properties"],
    "allowedSlashCommands": _array(_string(64), ALLOWED_SLASH_COMMANDS_MAX, "Slash commands its messages may run."),
}, "required": [*_SETTINGS["required"], "allowedSlashCommands"], "description": "The conversation's defaults."}
_ERROR = _all_required({"code": _string(64), "message": _TEXT}, "Stable error code and redacted message.",
                       nullable=True)
_WARNINGS = _array(_all_required({"code": _string(64), "message": _TEXT}), 8,
                   "What to know about how the run runs that is not an error (the run goes on): stable codes, "
                   f"listed with the error codes; e.g. {NOT_KIROCREW_AGENT} when it runs as another agent than "
                   f"{DEFAULT_AGENT}.")
_ASK_ID = _string(L.ID_MAX_CHARS, "The question card's id (attention.question.askId).", pattern=_ID_PATTERN)
_ASK_ID_ARGUMENT = _string(L.ID_MAX_CHARS, "The question card's id (attention.question.askId); omit it only when "
                           "the conversation has exactly one open card.", pattern=_ID_PATTERN)
_QUESTION_CARD = _all_required({
    "askId": _ASK_ID,
    "questions": _array(_all_required({
        "question": _string(Q.QUESTION_MAX_CHARS),
        "header": _string(Q.HEADER_MAX_CHARS, "A short badge, or empty.", min_length=0),
        "options": _array(_all_required({
            "label": _string(Q.LABEL_MAX_CHARS),
            "description": _string(Q.DESCRIPTION_MAX_CHARS, min_length=0),
        }), Q.MAX_OPTIONS),
        "multiSelect": _boolean(),
    }), Q.MAX_QUESTIONS),
    "askedAt": _TIMESTAMP,
    "expiresAt": _TIMESTAMP,
}, "The open question card (kind question): answer it with kiro_question_answer.", nullable=True)
_ANSWERS_OR_DISMISSED: dict[str, Any] = {
    "if": {"required": ["answers"]},
    "then": {"not": {"required": ["dismissed"]}, "description": "answers and dismissed exclude each other"},
    "else": {"required": ["dismissed"]},
}
# The permission-policy rule that decided a call (kirocrew policy list shows it whole).
_POLICY_RULE = _all_required({
    "id": _string(64),
    "tier": _enum(("builtin", "owner", "project", "default")),
    "decision": _enum(("allow", "ask", "deny")),
    "description": _string(L.TEXT_MAX_CHARS),
    "reason": _string(L.TEXT_MAX_CHARS, min_length=0),
}, "The permission-policy rule that decided (null for a request the policy could not decide).", nullable=True)
_ATTENTION = _all_required({
    "kind": _enum(ATTENTION_KINDS, "permission: decide it with kiro_permission_decide; question: answer or "
                  "dismiss it with kiro_question_answer."),
    "permissionRequestId": _run_id("Pass to kiro_permission_decide (kind permission; else null).")
    | {"type": ["string", "null"]},
    "toolName": _string(128, nullable=True),
    "title": _TEXT,
    "options": _array(_enum(OWNER_DECISIONS), len(OWNER_DECISIONS), unique=True),
    "requestedAt": _TIMESTAMP,
    "question": _QUESTION_CARD,
    "rule": _POLICY_RULE,
    "subject": _string(L.TEXT_MAX_CHARS, "The part of the call the rule asked about (secrets redacted).",
                       nullable=True),
    "reason": _string(L.TEXT_MAX_CHARS, "Why the owner is asked.", nullable=True),
}, "The open attention request when status is needs_attention: a permission request or a question card.",
    nullable=True)
_REPLY = _all_required({
    "text": _string(L.FINAL_REPLY_MAX_BYTES, min_length=0),
    "truncated": _boolean(),
    "originalBytes": _count(),
}, f"Final reply, kept up to {L.FINAL_REPLY_MAX_BYTES // 1024} KiB.", nullable=True)
_RUN = _all_required({
    "conversationId": _conversation_id(),
    "runId": _run_id(),
    "status": _enum(RUN_STATUSES),
    "settings": _SETTINGS,
    "reply": _REPLY,
    "error": _ERROR,
    "attention": _ATTENTION,
    "warnings": _WARNINGS,
    "createdAt": _TIMESTAMP,
    "startedAt": _TIMESTAMP,
    "endedAt": _TIMESTAMP,
})
# What session directives (the kirocrew-core tools a run's model calls) left on the conversation.
_SESSION = _all_required({
    "followUps": _all_required({
        "runId": _run_id("The run whose suggest_followup left the card.") | {"type": ["string", "null"]},
        "createdAt": _TIMESTAMP,
        "items": _array(_all_required({
            "title": _string(120),
            "description": _string(600),
            "prompt": _string(8000, "Sent as a new message to the conversation only if someone picks it."),
            "branch": _string(80, nullable=True),
        }), 3),
    }, "The conversation's current follow-up card (a new one replaces it), or null.", nullable=True),
    "monitor": _all_required({
        "monitorId": _string(L.ID_MAX_CHARS),
        "active": _boolean(),
        "message": _string(8000),
        "intervalSecs": _count(),
        "cycles": _count(),
        "maxCycles": _count(),
        "stoppedReason": _string(32, "manual, cycle_cap or archived.", nullable=True),
        "lastFiredAt": _TIMESTAMP,
    }, "The conversation's monitor loop, or null.", nullable=True),
    "project": _string(L.NAME_MAX_CHARS * 4, "Last path component of the bound project (set_project), or null.",
                       nullable=True),
}, "What session directives left on the conversation (docs/core-tools/directives.md).")
_RUN_RESULT = {**_RUN, "properties": {**_RUN["properties"], "session": _SESSION},
               "required": [*_RUN["required"], "session"]}
_RUN_REF = _object({"conversationId": _conversation_id(), "runId": _run_id()}, ("conversationId", "runId"))


def _spawn_input(purpose: str) -> dict[str, Any]:
    new_only = ("name", "workspace", "workspaceMode", "baseRef", "allowedSlashCommands")
    conditional: dict[str, Any] = {
        "if": {"properties": {"conversation": {"const": "new"}}},
        "then": {"required": ["name", "workspace"]},
        "else": {"not": {"anyOf": [{"required": [key]} for key in new_only]}},
    }
    return _object(
        {
            "conversation": _string(L.ID_MAX_CHARS, f'"new" to start a conversation, or an existing conversationId '
                                    f"to {purpose} in it (queued after its current work).", pattern=_ID_PATTERN),
            "name": _string(L.NAME_MAX_CHARS, "Unique lowercase name for a new conversation (a-z, 0-9, ., _, -).",
                            pattern=_NAME_PATTERN),
            "workspace": _string(L.PATH_MAX_CHARS, "Absolute path of the project directory for a new conversation.",
                                 pattern=_ABSOLUTE_PATH_PATTERN),
            "workspaceMode": {**_enum(WORKSPACE_MODES, "`shared` (default) works in the directory itself; "
                                      "`worktree` needs a clean git repository root and creates branch "
                                      "kiro/<slug>-<short-id> under the state area."), "default": "shared"},
            "baseRef": _string(L.GIT_REF_MAX_CHARS, "Git ref the worktree branch starts from (worktree mode; "
                               "default HEAD).", pattern=_GIT_REF_PATTERN),
            "message": _MESSAGE,
            "images": _IMAGES,
            "allowedSlashCommands": _ALLOWED_SLASH_COMMANDS,
            **_RUN_OVERRIDES,
        },
        ("conversation", "message"),
        **conditional,
    )


_SPAWN_OUTPUT = _all_required({
    "conversationId": _conversation_id(),
    "runId": _run_id(),
    "status": _enum(RUN_STATUSES),
    "createdConversation": _boolean(),
    "queuePosition": _count("Runs ahead of this one in its conversation (0 = next or running)."),
    "settings": _SETTINGS,
    "warnings": _WARNINGS,
})
_WAIT_OUTPUT = _all_required({
    "waitExpired": _boolean("True when the wait ceiling passed first; runs were NOT cancelled."),
    "mode": _enum(WAIT_MODES),
    "runs": _array(_RUN, L.WAIT_MAX_TARGETS),
})


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]


def _tool(name: str, description: str, input_schema: dict[str, Any], output_schema: dict[str, Any]) -> Tool:
    return Tool(name, " ".join(description.split()), {"$schema": DIALECT, **input_schema},
                {"$schema": DIALECT, **output_schema})


TOOLS: tuple[Tool, ...] = (
    _tool(
        "kiro_capabilities",
        """Discover the installed Kiro CLI version, its live model catalog, the ACP feature envelope the agent
        advertised (session load, fork, images), the authorities, the defaults and every limit. Call it before
        choosing a model, mode or effort, and before attaching images; pass refresh: true when the choice must
        be current (otherwise a cached answer may be returned). It starts no run.""",
        _object({"refresh": _boolean("Bypass the cache and ask kiro-cli again.", default=False)}),
        _all_required({
            "kiroCli": _all_required({"version": _string(64, nullable=True)}),
            "models": _array(_all_required({
                "id": _string(L.MODEL_MAX_CHARS), "name": _string(256, min_length=0), "description": _TEXT,
            }), L.CATALOG_MAX_ITEMS),
            "defaultModel": _string(L.MODEL_MAX_CHARS, nullable=True),
            "modes": _array(_string(L.AGENT_MODE_MAX_CHARS), L.CATALOG_MAX_ITEMS,
                            "The agents (ACP modes) kiro-cli announces; a run's mode must be one of them."),
            "defaultMode": _string(L.AGENT_MODE_MAX_CHARS, "kiro-cli's own default agent (a session started "
                                   f"without --agent). Not what a run gets without a mode: that is defaults.mode, "
                                   f"{DEFAULT_AGENT}.", nullable=True),
            "efforts": _array(_enum(EFFORTS), len(EFFORTS), unique=True),
            "acp": _all_required({
                "protocolVersion": _integer(0, 1000, nullable=True),
                "loadSession": _boolean(),
                "sessionFork": _boolean("True only when the agent advertises fork AND our client supports it."),
                "embeddedContext": _boolean(),
            }),
            "prompt": _all_required({"images": _boolean("Attach images only when true.")}),
            "slashCommands": _array(_string(64), L.CATALOG_MAX_ITEMS,
                                    "What kiro-cli announces in a session (the capability probe's own "
                                    "session, so no run is needed). A message runs one only when its "
                                    "conversation's allowedSlashCommands names it."),
            "authorities": _array(_all_required({
                "name": _enum(AUTHORITIES), "available": _boolean(), "reason": _string(L.TEXT_MAX_CHARS, nullable=True),
            }), len(AUTHORITIES)),
            "defaults": _all_required({
                "authority": _enum(AUTHORITIES), "workspaceMode": _enum(WORKSPACE_MODES),
                "mode": _string(L.AGENT_MODE_MAX_CHARS, "The agent a run gets when neither it nor its conversation "
                                "names a mode: kirocrew's rendered agent, which mounts kirocrew's MCP servers."),
                "maxWorkers": _integer(L.WORKERS_MIN, L.WORKERS_MAX),
            }),
            "limits": _all_required({name: _count() for name in (
                "waitMaxTargets", "maxImages", "imageMaxBytes", "finalReplyMaxBytes", "runDeadlineSeconds",
                "attentionDeadlineSeconds", "waitCeilingSeconds", "idleWorkerSeconds", "autoArchiveDays",
                "messageMaxChars", "pageSizeMax",
            )}),
            "cached": _boolean("True when this answer came from the cache."),
            "fetchedAt": _TIMESTAMP,
        }),
    ),
    _tool(
        "kiro_spawn",
        f"""Start one run asynchronously and return its durable conversationId and runId immediately, without
        waiting. Use one kiro_spawn per independent task (separate conversations run in parallel), then ONE
        kiro_wait over all returned IDs. conversation "new" needs name and workspace; an existing conversationId
        queues the message after that conversation's current work (FIFO). New conversations default to a shared
        workspace and unrestricted authority; model/effort/mode/authority become a new conversation's defaults, and
        override only this run in an existing one (kiro_configure changes defaults). The response
        discloses the resolved model, effort, mode, authority and a redacted workspace identity. For a single
        task you want finished, use kiro_delegate instead. Runs end at the
        {L.RUN_DEADLINE_SECONDS // 60}-minute deadline as timed_out. A message starting with / is a Kiro slash
        command and is refused (slash_command_refused) unless allowedSlashCommands allows it.""",
        _spawn_input("start a run"),
        _SPAWN_OUTPUT,
    ),
    _tool(
        "kiro_delegate",
        f"""Run one task to its end in one call: spawn exactly like kiro_spawn, then wait. Returns when the run
        completes, fails, is cancelled, needs attention (answer with kiro_permission_decide), or when the fixed
        {L.WAIT_CEILING_SECONDS // 60}-minute wait ceiling passes (waitExpired: true; the run keeps going — reattach
        with kiro_wait). There is no caller-selected timeout. A disconnected request detaches, it never cancels
        Kiro. For parallel tasks use kiro_spawn + kiro_wait instead.""",
        _spawn_input("delegate"),
        _all_required({"waitExpired": _boolean(), "createdConversation": _boolean(), "run": _RUN}),
    ),
    _tool(
        "kiro_wait",
        f"""Wait event-first (no polling needed) on {L.WAIT_MIN_TARGETS} to {L.WAIT_MAX_TARGETS} explicit runs.
        mode "any" returns when one target finishes or needs attention; "all" returns when every target finished,
        but still wakes early when any target needs attention — at once, on every call, while that request is
        open: decide it or cancel the run; unanswered, it expires after the attention deadline (default
        {L.ATTENTION_DEADLINE_SECONDS // 60} minutes) as needs_attention_expired. The ceiling is fixed at
        {L.WAIT_CEILING_SECONDS // 60} minutes (waitExpired: true) and may be shorter per call so hosts that cut
        long tool calls are not broken; just call it again. Waiting never cancels runs, and an aborted wait only
        detaches. Use it after kiro_spawn or after reconnecting; use kiro_result for an immediate look.""",
        _object({
            "targets": _array(_RUN_REF, L.WAIT_MAX_TARGETS, "The runs to wait on.", min_items=L.WAIT_MIN_TARGETS,
                              unique=True),
            "mode": _enum(WAIT_MODES, "any: first finish or attention; all: every finish, early on attention."),
        }, ("targets", "mode")),
        _WAIT_OUTPUT,
    ),
    _tool(
        "kiro_send",
        """Send a follow-up message to an existing conversation. delivery "queue" (default) creates a durable run
        after the active and already-queued work. delivery "interrupt" cancels the active run and the superseded
        queued follow-ups, then starts this message as a new turn. Interrupt is cancellation followed by a new
        turn: it is NOT mid-inference steering, and the running turn never sees this message. Returns the new
        runId immediately without waiting; model/effort/mode/authority override this run only. A message starting
        with / is refused (slash_command_refused) unless the conversation's allowedSlashCommands allows it.""",
        _object({
            "conversationId": _conversation_id(),
            "message": _MESSAGE,
            "delivery": {**_enum(DELIVERIES, "queue (default) or interrupt."), "default": "queue"},
            "images": _IMAGES,
            **_RUN_OVERRIDES,
        }, ("conversationId", "message")),
        _all_required({
            **_SPAWN_OUTPUT["properties"],
            "delivery": _enum(DELIVERIES),
            "interruptedRunId": _run_id("The active run that was cancelled, or null.") | {"type": ["string", "null"]},
            "supersededRunCount": _count("Queued follow-ups cancelled by the interrupt."),
        }),
    ),
    _tool(
        "kiro_result",
        """Read one run's current or terminal state and result immediately, without waiting: status, resolved
        settings, final reply (up to 256 KiB, with truncation metadata), error, and any open attention request.
        Reads are idempotent forever; reading never consumes the result. Use kiro_wait to block instead.""",
        _object({"conversationId": _conversation_id(), "runId": _run_id()}, ("conversationId", "runId")),
        _RUN_RESULT,
    ),
    _tool(
        "kiro_status",
        """Browse bounded, cursor-paginated conversation summaries and counts, optionally filtered by
        conversation state, run status, workspace fingerprint, model, authority or archive state (default: active
        conversations only). It never dumps historical replies; use kiro_result for one run's reply and
        kiro_events for one run's activity. Sub-agents (conversations a kirocrew session spawned with the spawn
        tools of kirocrew-core) are marked subagent, with their parentConversationId. Called from a kirocrew
        crew session it lists (and counts) only the conversations that session created and their descendants,
        as every tool here sees only those (any other id is conversation_not_found); the person sees all.""",
        _object({
            "state": _array(_enum(CONVERSATION_STATES), L.STATUS_FILTER_MAX_VALUES, "Conversation states.",
                            min_items=1, unique=True),
            "runStatus": _array(_enum(RUN_STATUSES), L.STATUS_FILTER_MAX_VALUES, "Latest run statuses.",
                                min_items=1, unique=True),
            "workspaceFingerprint": _string(L.FINGERPRINT_MAX_CHARS, pattern=r"^[A-Za-z0-9_-]+$"),
            "model": _MODEL,
            "authority": _AUTHORITY,
            "archive": {**_enum(ARCHIVE_FILTERS, "active (default), archived, or all."), "default": "active"},
            "cursor": _CURSOR,
            "limit": _LIMIT,
        }),
        _all_required({
            "conversations": _array(_all_required({
                "conversationId": _conversation_id(),
                "name": _string(L.NAME_MAX_CHARS),
                "state": _enum(CONVERSATION_STATES),
                "defaults": _DEFAULTS,
                "latestRun": _all_required({"runId": _run_id(), "status": _enum(RUN_STATUSES)}, nullable=True),
                "queuedRuns": _count(),
                "updatedAt": _TIMESTAMP,
                "subagent": _boolean("A sub-agent: a kirocrew session (or `kirocrew spawn run`) spawned it."),
                "parentConversationId": _string(L.ID_MAX_CHARS, "The conversation whose session spawned this "
                                                "sub-agent; null otherwise.", pattern=_ID_PATTERN, nullable=True),
                "followUps": _count("Follow-up suggestions waiting on the conversation (see kiro_result)."),
                "monitorActive": _boolean("Whether the conversation's monitor loop is armed."),
            }), L.PAGE_SIZE_MAX),
            "counts": _all_required({state: _count() for state in CONVERSATION_STATES},
                                    "Conversations per state across all pages, under the filters."),
            "nextCursor": _string(L.CURSOR_MAX_CHARS, nullable=True),
        }),
    ),
    _tool(
        "kiro_events",
        """Read cursor-paginated, redacted activity for one explicit run: phases, plans, tool names and status,
        workspace-relative locations, usage, permission metadata, mode/config changes and timestamps. It never
        returns internal session IDs, thoughts, prompt bodies, command arguments, tool output, secrets or
        absolute paths. Use it to inspect a permission request before kiro_permission_decide.""",
        _object({"conversationId": _conversation_id(), "runId": _run_id(), "cursor": _CURSOR, "limit": _LIMIT},
                ("conversationId", "runId")),
        _all_required({
            "conversationId": _conversation_id(),
            "runId": _run_id(),
            "events": _array(_object({
                "seq": _count(),
                "at": _TIMESTAMP,
                "kind": _enum(EVENT_KINDS),
                "summary": _TEXT,
                "toolName": _string(128),
                "toolStatus": _string(32),
                "locations": _array(_string(L.PATH_MAX_CHARS), 16, "Workspace-relative paths."),
                "permissionRequestId": _run_id(),
                "askId": _ASK_ID,
                "options": _array(_enum(OWNER_DECISIONS), len(OWNER_DECISIONS), unique=True),
                "rule": _POLICY_RULE,
                "usage": _object({"contextPercent": _integer(0, 100), "credits": {"type": "number", "minimum": 0,
                                                                                  "maximum": 1e9},
                                  "turnDurationMs": _count()}, description="Kiro's usage report of a turn."),
                "settings": _object({"model": _string(L.MODEL_MAX_CHARS, nullable=True),
                                     "mode": _string(L.AGENT_MODE_MAX_CHARS, nullable=True),
                                     "effort": _enum(EFFORTS, nullable=True)},
                                    description="What the run's session was put on before its prompt."),
            }, ("seq", "at", "kind")), L.PAGE_SIZE_MAX),
            "nextCursor": _string(L.CURSOR_MAX_CHARS, nullable=True),
        }),
    ),
    _tool(
        "kiro_permission_decide",
        """Resolve the current attention request of a run in needs_attention (a call the owner's permission policy
        asked about; attention.rule says which rule and why): allow_once permits this one call, reject_once
        rejects it (the run goes on without it), allow_always adds permission-policy rules allowing this call's
        parts from now on, in scope (workspace: this conversation's workspace, the default; authority: runs
        under this run's authority; everywhere), and permits the call. allow_always is offered (attention.options)
        only where an allow rule can change the answer. Missing, stale, unknown or unsupported choices fail closed
        with a stable error code and change nothing. Only the person (the owner) answers: the policy asked the
        owner, so a kirocrew crew session is refused owner_decision_required, even for a conversation it created,
        and should tell the user instead.""",
        _object({
            "conversationId": _conversation_id(),
            "runId": _run_id(),
            "permissionRequestId": _run_id("The attention.permissionRequestId reported for this run."),
            "decision": _enum(OWNER_DECISIONS),
            "scope": _enum(ALWAYS_SCOPES, "For allow_always: where the new rules apply (default workspace)."),
        }, ("conversationId", "runId", "permissionRequestId", "decision")),
        _all_required({
            "conversationId": _conversation_id(), "runId": _run_id(), "permissionRequestId": _run_id(),
            "decision": _enum(OWNER_DECISIONS), "status": _enum(RUN_STATUSES),
            "rulesAdded": _array(_string(64), 64, "The permission-policy rules allow_always added (ids)."),
        }),
    ),
    _tool(
        "kiro_question_answer",
        f"""Answer, or dismiss, a question card a run of this conversation is blocked on (attention.kind
        "question": a Kiro session asked its owner with kirocrew-core's ask_question). answers gives up to
        {Q.MAX_QUESTIONS} pairs, each naming a question by its exact text (an option label, several comma-separated
        for multiSelect, or free text, at most {Q.ANSWER_MAX_CHARS} characters, never truncated); dismissed: true
        withdraws the card unanswered. An unknown, already settled, expired or another conversation's askId fails
        with question_not_found; a bad answer fails with its code and leaves the card open. Omit askId only when
        the conversation has exactly one open card (question_ambiguous otherwise). A kirocrew crew session
        answers only the cards of conversations it created (or their descendants); others are
        conversation_not_found.""",
        _object({
            "conversationId": _conversation_id(),
            "askId": _ASK_ID_ARGUMENT,
            "answers": _array(_object({
                "question": _string(Q.QUESTION_MAX_CHARS, "The asked question's exact text."),
                "answer": _string(Q.ANSWER_MAX_CHARS, "The answer (an option label, or free text)."),
            }, ("question", "answer")), Q.MAX_QUESTIONS, "One answer per question.", min_items=1),
            "dismissed": {**_boolean("true: close the card without answering."), "const": True},
        }, ("conversationId",), **_ANSWERS_OR_DISMISSED),
        _all_required({"conversationId": _conversation_id(), "askId": _ASK_ID,
                       "status": _enum(("answered", "dismissed"))}),
    ),
    _tool(
        "kiro_configure",
        """Change a conversation's defaults (model, effort, mode, default authority) for its future runs. Only
        while the conversation is idle; existing and queued runs keep the settings they were created with. To
        change settings for a single run, pass them to kiro_send or kiro_spawn instead.""",
        _object({"conversationId": _conversation_id(), **_RUN_OVERRIDES,
                 "allowedSlashCommands": _ALLOWED_SLASH_COMMANDS}, ("conversationId",), minProperties=2),
        _all_required({"conversationId": _conversation_id(), "defaults": _DEFAULTS}),
    ),
    _tool(
        "kiro_fork",
        """Fork a durable Kiro conversation into a new conversation with the same context. Works only when
        kiro_capabilities reports acp.sessionFork true; otherwise it fails with unsupported_capability and
        changes nothing.""",
        _object({"conversationId": _conversation_id(),
                 "name": _string(L.NAME_MAX_CHARS, "Unique name for the fork.", pattern=_NAME_PATTERN)},
                ("conversationId", "name")),
        _all_required({"conversationId": _conversation_id("The new conversation."),
                       "forkedFrom": _conversation_id(), "name": _string(L.NAME_MAX_CHARS), "defaults": _DEFAULTS}),
    ),
    _tool(
        "kiro_cancel",
        """Explicitly cancel one run (queued or running). Returns only after bounded ACP shutdown and
        process-group teardown, so the saved Kiro session is free; open permission requests are answered
        cancelled. Cancelling a terminal run changes nothing. Aborting a wait or disconnecting never cancels.""",
        _object({"conversationId": _conversation_id(), "runId": _run_id()}, ("conversationId", "runId")),
        _all_required({"conversationId": _conversation_id(), "runId": _run_id(), "status": _enum(RUN_STATUSES),
                       "changed": _boolean("False when the run was already terminal.")}),
    ),
    _tool(
        "kiro_archive",
        f"""Hide an idle conversation from normal kiro_status listings while keeping its history and results.
        Idle conversations are archived automatically after {L.AUTO_ARCHIVE_DAYS} days. Nothing is deleted.""",
        _object({"conversationId": _conversation_id()}, ("conversationId",)),
        _all_required({"conversationId": _conversation_id(), "state": _enum(CONVERSATION_STATES)}),
    ),
    _tool(
        "kiro_delete",
        """Permanently remove this server's local state for an ARCHIVED conversation (runs, events, retained replies)
        and kiro-cli's own session files of it (its transcripts, its sub-agents' included). confirmName must equal
        the conversation's exact name. It never touches the workspace or any git branch, so a worktree conversation
        whose worktree or branch still exists is refused (worktree_not_cleaned_up: run kiro_worktree_cleanup first),
        as is one whose Kiro session a live process holds (kiro_session_in_use). Irreversible: archive first and only
        delete when asked to.""",
        _object({"conversationId": _conversation_id(),
                 "confirmName": _string(L.NAME_MAX_CHARS, "The conversation's exact name.", pattern=_NAME_PATTERN)},
                ("conversationId", "confirmName")),
        _all_required({"conversationId": _conversation_id(), "deleted": _boolean()}),
    ),
    _tool(
        "kiro_worktree_inspect",
        """Review a worktree conversation's isolated workspace before integrating or cleaning it up: branch,
        base ref, active-run count, changed files, merge state against the base, and bounded diff statistics.
        Read-only: it never commits, merges or pushes.""",
        _object({"conversationId": _conversation_id()}, ("conversationId",)),
        _all_required({
            "conversationId": _conversation_id(),
            "branch": _string(L.GIT_REF_MAX_CHARS),
            "baseRef": _string(L.GIT_REF_MAX_CHARS, "The base ref as it was given when the worktree was made."),
            "baseCommit": _BASE_COMMIT,
            "activeRuns": _count(),
            "clean": _boolean("No uncommitted changes."),
            "ignoredFiles": _count("Git-ignored files in the worktree; cleanup refuses while any exist."),
            "mergeState": _enum(MERGE_STATES),
            "changedFiles": _array(_all_required({"path": _string(L.PATH_MAX_CHARS, "Worktree-relative."),
                                                  "status": _string(8)}), L.CATALOG_MAX_ITEMS),
            "changedFilesTruncated": _boolean(),
            "diffStats": _all_required({"files": _count(), "insertions": _count(), "deletions": _count()}),
        }),
    ),
    _tool(
        "kiro_worktree_cleanup",
        """Remove a worktree conversation's worktree and its kiro/ branch once it is clean, inactive and already
        integrated into its base and holds no ignored files; refuses otherwise with a stable code (active, dirty,
        ignored files, conflicted, unintegrated). While it runs, new runs of the conversation are refused
        (conversation_retiring).
        There is no force option and it never merges. Success archives the conversation as retired for good.""",
        _object({"conversationId": _conversation_id()}, ("conversationId",)),
        _all_required({"conversationId": _conversation_id(), "removedBranch": _string(L.GIT_REF_MAX_CHARS),
                       "state": _enum(CONVERSATION_STATES)}),
    ),
)

TOOLS_BY_NAME: dict[str, Tool] = {tool.name: tool for tool in TOOLS}


# -- validation -----------------------------------------------------------------------------------
def invalid_arguments(message: str) -> KirocrewError:
    return BadInputError(_bounded(message), code="invalid_arguments")


def _bounded(text: str, limit: int = L.ERROR_MESSAGE_MAX_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


_SAFE_KEY = re.compile(r"^[A-Za-z0-9_]{1,40}$")


def _where(path: Any) -> str:
    """A JSON path built from schema-known names; caller-chosen keys never reach it (see _explain)."""
    parts = [f"[{p}]" if isinstance(p, int) else f".{p}" for p in path]
    return "arguments" + "".join(parts)


def _explain(error: Any) -> str:
    """Say what rule was broken without echoing the offending value: it may be huge or a secret."""
    kind, spec = error.validator, error.validator_value
    if kind == "additionalProperties":
        extras = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        shown = [key if _SAFE_KEY.match(key) else "<redacted>" for key in extras[:3]]
        more = f" and {len(extras) - 3} more" if len(extras) > 3 else ""
        return f"unknown propert{'y' if len(extras) == 1 else 'ies'} {', '.join(shown)}{more}"
    if kind == "required":
        missing = [key for key in spec if isinstance(error.instance, dict) and key not in error.instance]
        return f"missing required {', '.join(missing)}"
    if kind == "type":
        return f"must be of type {spec if isinstance(spec, str) else ' or '.join(spec)}"
    if kind == "maxItems":
        return f"must have at most {spec} items (got {len(error.instance)})"
    if kind == "minItems":
        return f"must have at least {spec} item{'s' if spec != 1 else ''}"
    if kind == "maxLength":
        return f"must be at most {spec} characters"
    if kind == "minLength":
        return "must not be empty" if spec == 1 else f"must be at least {spec} characters"
    if kind == "pattern":
        return "has an invalid format"
    if kind in ("enum", "const"):
        allowed = spec if kind == "enum" else [spec]
        return "must be one of " + ", ".join(json.dumps(v) for v in allowed)
    if kind in ("minimum", "maximum"):
        return f"must be {'≥' if kind == 'minimum' else '≤'} {spec}"
    if kind == "uniqueItems":
        return "must not repeat an item"
    if kind == "minProperties":
        return "needs at least one setting to change"
    if kind == "not" and isinstance(error.schema.get("description"), str):
        return f"violates a rule: {error.schema['description']}"
    if kind == "not":
        return "name, workspace, workspaceMode and baseRef are only for conversation \"new\""
    return f"violates {kind}"


@lru_cache(maxsize=None)
def _validator(name: str) -> Any:
    from jsonschema import Draft202012Validator  # ~90 ms import: only when a tool is actually called

    return Draft202012Validator(TOOLS_BY_NAME[name].input_schema)


def validate_arguments(tool: str, args: Any) -> dict[str, Any]:
    """Validate one tool call's arguments; returns a copy with top-level defaults filled in.

    Raises ``invalid_arguments`` (exit 2) naming the first broken rule by its location and the rule,
    never the offending value, and ``unknown_tool`` for a name outside the 16.
    """
    if tool not in TOOLS_BY_NAME:
        raise BadInputError("unknown tool" + (f" {tool}" if _SAFE_KEY.match(str(tool)) else ""), code="unknown_tool")
    if args is None:
        args = {}
    from jsonschema.exceptions import relevance

    errors = sorted(_validator(tool).iter_errors(args), key=relevance)
    if errors:
        first = errors[0]
        # An if/then failure reports on "then"; the detail lives in its sub-error (missing name/workspace).
        while first.context:
            first = sorted(first.context, key=relevance)[0]
        # "required" reports each missing key separately; _explain already lists them all.
        top = (errors[0].validator, tuple(errors[0].absolute_path))
        others = {(e.validator, tuple(e.absolute_path)) for e in errors} - {top}
        more = f" (+{len(others)} more)" if others else ""
        raise invalid_arguments(f"{tool}: {_where(first.absolute_path)} {_explain(first)}{more}")
    filled = dict(args)
    for key, prop in TOOLS_BY_NAME[tool].input_schema["properties"].items():
        if "default" in prop and key not in filled:
            filled[key] = prop["default"]
    return filled


# -- docs -----------------------------------------------------------------------------------------
def _limit_rows() -> list[str]:
    rows = ["| Limit | Value |", "| --- | --- |"]
    for name in dir(L):
        if name.isupper():
            rows.append(f"| `{name}` | {getattr(L, name):,} |")
    return rows


def _error_rows() -> list[str]:
    from kirocrew_conversations.errors import CATALOGUE

    return ["| Code | Meaning |", "| --- | --- |", *(f"| `{code}` | {text} |" for code, text in CATALOGUE.items())]


def _warning_rows() -> list[str]:
    from kirocrew_conversations.errors import WARNINGS

    return ["| Code | Meaning |", "| --- | --- |", *(f"| `{code}` | {text} |" for code, text in WARNINGS.items())]


def render_tools_reference() -> str:
    lines = [
        "# Conversations MCP tools",
        "",
        "<!-- Generated from kirocrew_conversations.tool_schemas by"
        " `python -m kirocrew_conversations.tool_schemas > docs/conversations/tools.md`."
        " Do not edit by hand: a test fails when this page and the code disagree. -->",
        "",
        "Every input schema is strict (JSON Schema 2020-12): unknown properties are rejected and every string,"
        " list and number is bounded. A call that breaks a rule fails with `invalid_arguments`; the message names"
        " the argument and the rule, never the value.",
        "",
        "## Limits",
        "",
        *_limit_rows(),
        "",
    ]
    for tool in TOOLS:
        lines += [
            f"## {tool.name}",
            "",
            tool.description,
            "",
            "| Argument | Type | Required | Description |",
            "| --- | --- | --- | --- |",
        ]
        required = set(tool.input_schema.get("required", ()))
        for key, prop in tool.input_schema["properties"].items():
            kind = prop.get("type", "")
            shown = " ".join(f"`{v}`" for v in prop["enum"]) if "enum" in prop else f"{kind}"
            lines.append(f"| `{key}` | {shown} | {'yes' if key in required else 'no'} | "
                         f"{prop.get('description', '')} |")
        lines += [
            "",
            "<details><summary>Input schema</summary>",
            "",
            "```json",
            json.dumps(tool.input_schema, indent=2, ensure_ascii=False),
            "```",
            "",
            "</details>",
            "",
            "<details><summary>Output schema</summary>",
            "",
            "```json",
            json.dumps(tool.output_schema, indent=2, ensure_ascii=False),
            "```",
            "",
            "</details>",
            "",
        ]
    lines += [
        "## Error codes",
        "",
        "A failed call returns `isError: true` and one text block `error[<code>]: <message>`, with no"
        " `structuredContent`: the output schemas above describe successes, and clients built on the"
        " TypeScript MCP SDK reject structured content that does not match them."
        " Branch on the code; the message is for people and is redacted (no absolute paths, prompts or secrets)."
        " Codes marked *Run error* appear in a run's `error.code` instead.",
        "",
        *_error_rows(),
        "",
        "## Warning codes",
        "",
        "A run view's `warnings` (in `kiro_result`, `kiro_wait`, `kiro_delegate`, and the answers of `kiro_spawn`"
        " and `kiro_send`) lists what to know about how the run runs that is not an error: the run goes on."
        " Each is `{code, message}`; branch on the code.",
        "",
        *_warning_rows(),
        "",
    ]
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(render_tools_reference())
