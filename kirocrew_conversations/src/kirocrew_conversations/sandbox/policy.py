"""What a restricted run may touch, independent of the mechanism that enforces it.

The spec's rule: a restricted run may write only its private temporary area,
kiro-cli's own settings/session/log/data/cache directories and — in
``workspace_write`` — the workspace. Credentials and Kiro's agent, steering and
skill roots stay readable but not writable. kirocrew's own home (the gateway
owner token, the audit key) is hidden: reading the owner token would let an
agent drive the dashboard API over loopback and undo the confinement.

Paths are resolved for the platform (``sys.platform``), so the macOS profile can
be generated and golden-tested anywhere.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from kirocrew_core import home

from kirocrew_conversations.vocabulary import SANDBOXED_AUTHORITIES, WORKSPACE_WRITE

# Tools kiro may use without asking under a restricted authority: reads only. Everything else
# (writes, shell, MCP tools) surfaces as needs_attention with one-shot decisions.
PRETRUSTED_TOOLS = ("read", "fs_read", "glob", "grep")

# Kiro's roots that configure the agent itself: writable roots would let a run rewrite its own rules.
PROTECTED_KIRO_ROOTS = ("agents", "steering", "skills")
# Credentials readable by design (kiro and the tools it runs need them) but never writable.
CREDENTIALS = (".aws", ".ssh", ".config/gh", ".docker", ".kube", ".gnupg", ".netrc", ".git-credentials")
# In a writable workspace, what would run code outside the sandbox later (a hook, a config alias).
PROTECTED_WORKSPACE = (".git/hooks", ".git/config")


@dataclass(frozen=True)
class SandboxPolicy:
    """Ordered path lists: ``writable`` first, then ``read_only`` re-protects paths inside them."""

    mode: str
    workspace: Path
    writable: tuple[Path, ...]
    read_only: tuple[Path, ...]
    hidden: tuple[Path, ...]
    pretrusted_tools: tuple[str, ...] = PRETRUSTED_TOOLS

    @property
    def workspace_writable(self) -> bool:
        return self.mode == WORKSPACE_WRITE


def agent_dirs(platform: str = sys.platform) -> tuple[Path, ...]:
    """kiro-cli's settings/session/log/data/cache directories on ``platform``."""
    user = home.user_home()
    dirs = [home.kiro_home()]
    if platform == "darwin":
        library = user / "Library"
        dirs += [library / "Application Support" / "kiro-cli", library / "Caches" / "kiro-cli",
                 library / "Logs" / "kiro-cli"]
    else:
        def xdg(variable: str, default: Path) -> Path:
            value = os.environ.get(variable, "")
            return Path(value) if value and os.path.isabs(value) else default

        dirs += [xdg("XDG_DATA_HOME", user / ".local" / "share") / "kiro-cli",
                 xdg("XDG_CACHE_HOME", user / ".cache") / "kiro-cli",
                 xdg("XDG_STATE_HOME", user / ".local" / "state") / "kiro-cli"]
    return tuple(dirs)


def build_policy(mode: str, workspace: str | os.PathLike[str], platform: str = sys.platform) -> SandboxPolicy:
    """The policy for one run of ``mode`` in ``workspace`` (absolute)."""
    if mode not in SANDBOXED_AUTHORITIES:
        raise ValueError(f"not a restricted authority: {mode!r}")
    ws = Path(os.path.realpath(workspace))
    kiro = home.kiro_home()
    writable = list(agent_dirs(platform))
    read_only = [kiro / name for name in PROTECTED_KIRO_ROOTS]
    read_only += [home.user_home() / name for name in CREDENTIALS]
    if mode == WORKSPACE_WRITE:
        writable.append(ws)
        read_only += [ws / name for name in PROTECTED_WORKSPACE]
    return SandboxPolicy(mode=mode, workspace=ws, writable=tuple(writable), read_only=tuple(read_only),
                         hidden=(home.crew_home(),))


def prepare(policy: SandboxPolicy) -> None:
    """Create the agent's writable dirs and the protected Kiro roots if missing (owner-only).

    A missing protected root could otherwise be created, and filled, inside the writable Kiro home;
    a missing writable dir could not be created at all under the read-only root.
    """
    for path in (*policy.writable, *(p for p in policy.read_only if p.parent == home.kiro_home())):
        if path != policy.workspace:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
