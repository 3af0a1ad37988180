"""The Linux authority backend: kiro-cli (and everything it starts) inside bubblewrap.

The sandbox is a read-only view of the host with a private ``/tmp`` (tmpfs),
kiro-cli's own directories writable, the workspace writable only in
``workspace_write``, Kiro's agent/steering/skill roots and credentials bound
read-only on top, and kirocrew's home hidden. Network is kept.

``--unshare-user`` AND ``--cap-drop ALL`` are both required: run as root
without them, the child can ``mount -o remount,rw /`` and write the host
(verified). ``--disable-userns`` stops a nested user namespace; ``--new-session``
stops TIOCSTI injection into our terminal; ``--die-with-parent`` and a private
pid namespace take every sandboxed process down with kiro-cli.

Nothing here ever falls back: a missing or broken bwrap makes the authority
unavailable (``authority_unavailable`` with bwrap's own error text).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kirocrew_core import home, proc
from kirocrew_core.errors import KirocrewError
from kirocrew_core.kiro import require_kiro_cli

from kirocrew_conversations.authority import pretrusted
from kirocrew_conversations.errors import conversation_error
from kirocrew_conversations.redact import redact_text
from kirocrew_conversations.sandbox.common import failure_text, restricted_backends
from kirocrew_conversations.sandbox.policy import SandboxPolicy, build_policy, prepare
from kirocrew_conversations.vocabulary import READ_ONLY

if TYPE_CHECKING:
    from kirocrew_core.acp_runtime import AcpOptions
    from kirocrew_core.contributions import AuthorityBackend

PRIVATE_TMP = "/tmp"
PREFLIGHT_TIMEOUT_SECS = 20.0
ISOLATION_FLAGS = (
    "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
    "--unshare-pid", "--unshare-ipc", "--unshare-uts",
    "--die-with-parent", "--new-session",
)


def _under(path: Path, root: str) -> bool:
    return path == Path(root) or Path(root) in path.parents


def bwrap_args(policy: SandboxPolicy, *, visible: Sequence[Path] = ()) -> list[str]:
    """bwrap's options for ``policy`` (everything before ``--``); bind order is significant.

    ``visible`` are host paths the run must still see read-only although they live under ``/tmp``
    (the private tmpfs hides the host's ``/tmp``): the kiro-cli binary's directory, say.
    """
    args = [*ISOLATION_FLAGS, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", PRIVATE_TMP]
    # Host paths under /tmp that must stay reachable, read-only, parents before children.
    again = {p for p in (home.user_home(), policy.workspace, *visible) if _under(p, PRIVATE_TMP) and p.exists()}
    for path in sorted(again, key=lambda p: len(p.parts)):
        args += ["--ro-bind", str(path), str(path)]
    for path in policy.writable:
        if path.exists():
            args += ["--bind", str(path), str(path)]
    for path in policy.read_only:  # after the writable binds: these re-protect paths inside them
        if path.exists():
            args += ["--ro-bind", str(path), str(path)]
    for path in policy.hidden:
        if path.is_dir():
            args += ["--tmpfs", str(path), "--remount-ro", str(path)]
    args += ["--setenv", "TMPDIR", PRIVATE_TMP, "--chdir", str(policy.workspace)]
    return args


def launcher(bwrap: str, policy: SandboxPolicy, *, visible: Sequence[Path] = ()) -> tuple[str, ...]:
    """The argv prefix that runs a command inside the sandbox."""
    return (bwrap, *bwrap_args(policy, visible=visible), "--")


class BwrapBackend:
    """Serves ``read_only`` and ``workspace_write``; preflighted once per process at first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._verdict: tuple[str | None, tuple[bool, str]] | None = None  # (bwrap path, verdict)

    def available(self) -> tuple[bool, str]:
        """bwrap is installed, a sandboxed no-op runs, and a write outside the allowed roots fails."""
        path = shutil.which("bwrap")
        with self._lock:
            if self._verdict is None or self._verdict[0] != path:
                self._verdict = (path, self._preflight(path))
            return self._verdict[1]

    @staticmethod
    def _run(argv: list[str]) -> subprocess.CompletedProcess[bytes]:
        return proc.run(argv, env=dict(os.environ), timeout=PREFLIGHT_TIMEOUT_SECS, reason="bwrap preflight")

    def _preflight(self, bwrap: str | None) -> tuple[bool, str]:
        if bwrap is None:
            return False, "bubblewrap (bwrap) is not installed or not on PATH"
        with tempfile.TemporaryDirectory(prefix="kirocrew-preflight-") as scratch:
            workspace = Path(scratch) / "workspace"
            workspace.mkdir()
            # Modes set explicitly: the umask is process-wide, and the host narrows it for a moment
            # while it binds its socket, maybe while this preflight runs in a worker thread.
            os.chmod(scratch, 0o700)
            os.chmod(workspace, 0o700)
            policy = build_policy(READ_ONLY, workspace)
            prefix = launcher(bwrap, policy)
            outside = home.user_home() / f".kirocrew-sandbox-probe-{os.getpid()}"
            probe = (f'touch "{workspace}/probe" 2>/dev/null && exit 11; '
                     f'touch "{outside}" 2>/dev/null && exit 12; '
                     'mount -o remount,rw / 2>/dev/null && exit 13; '
                     f'touch "{PRIVATE_TMP}/probe" || exit 14; exit 0')
            try:
                noop = self._run([*prefix, "true"])
                if noop.returncode != 0:
                    return False, failure_text("a sandboxed no-op failed", noop)
                confined = self._run([*prefix, "/bin/sh", "-c", probe])
            except (KirocrewError, subprocess.TimeoutExpired) as exc:  # spawn failure, timeout
                return False, redact_text(f"bubblewrap did not run: {type(exc).__name__}: {exc}")
            finally:
                if outside.exists():
                    outside.unlink()
        if confined.returncode != 0:
            what = {11: "the read-only workspace was writable", 12: "a write outside the allowed roots succeeded",
                    13: "the root could be remounted read-write", 14: "the private tmp was not writable"}
            return False, what.get(confined.returncode, failure_text("the confinement self-test failed", confined))
        return True, ""

    def factory(self, options: AcpOptions, *, workspace: str, mode: str) -> AcpOptions:
        """``options`` wrapped in the sandbox for ``mode``; ``authority_unavailable`` if it cannot be set up."""
        ok, reason = self.available()
        bwrap = shutil.which("bwrap")
        if not ok or bwrap is None:
            raise conversation_error("authority_unavailable", f"authority {mode} is unavailable: {reason}")
        policy = build_policy(mode, workspace)
        prepare(policy)
        binary = Path(require_kiro_cli(options.binary))
        return dataclasses.replace(options, launcher=launcher(bwrap, policy, visible=installation(binary)),
                                   trust_all_tools=False, trust_tools=pretrusted(policy.pretrusted_tools, mode))


def installation(binary: Path) -> list[Path]:
    """Where kiro-cli's files may live, for re-exposing under the private ``/tmp``.

    An installation under ``/tmp`` (a checkout, a virtualenv with editable sources) spreads below its
    first-level directory there, so that directory is re-exposed, read-only, as a whole.
    """
    found = []
    for path in {binary, Path(os.path.realpath(binary))}:
        if _under(path, PRIVATE_TMP) and len(path.parts) > 2:
            found.append(Path(PRIVATE_TMP) / path.parts[2])
        else:
            found.append(path.parent)
    return found


BACKEND = BwrapBackend()


def authority_backends() -> list[AuthorityBackend]:
    """``read_only`` and ``workspace_write`` on Linux, both served by one preflighted bwrap backend."""
    descriptions = {
        "read_only": "bubblewrap sandbox: read-only host and workspace, private /tmp, kiro's own dirs writable, "
                     "network kept; reads pretrusted, other tools ask.",
        "workspace_write": "bubblewrap sandbox: as read_only, plus the workspace writable (its .git hooks and "
                           "config stay read-only).",
    }
    return restricted_backends(BACKEND, descriptions, ("linux",))
