"""The Conversations MCP's words, in one place: run statuses, decisions, authorities, efforts, states.

The store's state machine, the database's CHECK constraint, the tool schemas, the CLI's choices and
the event views all read these names, so a status or an option is added in one place. Run statuses
are only ever appended (a migration's CHECK lists a prefix of them).
"""

from __future__ import annotations

from kirocrew_core.home import RENDERED_AGENT

# -- runs -----------------------------------------------------------------------------------------
# queued → running ⇄ needs_attention → one terminal status (store.py keeps the transitions).
RUN_STATUSES = (
    "queued", "running", "needs_attention", "completed", "failed", "cancelled", "timed_out", "interrupted",
    # A permission request went unanswered past the attention deadline (schema v3).
    "needs_attention_expired",
)
TERMINAL_RUN_STATUSES = ("completed", "failed", "cancelled", "timed_out", "interrupted", "needs_attention_expired")
TERMINAL_STATUSES = frozenset(TERMINAL_RUN_STATUSES)
ACTIVE_STATUSES = frozenset({"running", "needs_attention"})
NONTERMINAL_STATUSES = frozenset({"queued"}) | ACTIVE_STATUSES
# Terminal statuses an event view reports as an error (a cancel is the caller's own doing).
FAILURE_STATUSES = frozenset({"failed", "timed_out", "interrupted", "needs_attention_expired"})

# -- permissions ------------------------------------------------------------------------------------
# The one-shot answers kiro is given; its own "always" options are never chosen (kiro would then trust the tool
# for the whole session, past the permission policy).
DECISIONS = ("allow_once", "reject_once")
# What the owner may decide: a one-shot answer, or "allow always", which adds a permission-policy rule (in the
# scope the owner picks) and answers kiro allow_once.
OWNER_DECISIONS = (*DECISIONS, "allow_always")
ALWAYS_SCOPES = ("workspace", "authority", "everywhere")

# What holds a needs_attention run: a tool permission, or a question card (ask_question).
ATTENTION_KINDS = ("permission", "question")

# -- run settings -----------------------------------------------------------------------------------
UNRESTRICTED = "unrestricted"
READ_ONLY = "read_only"
WORKSPACE_WRITE = "workspace_write"
AUTHORITIES = (UNRESTRICTED, READ_ONLY, WORKSPACE_WRITE)
SANDBOXED_AUTHORITIES = (READ_ONLY, WORKSPACE_WRITE)
# How much each built-in authority may do, least first: a crew session never gives work more than its own.
AUTHORITY_RANK = {READ_ONLY: 0, WORKSPACE_WRITE: 1, UNRESTRICTED: 2}
EFFORTS = ("low", "medium", "high", "xhigh", "max")  # kiro-cli --effort values
# The agent (mode) a run gets when neither it nor its conversation names one: the rendered kirocrew agent,
# the one that mounts kirocrew's MCP servers. kiro's own default (kiro_default) mounts none of them.
DEFAULT_AGENT = RENDERED_AGENT
WORKSPACE_MODES = ("shared", "worktree")
DELIVERIES = ("queue", "interrupt")
WAIT_MODES = ("any", "all")

# -- conversations ----------------------------------------------------------------------------------
# "retired" is an archived conversation whose worktree was cleaned up.
CONVERSATION_STATES = ("idle", "active", "archived", "retired")
ARCHIVE_FILTERS = ("active", "archived", "all")
MERGE_STATES = ("integrated", "unintegrated", "conflicted", "unknown")
# The kinds a client sees in kiro_events (views.event_view maps stored events onto them; slash
# commands, mode and settings changes are "config").
EVENT_KINDS = ("phase", "plan", "tool", "permission", "usage", "config", "message", "error", "question")
