"""What a session knows before its first prompt: the agent's ``resources`` and ``agentSpawn`` hooks.

As kiro-cli 2.x does at session start: every ``file://`` resource is read (an absolute
path, or a glob relative to the session's cwd such as ``file://.kiro/steering/**/*.md``;
a missing file is skipped), and every ``hooks.agentSpawn`` command runs with ``sh -c`` in
the session's cwd, the hook event ``{"hook_event_name": "agentSpawn", "cwd": …}`` on its
stdin, within :data:`HOOK_TIMEOUT_SECS`; what it prints on stdout (exit 0) is added to the
context. The ``!context`` directive shows the result, so a test can prove what a later
session was told.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from kirocrew_testing.fake_kiro.agents_dirs import AgentSpec

#: kiro-cli's default hook timeout (``timeout_ms`` 30000).
HOOK_TIMEOUT_SECS = 30.0
#: Per resource and per hook: the context is for a test to read, not for megabytes.
OUTPUT_LIMIT = 64 * 1024


def _resource_files(uri: str, cwd: Path) -> list[Path]:
    if not uri.startswith("file://"):
        return []  # skill:// and knowledge bases are kiro's, not files
    target = uri[len("file://"):]
    if os.path.isabs(target):
        return [Path(target)]
    return sorted(p for p in cwd.glob(target) if p.is_file())


def _read(path: Path) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(OUTPUT_LIMIT).decode("utf-8", "replace")
    except OSError:
        return None


async def _run_hook(command: str, cwd: Path) -> str:
    from kirocrew_core import proc

    event = json.dumps({"hook_event_name": "agentSpawn", "cwd": str(cwd)}).encode()
    child = await proc.spawn_async(["sh", "-c", command], env=dict(os.environ), cwd=cwd, stdin=proc.PIPE)
    try:
        out, _ = await asyncio.wait_for(child.communicate(event), HOOK_TIMEOUT_SECS)
    except asyncio.TimeoutError:
        await proc.terminate_async(child, reason="agentSpawn hook timeout")
        return ""
    except BaseException:
        await proc.terminate_async(child, reason="session start cancelled")
        raise
    return out.decode("utf-8", "replace")[:OUTPUT_LIMIT] if child.returncode == 0 else ""


async def session_context(agent: AgentSpec, cwd: Path) -> str:
    """The resources' text, then each agentSpawn hook's output, as one block."""
    parts: list[str] = []
    for uri in agent.resources:
        for path in _resource_files(uri, cwd):
            text = await asyncio.to_thread(_read, path)
            if text:
                parts.append(text.rstrip("\n"))
    for command in agent.spawn_hooks:
        text = await _run_hook(command, cwd)
        if text.strip():
            parts.append(text.rstrip("\n"))
    return "\n".join(parts)
