"""docs/conversations/index.md stays true: its settings, flags, client configs and error codes exist."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from kirocrew_conversations.errors import CATALOGUE, WARNINGS
from kirocrew_conversations.service import ServiceConfig
from kirocrew_conversations.state_paths import STATE_DIR_ENV

PAGE = Path(__file__).resolve().parents[2] / "docs" / "conversations" / "index.md"


def page() -> str:
    return PAGE.read_text()


def test_every_setting_the_page_names_is_read_by_the_server():
    named = set(re.findall(r"`(KIRO_CONVERSATIONS_[A-Z_]+)`", page()))
    assert named == {STATE_DIR_ENV, *ServiceConfig.ENV.values(), ServiceConfig.ROOTS_ENV}


def test_every_flag_the_page_names_is_an_option_of_the_server_command():
    kirocrew = Path(sys.executable).with_name("kirocrew")
    help_text = subprocess.run([str(kirocrew), "mcp-conversations", "--help"], capture_output=True, text=True,
                               check=True).stdout
    head, table = page().split("| Setting | Argument (with `--standalone`) | Default |", 1)
    flags = set(re.findall(r"`(--[a-z-]+)", table.split("\n\n", 1)[0]))
    assert flags and all(flag in help_text for flag in flags), flags
    assert "--standalone" in help_text and '"args": ["mcp-conversations", "--standalone"]' in head


def test_the_client_configurations_are_valid_json_that_start_the_server():
    blocks = re.findall(r"```json\n(.*?)```", page(), re.S)
    configs = [json.loads(block) for block in blocks]
    servers = [c["mcpServers"]["kirocrew-conversations"] for c in configs if "mcpServers" in c]
    assert len(servers) == 2
    assert all(s == {"command": "kirocrew", "args": ["mcp-conversations"]} for s in servers)


def test_every_error_and_warning_code_the_page_names_is_in_a_catalogue():
    codes = {c for c in re.findall(r"`([a-z]+(?:_[a-z]+)+)`", page()) if "_" in c}
    not_codes = {"read_only", "workspace_write", "allow_once", "reject_once", "needs_attention", "timed_out",
                 "needs_attention_expired",
                 "kiro_delegate", "kiro_wait", "kiro_spawn", "kiro_send", "kiro_result", "kiro_cancel",
                 "kiro_status", "kiro_events", "kiro_configure", "kiro_capabilities", "kiro_delete",
                 "kiro_permission_decide", "kiro_question_answer", "ask_question", "timeout_secs",
                 "kiro_worktree_inspect", "kiro_worktree_cleanup", "kiro_archive",
                 "kiro_fork", "authority_backends", "live_kiro", "fs_read", "restart_sessions",
                 "conversations_client", "hosted_conversations_client", "kiro_default",
                 "allow_always",  # the owner's decision, next to allow_once and reject_once
                 "policy_decision",  # the security event log's record of a gate decision
                 "host_not_running",  # the dashboard routes' own code (api.py), not a tool's
                 "task_run", "created_by",  # a kirocrew-core tool; the store's creator column
                 "parent_session_id",  # a field of kiro-cli's own session files
                 "hand_over", "repair_session",  # the two session routes' names in the event log
                 "config_invalid",  # core's code for a config.toml it cannot use (the Crews section says so)
                 "search_chat_history"}  # a kirocrew-core tool (the history of conversations)
    unknown = codes - not_codes - set(CATALOGUE) - set(WARNINGS)
    assert not unknown, f"not error codes and not known names: {sorted(unknown)}"
