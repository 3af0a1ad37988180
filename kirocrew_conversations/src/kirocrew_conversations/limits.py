"""Every numeric limit of the Conversations MCP, in one place.

The first block is taken from the spec (``conversations-mcp.md``); the second block holds bounds the
spec leaves open, chosen here so every schema string, list and number is bounded. The schemas,
the docs page and ``kiro_capabilities`` all read these names, so a limit changes in one place.
"""

from __future__ import annotations

# -- From the spec ------------------------------------------------------------------------------
WAIT_MIN_TARGETS = 1
WAIT_MAX_TARGETS = 8
MAX_IMAGES = 4
IMAGE_MAX_BYTES = 25 * 1024 * 1024  # declared size per image
FINAL_REPLY_MAX_BYTES = 256 * 1024  # longer replies are kept truncated, with metadata
RUN_DEADLINE_SECONDS = 30 * 60  # a run that reaches it becomes timed_out
# A permission request unanswered this long is answered cancelled; its run ends needs_attention_expired.
ATTENTION_DEADLINE_SECONDS = 10 * 60
WAIT_CEILING_SECONDS = 30 * 60  # kiro_wait / kiro_delegate; no caller-selected duration
WORKERS_DEFAULT = 4
WORKERS_MIN = 1
WORKERS_MAX = 8
IDLE_WORKER_SECONDS = 5 * 60
AUTO_ARCHIVE_DAYS = 30

# -- Our bounds where the spec names none -------------------------------------------------------
ID_MAX_CHARS = 64  # opaque conversation/run/permission ids
NAME_MAX_CHARS = 64  # conversation names (also the slug source of worktree branches)
MESSAGE_MAX_CHARS = 200_000  # one prompt; larger context belongs in workspace files
PATH_MAX_CHARS = 4096  # PATH_MAX on Linux
MODEL_MAX_CHARS = 128
AGENT_MODE_MAX_CHARS = 128
GIT_REF_MAX_CHARS = 255
CURSOR_MAX_CHARS = 512
FINGERPRINT_MAX_CHARS = 128
TEXT_MAX_CHARS = 2_000  # short redacted texts: summaries, error messages, descriptions
PAGE_SIZE_DEFAULT = 20
PAGE_SIZE_MAX = 100
STATUS_FILTER_MAX_VALUES = 8
CATALOG_MAX_ITEMS = 200  # models, slash commands, changed files listed by inspect
COUNT_MAX = 2**53 - 1  # any count or byte size; the JSON-safe integer ceiling
ERROR_MESSAGE_MAX_CHARS = 300  # validation messages never grow with the caller's input

# -- Sub-agents (kirocrew-core's spawn tools) ---------------------------------------------------
SUBAGENTS_DEFAULT = 4  # concurrently active children per parent (KIRO_CONVERSATIONS_MAX_SUBAGENTS)
SUBAGENTS_MIN = 1
SUBAGENTS_MAX = 32
SUBAGENTS_MAX_WAIT_DEFAULT = RUN_DEADLINE_SECONDS  # a child's run ends by then anyway
SUBAGENTS_MAX_WAIT_MIN = 1  # tests shorten it; the reference's floor of 60 s is not needed here
SUBAGENTS_MAX_WAIT_MAX = 7200
SUBAGENT_TASK_MAX_CHARS = 5000  # one spawned task (the reference's bound)
WORKFLOW_PROMPT_MAX_CHARS = 100_000  # one ctx.agent prompt: a workflow passes earlier replies on
SUBAGENT_BATCH_MAX = 8  # tasks in one spawn_run / agents in one spawn_sub_agents
COMPLETION_KEEP_CHARS = 4000  # result text quoted in a completion message; spawn_status has the rest
TASK_SPEC_MAX_CHARS = 50_000  # task_run's spec (inline text, or the file it names)
