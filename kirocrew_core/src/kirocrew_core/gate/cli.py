"""``kirocrew policy …``: list, add, remove and check the permission policy's rules.

The owner's twin of the Policy page, on the same file (:mod:`.policy_file`). ``check`` asks
the policy what it would decide for a call, exactly as the gate would for a session, and
exits 0 for allow, 1 for deny and 3 for ask, so a script can branch on it. Registered lazily
by :mod:`kirocrew_core.builtin.policy`.
"""

from __future__ import annotations

import json
import os
from typing import Any

import click

from kirocrew_core.gate.rules import DECISIONS

EXIT_CODES = {"allow": 0, "deny": 1, "ask": 3}


@click.group()
def policy() -> None:
    """The permission policy: what crew sessions may run without asking (allow, ask, deny)."""


def _warn_problems(problems: list[str]) -> None:
    for problem in problems:
        click.echo(f"kirocrew: warning: {problem}", err=True)


def ordered_rules(workspace: str | None = None) -> tuple[list[Any], list[str]]:
    """Every rule in precedence order (built-in, owner, project, defaults) and the policy's problems."""
    from kirocrew_core.gate.policy_file import current_policy, project_rules

    current = current_policy()
    project: list[Any] = []
    project_defaults: dict[str, Any] = {}
    problems = list(current.problems)
    if workspace:
        project, project_defaults, project_problems = project_rules(workspace)
        problems += project_problems
    return [*current.rules(project), *current.default_rules(project_defaults)], problems


@policy.command("list")
@click.option("--workspace", default=None, help="Also the rules a project file in this workspace adds.")
@click.option("--json", "as_json", is_flag=True, help="Print the rules as JSON.")
def list_(workspace: str | None, as_json: bool) -> None:
    """List the rules in order of precedence: built-in, yours, the project's, then the defaults."""
    rules, problems = ordered_rules(os.path.abspath(workspace) if workspace else None)
    _warn_problems(problems)
    if as_json:
        click.echo(json.dumps({"rules": [r.as_dict() for r in rules], "problems": problems}, indent=2))
        return
    for rule in rules:
        reason = f"  — {rule.reason}" if rule.reason else ""
        click.echo(f"{rule.id:28} {rule.tier:8} {rule.describe()}{reason}")


@policy.command("add")
@click.option("--decision", type=click.Choice(DECISIONS), required=True)
@click.option("--tool", "tool", required=True, metavar="PATTERN",
              help="A built-in tool (shell, write, read, web_fetch…), @server, @server/tool, @builtin or *.")
@click.option("--command", "commands", multiple=True, metavar="PREFIX",
              help="A shell command prefix, word by word (repeatable).")
@click.option("--path", "paths", multiple=True, metavar="GLOB", help="A path glob for file tools (repeatable).")
@click.option("--domain", "domains", multiple=True, metavar="NAME", help="A fetch domain (repeatable).")
@click.option("--authority", default=None, help="Only sessions under this authority.")
@click.option("--agent", default=None, help="Only sessions on this agent (a glob).")
@click.option("--workspace", default=None, help="Only sessions in this directory or below it.")
@click.option("--reason", default=None, help="What the model and you are told when the rule decides.")
@click.option("--json", "as_json", is_flag=True, help="Print the new rule as JSON.")
def add(decision: str, tool: str, commands: tuple[str, ...], paths: tuple[str, ...], domains: tuple[str, ...],
        authority: str | None, agent: str | None, workspace: str | None, reason: str | None, as_json: bool) -> None:
    """Add a rule to your policy file and print its id."""
    from kirocrew_core.gate.policy_file import add_rule

    rule = add_rule({"decision": decision, "tool": tool, "command": list(commands), "path": list(paths),
                     "domain": list(domains), "authority": authority, "agent": agent,
                     "workspace": os.path.abspath(os.path.expanduser(workspace)) if workspace else None,
                     "reason": reason})
    click.echo(json.dumps(rule.as_dict(), indent=2) if as_json else rule.id)


@policy.command("remove")
@click.argument("rule_id")
def remove(rule_id: str) -> None:
    """Remove your rule RULE_ID (built-in rules and defaults cannot be removed)."""
    from kirocrew_core.gate.policy_file import remove_rule

    rule = remove_rule(rule_id)
    click.echo(f"Removed {rule.id}: {rule.describe()}")


@policy.command("check")
@click.option("--tool", "tool", required=True, metavar="NAME",
              help="The tool: a built-in name (shell, write…) or @server/tool for an MCP tool.")
@click.option("--input", "raw_input", default="{}", metavar="JSON", help="The call's input, as kiro sends it.")
@click.option("--authority", default="unrestricted", show_default=True)
@click.option("--agent", default="kirocrew", show_default=True)
@click.option("--workspace", default=None, help="The session's workspace (default: the current directory).")
def check(tool: str, raw_input: str, authority: str, agent: str, workspace: str | None) -> None:
    """Print what the policy decides for one call, as JSON; exit 0 allow, 1 deny, 3 ask."""
    from kirocrew_core import home
    from kirocrew_core.errors import BadInputError
    from kirocrew_core.gate.answer import decide_call
    from kirocrew_core.gate.calls import Context, ToolCall
    from kirocrew_core.gate.policy_file import current_policy, project_rules

    try:
        call_input = json.loads(raw_input)
    except ValueError as exc:
        raise BadInputError(f"--input is not JSON: {exc}", code="bad_json") from None
    call = ToolCall.from_ref(tool, call_input)
    where = os.path.abspath(os.path.expanduser(workspace or os.getcwd()))
    _, _, problems = project_rules(where)
    _warn_problems([*current_policy().problems, *problems])
    verdict = decide_call(call, Context(authority, agent, where, str(home.user_home())))
    click.echo(json.dumps(verdict.as_dict(), indent=2))
    click.get_current_context().exit(EXIT_CODES[verdict.decision])

