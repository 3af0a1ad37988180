"""``kirocrew workflow run|rerun|author|save|list|show|cancel``: the twins of the ``workflow_*`` tools.

Each command is one ``kirocrew-core`` tool call through the host (as :mod:`kirocrew_conversations.spawn_cli`
does), so a command run outside every session acts for the person, and one run from a session's shell
acts as that session. ``run --wait`` follows the run with ``workflow_show`` until it ends and exits 0
only when it finished.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import click

from kirocrew_core.errors import KirocrewError

from kirocrew_conversations.spawn_cli import call_core

_STARTED = re.compile(r"Started workflow run `(wf_[0-9a-f]+)`")
_WAIT_POLL_SECS = 0.5
_TERMINAL = ("finished", "failed", "cancelled")


@click.group(name="workflow")
def workflow() -> None:
    """Workflows: Python scripts that orchestrate sub-agents, run sandboxed within ceilings."""


def _parse_args(pairs: tuple[str, ...]) -> dict[str, str]:
    parsed: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise KirocrewError(f"--arg takes KEY=VALUE, not {pair!r}", code="invalid_arguments", exit_code=2)
        parsed[key] = value
    return parsed


@workflow.command(name="run")
@click.argument("target")
@click.option("--arg", "pairs", multiple=True, metavar="KEY=VALUE", help="An argument the script reads in ctx.args.")
@click.option("--budget", type=click.IntRange(1, 1000), help="The most agent calls the run may make (default 1000).")
@click.option("--cwd", type=click.Path(file_okay=False), help="Where its agents work (default: this directory).")
@click.option("--wait", "wait_", is_flag=True, help="Follow the run to its end; exit 0 only when it finished.")
def run(target: str, pairs: tuple[str, ...], budget: int | None, cwd: str | None, wait_: bool) -> None:
    """Run TARGET, a workflow file or a saved workflow's name; prints its run id."""
    arguments: dict[str, Any] = {"args": _parse_args(pairs), "cwd": os.path.abspath(cwd or os.getcwd())}
    if Path(target).is_file():
        arguments["source"] = _read(Path(target))
    else:
        arguments["workflow"] = target
    if budget is not None:
        arguments["budget_total"] = budget
    started = call_core("workflow_run", arguments)
    match = _STARTED.search(started)
    if match is None:  # our own tool's wording changed: a bug, not the user's
        raise KirocrewError(f"unexpected workflow_run result: {started[:200]}", code="internal_error")
    _follow(match.group(1), wait_)


def _follow(run_id: str, wait_: bool) -> None:
    """Print the run's id; with ``wait_``, its result once it ended (exit 1 unless it finished)."""
    click.echo(run_id)
    if not wait_:
        return
    while True:
        record = json.loads(call_core("workflow_show", {"run_id": run_id, "events": 0}))
        if record["status"] in _TERMINAL:
            break
        time.sleep(_WAIT_POLL_SECS)
    click.echo(json.dumps(record.get("result"), ensure_ascii=False))
    if record["status"] != "finished":
        where = f" (where: {record['where']})" if record.get("where") else ""
        click.echo(f"kirocrew: workflow run {run_id} ended {record['status']}{where}: {record.get('reason') or ''}",
                   err=True)
        click.get_current_context().exit(1)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise KirocrewError(f"cannot read {path}: {type(exc).__name__}", code="unreadable_file", exit_code=2) from None


@workflow.command(name="save")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("name")
@click.option("--replace", is_flag=True, help="Overwrite a workflow already saved under NAME.")
def save(file: Path, name: str, replace: bool) -> None:
    """Save the workflow in FILE as NAME (the owner only; twin of workflow_save)."""
    click.echo(call_core("workflow_save", {"name": name, "source": _read(file), "replace": replace}))


@workflow.command(name="author")
@click.argument("intent")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the script to this new file (never over an existing one).")
@click.option("--cwd", type=click.Path(file_okay=False), help="Where the author works (default: this directory).")
def author(intent: str, output: Path | None, cwd: str | None) -> None:
    """Have a Kiro sub-agent write a workflow for INTENT (twin of workflow_author): printed, kept, not run."""
    if output is not None and output.exists():
        raise KirocrewError(f"{output} exists; name a new file", code="file_exists", exit_code=2)
    text = call_core("workflow_author", {"intent": intent, "cwd": os.path.abspath(cwd or os.getcwd())})
    click.echo(text)
    if output is not None:
        script = text.split("```python\n", 1)[1].rsplit("```", 1)[0]
        with output.open("x", encoding="utf-8") as handle:  # "x": a file that appeared meanwhile is kept
            handle.write(script)


@workflow.command(name="rerun")
@click.argument("run_id")
@click.option("--from", "from_index", type=click.IntRange(0, 1000000), default=0, show_default=True,
              help="Agent calls before this index replay their recorded results.")
@click.option("--wait", "wait_", is_flag=True, help="Follow the new run to its end; exit 0 only when it finished.")
def rerun(run_id: str, from_index: int, wait_: bool) -> None:
    """Run RUN_ID's workflow again as a new run (twin of workflow_rerun_subtree); prints the new run's id."""
    started = call_core("workflow_rerun_subtree", {"run_id": run_id, "from_index": from_index})
    match = re.search(r" as `(wf_[0-9a-f]+)`", started)
    if match is None:
        raise KirocrewError(f"unexpected workflow_rerun_subtree result: {started[:200]}", code="internal_error")
    _follow(match.group(1), wait_)


@workflow.command(name="list")
def list_runs() -> None:
    """Workflow runs, newest first (yours only, inside a crew session)."""
    click.echo(call_core("workflow_list", {}))


@workflow.command(name="show")
@click.argument("run_id")
@click.option("--events", type=click.IntRange(0, 10000), default=50, show_default=True,
              help="How many of the latest events to include.")
def show(run_id: str, events: int) -> None:
    """One run as JSON: status, where and why it failed, its result and its latest events."""
    click.echo(call_core("workflow_show", {"run_id": run_id, "events": events}))


@workflow.command(name="cancel")
@click.argument("run_id")
def cancel(run_id: str) -> None:
    """Cancel a running workflow run."""
    click.echo(call_core("workflow_cancel", {"run_id": run_id}))
