"""What the imitated kiro-cli knows out of the box: models, built-in tools, slash commands."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kirocrew_testing.fake_kiro import switches

DEFAULT_MODEL = "auto"


@dataclass(frozen=True)
class Model:
    model_id: str
    name: str
    description: str
    context_window_tokens: int = 200_000

    def list_models_row(self) -> dict[str, Any]:
        """A row of ``chat --list-models --format json``."""
        return {"model_name": self.name, "model_id": self.model_id, "description": self.description,
                "context_window_tokens": self.context_window_tokens}

    def session_row(self) -> dict[str, Any]:
        """A row of the raw ``models.availableModels`` in ``session/new``."""
        return {"modelId": self.model_id, "name": self.name, "description": self.description}


_BUILT_IN_MODELS = (
    Model("auto", "auto", "Models chosen by task for optimal usage and consistent quality"),
    Model("claude-sonnet-4.5", "claude-sonnet-4.5", "The latest Claude Sonnet model"),
    Model("claude-sonnet-4", "claude-sonnet-4", "Hybrid reasoning and coding for regular use"),
    Model("claude-haiku-4.5", "claude-haiku-4.5", "The latest Claude Haiku model"),
    Model("claude-opus-4.5", "claude-opus-4.5", "The most capable Claude model", 1_000_000),
)


# ``--effort`` and the ``effort`` command accept these (kiro-cli 2.12+).
EFFORTS = ("low", "medium", "high", "xhigh", "max")


def models() -> list[Model]:
    """The served models: the built-in list, or ``KIRO_FAKE_MODELS`` (comma-separated ids)."""
    ids = switches.model_ids()
    if ids is None:
        return list(_BUILT_IN_MODELS)
    known = {m.model_id: m for m in _BUILT_IN_MODELS}
    return [known.get(i) or Model(i, i, f"{i} (fake)") for i in dict.fromkeys(ids)]


def default_model_id() -> str:
    ids = [m.model_id for m in models()]
    return DEFAULT_MODEL if DEFAULT_MODEL in ids else ids[0]


# kiro-cli 2.14/2.15's built-in tools (the ``/tools`` rows with source "built-in").
BUILT_IN_TOOLS: dict[str, str] = {
    "code": "Code intelligence: symbols, references, diagnostics",
    "glob": "Find files by glob pattern",
    "goal": "Track the session goal",
    "grep": "Search file contents",
    "introspect": "Answer questions about Kiro CLI itself",
    "knowledge": "Store and search a knowledge base",
    "read": "Read files and directories",
    "shell": "Run a shell command",
    "subagent": "Delegate a task to a sub-agent",
    "todo_list": "Keep a TODO list for the task",
    "use_aws": "Call AWS APIs",
    "web_fetch": "Fetch a web page",
    "web_search": "Search the web",
    "write": "Create and edit files",
}

# The 2.14/2.15 slash command set (``_kiro.dev/commands/available``).
COMMANDS: dict[str, str] = {
    "agent": "Manage agents", "chat": "Manage chat sessions", "clear": "Clear the conversation",
    "code": "Code intelligence", "compact": "Summarize the conversation to free context",
    "context": "Manage context files", "effort": "Set reasoning effort", "feedback": "Send feedback",
    "goal": "Set the session goal", "guide": "Switch to the guide agent", "help": "Show help",
    "hooks": "Show hooks", "knowledge": "Manage the knowledge base", "mcp": "Show MCP servers",
    "model": "Select the model", "paste": "Paste an image", "plan": "Switch to the planner",
    "prompts": "List prompts", "quit": "Quit", "reply": "Reply in an editor",
    "rewind": "Rewind the conversation", "stats": "Show session statistics",
    "tools": "Show tools and permissions", "usage": "Show usage",
}
