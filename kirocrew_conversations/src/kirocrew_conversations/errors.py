"""The catalogue of stable error codes the conversations server reports.

Callers (MCP clients, the CLI twins, scripts) branch on ``code``, never on the
message, so a code here is a promise: its meaning does not change once shipped.
The MCP tools extend this catalogue; the store raises only codes listed here.
"""

from __future__ import annotations

from kirocrew_core.errors import KirocrewError

CATALOGUE: dict[str, str] = {
    "invalid_arguments": "A tool's arguments do not match its schema; the message names where, never the value.",
    "unknown_tool": "No tool has this name.",
    "state_dir_in_use": "Another server process owns this state directory; it was left undisturbed.",
    "state_dir_unusable": "The state directory or database file cannot be created or secured.",
    "database_too_new": "The database was written by a newer server version; it was not changed.",
    "database_unusable": "The database file is not a usable SQLite database or its schema is damaged.",
    "conversation_not_found": "No conversation has this id, or none this caller may see: a crew session sees only "
                              "the conversations it created and their descendants.",
    "run_not_found": "No run has this id.",
    "permission_not_found": "No permission request has this id for this run.",
    "illegal_transition": "The run cannot move from its current status to the requested one.",
    "conversation_busy": "The conversation has active or queued work; the change needs it idle.",
    "conversation_archived": "The conversation is archived; it accepts no new runs or changes.",
    "not_next_in_queue": "Runs start in FIFO order; an earlier queued run must start first.",
    "payload_erased": "The queued prompt was already delivered or discarded; its content is gone.",
    "conversation_not_archived": "Permanent deletion needs an archived conversation.",
    "confirmation_mismatch": "Deleting needs the conversation's exact name as confirmation.",
    "server_restarted": "Run error: the server restarted while the run was unfinished; it is interrupted.",
    "bad_cursor": "The pagination cursor is malformed or does not belong to this listing.",
    # -- the orchestrator (orchestrator.py) --
    "server_stopped": "Run error: the server shut down while the run was executing; it is interrupted.",
    "run_cancelled": "Run error: the run was cancelled (kiro_cancel, or kiro ended the turn as cancelled).",
    "run_deadline_exceeded": "Run error: the run reached its execution deadline and was stopped.",
    "kiro_run_failed": "Run error: kiro-cli refused the prompt, exited, or failed during the run.",
    "run_replaced": "Run error: kiro_send with delivery interrupt cancelled this run and queued a replacement.",
    "run_superseded": "Run error: a kiro_send interrupt discarded this queued follow-up before it started.",
    "attention_deadline_exceeded": "Run error: a permission request went unanswered past the attention deadline; "
                                   "it was answered cancelled and the run ended needs_attention_expired.",
    "permission_not_pending": "The permission request was already answered, withdrawn, or its run ended.",
    "unsupported_permission_option": "Only allow_once or reject_once, and only an option Kiro offered.",
    "settings_not_applied": "Run error: kiro-cli refused or did not confirm the run's model, mode or effort; "
                            "nothing was prompted.",
    "agent_file_unavailable": "Run error: the run's agent is kirocrew's rendered agent, and its file "
                              "(kirocrew.json in kiro's agents directory) is missing or unusable; no kiro-cli was "
                              "started. `kirocrew mcp rebuild` renders it (a host renders it when it starts).",
    # -- question cards (questions.py; kiro_question_answer) --
    "question_not_found": "No open question card has this id for this conversation (answered, dismissed, expired, "
                          "withdrawn, or never this conversation's).",
    "question_ambiguous": "The conversation has several open question cards and no askId named one.",
    "answer_not_asked": "An answer names a question the card did not ask (or answers one twice); the card stays "
                        "open.",
    "answer_too_long": "An answer (or all of them together) is too long to deliver to Kiro; it is refused, never "
                       "truncated, and the card stays open.",
    # -- who may act on what (scope.py) --
    "owner_decision_required": "A crew session called kiro_permission_decide: permission requests are the owner's "
                               "(the owner's permission policy asked the owner about the call), so only the person "
                               "answers them, never a session, not even for a conversation it created. Nothing was "
                               "decided.",
    "caller_unverified": "kirocrew could not tell who the caller is (its process ancestry could not be read, or it "
                         "is a process the host started for no session); it sees and changes no conversation.",
    "caller_gone": "The process that opened the caller's connection has exited, so the connection is no one's any "
                   "more (its pid may name another process now); nothing was done.",
    "authority_escalation": "A crew session asked for an authority above its own (a read_only session starting an "
                            "unrestricted conversation); a session gives work its own authority or a narrower one, "
                            "and only the owner chooses a wider one. Nothing was created or changed.",
    # -- the tools (service.py) --
    "conversation_name_taken": "Another conversation already has this name; names are unique.",
    "conversation_mismatch": "The run does not belong to the given conversation.",
    "workspace_not_found": "The workspace path does not exist or is not a directory.",
    "authority_unavailable": "The requested execution authority cannot run on this host; nothing ran unrestricted.",
    "unsupported_capability": "The installed kiro-cli (or this server) does not advertise the feature asked for.",
    "unknown_model": "The model is not in kiro-cli's live catalog; the message lists the available ids.",
    "unknown_mode": "The mode is not an agent kiro-cli announces; the message lists the available agents.",
    "invalid_image": (
        "An image path is not a readable regular file, is not an image, or differs from its declared size."
    ),
    "not_a_worktree_conversation": "The conversation works in a shared workspace; worktree tools need worktree mode.",
    "conversation_retired": "The conversation's worktree was cleaned up; it cannot run again.",
    "conversation_retiring": "The conversation's worktree is being cleaned up right now; no run can be queued.",
    "slash_command_refused": "The message starts with / (a Kiro slash command) and the conversation does not "
                             "allow that command, or Kiro does not announce it; nothing was queued.",
    "unknown_slash_command": "allowedSlashCommands names a command kiro_capabilities does not list.",
    "kiro_session_in_use": "A live process holds the conversation's Kiro session (its lock); nothing was deleted "
                           "or repaired.",
    "session_image_limit": "The conversation's Kiro session would reach kiro's limit of 100 inline images, past "
                           "which every request of it fails; nothing was queued. `kirocrew conversations repair ID` "
                           "keeps the newest 80 and frees room.",
    "no_kiro_session": "The conversation has no Kiro session yet (no run started one): nothing to open or repair.",
    "kiro_session_not_found": "kiro-cli's files of the conversation's Kiro session are gone; nothing was repaired.",
    "kiro_unavailable": "kiro-cli is not installed, not runnable, or did not answer; see the message.",
    "invalid_configuration": "A server setting (flag or KIRO_CONVERSATIONS_* variable) is malformed or out of range.",
    "internal_error": "An unexpected server fault; details went to the server log, not to the client.",
    # -- the server command (server_command.py) --
    "standalone_only": "`kirocrew mcp-conversations` got server options without --standalone; the host takes "
                       "its settings from KIRO_CONVERSATIONS_* in its own environment. Nothing was started.",
    # -- worktrees (worktrees.py) --
    "not_a_git_repository": "The workspace is not inside a Git repository (or Git cannot read it).",
    "not_repository_root": "Worktree mode needs the root of a Git repository, not a subdirectory.",
    "repository_dirty": "The repository has staged, unstaged or untracked changes; worktree mode needs it clean.",
    "invalid_base_ref": "The base ref is empty, too long, or looks like an option; nothing was created.",
    "base_ref_not_found": "The base ref does not resolve to a commit in the repository.",
    "worktree_exists": "The worktree branch or directory already exists; nothing was changed.",
    "worktree_not_found": "The conversation's worktree directory or branch no longer exists.",
    "worktree_active": "The worktree's conversation has active or queued runs; cleanup needs it idle.",
    "worktree_dirty": "The worktree has uncommitted or untracked changes; cleanup refuses and has no force.",
    "worktree_ignored_files": "The worktree holds git-ignored files that removing it would delete; move or "
                              "delete them first (the message gives the count).",
    "worktree_not_cleaned_up": "The archived conversation's worktree or branch still exists; run "
                               "kiro_worktree_cleanup (or remove them yourself) before deleting it.",
    "worktree_conflicted": "The worktree has unresolved conflicts or a merge/rebase in progress.",
    "worktree_unintegrated": "The worktree branch has commits not reachable from the base's current tip.",
    "git_failed": "Git is missing, timed out, or failed unexpectedly; nothing was changed on purpose.",
    # -- session directives (directive_effects.py; shown as a refused directive event, never to a tool caller) --
    "monitor_not_found": "monitor_update found no monitor loop on the conversation to update.",
    "monitor_cap_too_low": "monitor_update's max_cycles does not exceed the cycles the loop already ran.",
    "monitor_paused": "The monitor loop stopped at its cycle cap; only an update raising max_cycles revives it.",
}


NOT_KIROCREW_AGENT = "kirocrew_servers_not_mounted"
#: Codes of a run's ``warnings``: what a caller should know about how a run runs that is not an error.
WARNINGS: dict[str, str] = {
    NOT_KIROCREW_AGENT: "The run runs as another agent than kirocrew's rendered one (a mode was named): "
                        "kirocrew's MCP servers (kirocrew-core, kirocrew-conversations, kirocrew-cron, ...) are "
                        "mounted only if that agent declares them. The run itself is unaffected.",
}


def conversation_error(code: str, message: str) -> KirocrewError:
    """A :class:`KirocrewError` carrying ``code``, which must be in :data:`CATALOGUE`."""
    if code not in CATALOGUE:
        raise ValueError(f"undocumented error code: {code!r}")  # a bug in our code, not user input
    return KirocrewError(message, code=code)
