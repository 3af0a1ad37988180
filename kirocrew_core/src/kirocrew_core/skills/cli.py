"""``kirocrew skills …``: the owner's view of the skills sessions can read, and the owner's install.

``list``/``show``/``search`` answer what ``skill_search`` answers for the given workspace (default:
the current directory); ``install`` fetches a registry skill, shows every file, and writes it into
the crew skills folder only after the owner confirms. Registered lazily by
:mod:`kirocrew_core.builtin.skills`.
"""

from __future__ import annotations

import json
import os

import click


def _workspace(workspace: str | None) -> str:
    return os.path.abspath(workspace or os.getcwd())


@click.group()
def skills() -> None:
    """Agent Skills (folders with a SKILL.md) kirocrew sessions can find and read."""


@skills.command("list")
@click.option("--workspace", default=None, help="The workspace whose project skills count (default: here).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: skills and problems.")
def list_(workspace: str | None, as_json: bool) -> None:
    """Every skill in scope, by precedence, and the broken or skipped ones with why."""
    from kirocrew_core.skills.discovery import catalog

    found = catalog(_workspace(workspace))
    if as_json:
        click.echo(json.dumps({
            "skills": [{"key": s.key, "name": s.name, "description": s.description, "always": s.always,
                        "source": s.source.kind, "path": str(s.path)} for s in found.skills],
            "problems": [{"key": p.key, "state": p.state, "reason": p.reason, "source": p.source.kind,
                          "root": str(p.source.root)} for p in found.problems],
        }, indent=2))
        return
    if not found.skills and not found.problems:
        click.echo("No skills found.")
    for skill in found.skills:
        mode = "always" if skill.always else "summary"
        click.echo(f"{skill.key}\t{skill.source.kind}\t{mode}\t{skill.description}")
    for problem in found.problems:
        click.echo(f"{problem.key}\t{problem.source.kind}\t{problem.state}\t{problem.reason}")


def _answer(args: dict[str, object], workspace: str | None) -> None:
    from kirocrew_core.skills.tools import answer

    click.echo(answer(args, _workspace(workspace)))


@skills.command("show")
@click.argument("key")
@click.option("--workspace", default=None, help="The workspace whose project skills count (default: here).")
@click.option("--offset", type=click.IntRange(min=0), default=0, help="First line to show.")
@click.option("--lines", type=click.IntRange(1, 50), default=50, help="How many lines.")
def show(key: str, workspace: str | None, offset: int, lines: int) -> None:
    """Read the skill KEY as a session would (skill_search action=read)."""
    _answer({"action": "read", "key": key, "offset": offset, "limit": lines}, workspace)


@skills.command("search")
@click.argument("query")
@click.option("--workspace", default=None, help="The workspace whose project skills count (default: here).")
def search(query: str, workspace: str | None) -> None:
    """Find skills whose name or description (else body) holds QUERY's words."""
    _answer({"action": "search", "query": query}, workspace)


@skills.command("install")
@click.argument("skill_id", metavar="ID")
@click.option("--yes", is_flag=True, help="Install without asking (the files are still shown).")
def install(skill_id: str, yes: bool) -> None:
    """Fetch the registry skill ID (owner/repo/skill), show its files, and install it for every session."""
    from kirocrew_core.skills import install as install_
    from kirocrew_core.skills import registry

    files = registry.fetch(skill_id)
    install_.check(skill_id, files)
    click.echo(install_.preview(skill_id, files))
    if not yes and not click.confirm("Install this skill?", default=False):
        click.echo("Not installed.")
        return
    path = install_.install(skill_id, files)
    click.echo(f"Installed skill {skill_id} as {path}")


@skills.command("context", hidden=True)
def context() -> None:
    """What the rendered agent's agentSpawn hook prints (the launcher runs it without click)."""
    from kirocrew_core.skills.context import print_context

    print_context()
