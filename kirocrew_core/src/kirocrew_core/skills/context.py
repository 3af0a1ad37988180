"""``kirocrew skills context``: what the rendered agent's ``agentSpawn`` hook prints about skills.

Every kirocrew session is told, at its start, the full text of each ``always`` skill and one line
for every other skill in its workspace's scope, so it knows to call ``skill_search``. Skills in
kiro-cli's own folders are left out: kiro-cli lists those to the session itself. It runs at every
session start without click or the plugins, and it never fails (``kirocrew skills list`` reports
broken skills).
"""

from __future__ import annotations

import os
import sys

#: The always-skills' bodies together are cut beyond this many characters (a context budget).
ALWAYS_MAX_CHARS = 60_000


def context_text(workspace: str | None) -> str:
    """The skills block for ``workspace``; empty when no skill outside kiro-cli's folders is in scope."""
    from kirocrew_core.redaction import redact_secrets
    from kirocrew_core.skills.discovery import catalog, summary

    skills = [s for s in catalog(workspace).skills if s.source.kind != "kiro"]
    if not skills:
        return ""
    always = [s for s in skills if s.always]
    others = [s for s in skills if not s.always]
    blocks = []
    budget = ALWAYS_MAX_CHARS
    for skill in always:
        body = skill.body.strip()
        if len(body) > budget:
            body = body[:max(budget, 0)] + "\n…[cut: read the rest with skill_search action=read]"
        budget -= len(body)
        blocks.append(f"## Skill: {skill.name} (always)\n{body}")
    if others:
        blocks.append("## Skills available (read one with skill_search action=read key=KEY)\n"
                      + "\n".join(f"- {summary(s)}" for s in others))
    return redact_secrets("# Agent Skills\n\n" + "\n\n".join(blocks) + "\n")


def project_root(directory: str) -> str:
    """The nearest folder from ``directory`` up that holds ``.kirocrew/skills``; else ``directory`` itself.

    A session may start in a subfolder of its project; its project skills still count.
    """
    current = os.path.abspath(directory)
    while True:
        if os.path.isdir(os.path.join(current, ".kirocrew", "skills")):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return os.path.abspath(directory)
        current = parent


def print_context() -> None:
    """Print the skills block for the hook event's directory (else the current one); never raise."""
    from kirocrew_core.hook_event import event_cwd

    directory = event_cwd() or os.getcwd()
    try:
        text = context_text(project_root(directory))
    except Exception:  # noqa: BLE001 - a session must start even with an unreadable config or source
        text = ""
    sys.stdout.write(text)
    sys.stdout.flush()
