"""``kirocrew spawn run|list``, ``kirocrew run TASK.md``: the twins of ``spawn_run``, ``spawn_list``, ``task_run``.

Each command is one ``kirocrew-core`` tool call through the host (started in the background
if none runs), as a ``cli`` client. Outside every crew session that is the person: ``spawn run``
spawns sub-agents with no parent, ``spawn list`` shows every sub-agent with its parent. Run
inside a crew session (a descendant of its kiro-cli, whatever its environment says), the command
acts as that session, exactly as the tool would. Sub-agents run in the host, so there is no in-process
mode: with ``KIROCREW_NO_HOST=1`` the commands refuse (``host_required``).

Registered lazily by :mod:`kirocrew_conversations.plugin`; the calls go through the
standard-library client (:mod:`kirocrew_core.host.tool_client`), so no command imports the mcp SDK.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import click

from kirocrew_core.errors import KirocrewError

CORE_SERVER = "kirocrew-core"
_ATTENTION_RECHECK_SECS = 1.0
# task_run's result names the conversation and its run; ``--wait`` reads them back from it.
_STARTED = re.compile(r"conversation (conv_[0-9a-f]+) \(.*\), run (run_[0-9a-f]+)\.")


def call_core(tool: str, arguments: dict[str, Any]) -> str:
    """One ``kirocrew-core`` tool call through the host; its text, or its refusal as a :class:`KirocrewError`."""
    from kirocrew_core.host.tool_client import call_text
    from kirocrew_core.host.twin import host_disabled

    if host_disabled():
        raise KirocrewError("sub-agents and task runs live in the host; unset KIROCREW_NO_HOST to use this command",
                            code="host_required")
    return call_text(CORE_SERVER, tool, arguments)


@click.group(name="spawn")
def spawn() -> None:
    """Sub-agents: conversations spawned to work a task in parallel (twins of spawn_run and spawn_list)."""


@spawn.command(name="run")
@click.argument("tasks", nargs=-1, required=True)
@click.option("--agent", help="The Kiro agent every task runs on (default: kirocrew, the rendered agent).")
@click.option("--cwd", type=click.Path(file_okay=False), help="Working directory (default: this directory).")
@click.option("--model", help="The model id (default: the agent's).")
@click.option("--crew", help="A configured crew (kirocrew crew list): its agent, model, workspace and authority.")
def spawn_run(tasks: tuple[str, ...], agent: str | None, cwd: str | None, model: str | None,
              crew: str | None) -> None:
    """Spawn one sub-agent per TASK, in one batch; prints their ids."""
    arguments: dict[str, Any] = {"tasks": list(tasks)} if len(tasks) > 1 else {"task": tasks[0]}
    if cwd or not _crew_has_workspace(crew):  # a crew's own workspace applies unless --cwd names one
        arguments["cwd"] = os.path.abspath(cwd or os.getcwd())
    for name, value in (("agent", agent), ("model", model), ("crew", crew)):
        if value:
            arguments[name] = value
    click.echo(call_core("spawn_run", arguments))


def _crew_has_workspace(name: str | None) -> bool:
    """Whether the crew ``name`` binds a workspace; False for none or an unknown one (the tool says which)."""
    if not name:
        return False
    from kirocrew_core.crews.bindings import find_crew

    try:
        return find_crew(name).workspace is not None
    except KirocrewError:
        return False


@spawn.command(name="list")
def spawn_list() -> None:
    """Every sub-agent with its status and parent conversation (yours only, inside a crew session)."""
    click.echo(call_core("spawn_list", {}))


@click.command(name="run")
@click.argument("task_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", help="The new conversation's name (default: task-<random>).")
@click.option("--cwd", type=click.Path(file_okay=False), help="Working directory (default: this directory).")
@click.option("--wait", "wait_", is_flag=True, help="Wait for the run to end and print its reply.")
def run_task(task_file: Path, name: str | None, cwd: str | None, wait_: bool) -> None:
    """Run TASK_FILE's text as a new conversation; prints its id (twin of task_run)."""
    arguments: dict[str, Any] = {"spec": str(task_file.resolve()), "cwd": os.path.abspath(cwd or os.getcwd())}
    if name:
        arguments["name"] = name
    started = call_core("task_run", arguments)
    match = _STARTED.search(started)
    if match is None:  # our own tool's wording changed: a bug, not the user's
        raise KirocrewError(f"unexpected task_run result: {started[:200]}", code="internal_error")
    conversation_id, run_id = match.groups()
    click.echo(conversation_id)
    if wait_:
        import asyncio

        run = asyncio.run(_wait(conversation_id, run_id))
        if run["reply"]:
            click.echo(run["reply"]["text"])
        if run["status"] != "completed":  # as `kirocrew conversations wait`: say how it ended, exit 1
            error = run["error"] or {}
            click.echo(f"kirocrew: run {run_id} ended {run['status']}"
                       + (f" (error[{error['code']}])" if error.get("code") else ""), err=True)
            click.get_current_context().exit(1)


async def _wait(conversation_id: str, run_id: str) -> dict[str, Any]:
    """``kiro_wait`` on the host's conversations until the run is terminal; its final view."""
    import asyncio

    from kirocrew_conversations.service import ServiceConfig
    from kirocrew_conversations.twin_backend import open_backend
    from kirocrew_conversations.vocabulary import TERMINAL_RUN_STATUSES

    target = [{"conversationId": conversation_id, "runId": run_id}]
    async with open_backend(ServiceConfig.from_env()) as backend:
        while True:
            run: dict[str, Any] = (await backend.call("kiro_wait", {"targets": target, "mode": "any"}))["runs"][0]
            if run["status"] in TERMINAL_RUN_STATUSES:
                return run
            if run["status"] == "needs_attention":  # a person answers it (dashboard, kirocrew conversations)
                await asyncio.sleep(_ATTENTION_RECHECK_SECS)
