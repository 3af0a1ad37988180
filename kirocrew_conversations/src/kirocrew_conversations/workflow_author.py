"""``workflow_author``: a Kiro session writes a workflow script for the owner to review; it is kept, never run.

The script comes from a sub-agent of the caller (the person's has no parent) given the form a workflow
takes and the caller's intent. Its reply's last fenced Python block (or the whole reply, when it is
bare code) must pass the static check; a reply without one, or one the check refuses, fails with
``where: author``. The script is kept as a draft, ``<crew home>/state/workflows/drafts/<id>.py``
(0600), and returned: running it takes a ``workflow_run`` of its source, saving it ``workflow_save``,
both the owner's or the session's own decision after reading it.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path

from kirocrew_core.errors import KirocrewError

INTENT_MAX = 5000
_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.S)

INSTRUCTIONS = """Write a kirocrew workflow for the intent below. Reply with the whole script in one fenced
python block. A workflow is one Python module with a literal META dict (name, description, optionally wall_secs) and
async def workflow(ctx). It may not import anything, nor use eval, exec, open, getattr, type, dunders or
attributes starting with an underscore. ctx offers: await ctx.agent(prompt, label=..., phase=..., schema=...)
which runs a sub-agent and returns its text, its JSON (validated against schema) or None when it failed;
await ctx.parallel([...]) (a barrier); await ctx.pipeline(items, stage, ...); ctx.log(message);
await ctx.sleep(seconds); await ctx.nudge(message, idle_secs=..., max_cycles=...) which re-prompts the session that
started the run whenever it idles; ctx.args (a dict). ctx has no other ports (no ctx.approve, ctx.memory, ctx.cron,
ctx.send_message...). Return the result as plain data.

Intent:
"""


def prompt(intent: str) -> str:
    return INSTRUCTIONS + intent.strip()


def extract(reply: str) -> str:
    """The script in ``reply`` (its last fenced block, else the reply itself), checked; ``WorkflowRejected``
    with ``where = "author"`` when there is none or it fails the check."""
    from kirocrew_conversations.workflow_check import WorkflowRejected, check_source

    blocks = _FENCE.findall(reply)
    source = blocks[-1] if blocks else reply
    try:
        check_source(source)
    except WorkflowRejected as exc:
        exc.where = "author"
        raise
    return source


def drafts_dir() -> Path:
    from kirocrew_core import home

    return home.state_dir("workflows") / "drafts"


def keep(source: str, directory: Path | None = None) -> str:
    """Keep ``source`` as a new draft (0600); its id."""
    from kirocrew_core.jsonfile import write_bytes_atomic

    draft_id = f"draft_{secrets.token_hex(6)}"
    folder = directory or drafts_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_bytes_atomic(folder / f"{draft_id}.py", source.encode("utf-8"), secret=True)
    return draft_id


def no_reply(status: str) -> KirocrewError:
    return KirocrewError(f"the authoring session produced no script (where: author): its run ended {status}",
                         code="workflow_author_failed")
