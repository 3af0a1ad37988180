"""``kirocrew learn …``: the owner's twin of the ``learn_*`` tools, on the same store.

The owner is the authority ``governance.memory_writes`` protects, so these commands are
not gated by it; they may also see and remove every workspace's lessons. ``kirocrew learn
context`` is what the rendered agent's ``agentSpawn`` hook runs (see
:mod:`kirocrew_core.lessons.store`). Registered lazily by :mod:`kirocrew_core.builtin.lessons`.
"""

from __future__ import annotations

import json
import os

import click

from kirocrew_core.lessons import store

@click.group()
def learn() -> None:
    """Durable lessons every later kirocrew session is told (global or per workspace)."""


@learn.command("add")
@click.argument("rule")
@click.option("--category", type=click.Choice(store.CATEGORIES), default=store.DEFAULT_CATEGORY, show_default=True)
@click.option("--negative", default="", help="What NOT to do (the mistake this lesson prevents).")
@click.option("--scope", type=click.Choice(store.SCOPES), default="global", show_default=True)
@click.option("--workspace", default=None,
              help="For --scope workspace: the workspace (default: the current directory).")
def add(rule: str, category: str, negative: str, scope: str, workspace: str | None) -> None:
    """Keep RULE for later sessions."""
    if scope == "workspace" and not workspace:
        workspace = os.getcwd()
    elif workspace and not os.path.isabs(workspace):
        workspace = os.path.abspath(workspace)
    new = store.validate_new(rule, category=category, negative=negative, scope=scope, workspace=workspace)
    lesson, created = store.add(new, author=store.OWNER)
    where = f"workspace {lesson.workspace}" if lesson.workspace else "global"
    verb = "Saved" if created else "Already saved"
    click.echo(f"{verb} lesson {lesson.id} ({where}): {lesson.rule}")


@learn.command("list")
@click.option("--workspace", default=None, help="Only what a session in this workspace is told.")
@click.option("--json", "as_json", is_flag=True, help="Print the lessons as JSON.")
def list_(workspace: str | None, as_json: bool) -> None:
    """List the lessons (all of them, or what a session in --workspace sees); a session's says which saved it."""
    lessons = store.all_lessons()
    if workspace is not None:
        lessons = store.visible(lessons, os.path.abspath(workspace))
    if as_json:
        click.echo(json.dumps([lesson.as_dict() for lesson in lessons], indent=2))
        return
    if not lessons:
        click.echo("No lessons saved.")
        return
    for lesson in lessons:
        where = f"  (workspace {lesson.workspace})" if lesson.workspace else ""
        who = "" if lesson.by_owner else f"  (saved by {lesson.author or 'a session'})"
        click.echo(f"{lesson.id}  {lesson.line()}{where}{who}")


@learn.command("remove")
@click.argument("query")
def remove(query: str) -> None:
    """Remove the lessons whose id is QUERY or whose rule contains it (case-insensitive)."""
    gone = store.remove(query, author=store.OWNER)
    if not gone:
        click.echo(f"No lessons matched: {query}")
        return
    click.echo(f"Removed {len(gone)} lesson{'s' if len(gone) != 1 else ''} matching: {query}")
    for lesson in gone:
        click.echo(f"  {lesson.id}  {lesson.line()}")


@learn.command("context", hidden=True)
def context() -> None:
    """Print the workspace lessons for the session starting here (the agent's agentSpawn hook).

    kiro-cli runs the hook in the session's working directory and writes the hook event
    (``{"hook_event_name": "agentSpawn", "cwd": …}``) to its stdin; its ``cwd`` wins when
    present. Never fails: a session must start even when the store is broken.
    """
    from kirocrew_core.lessons.context import print_context

    print_context()
