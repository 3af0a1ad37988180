"""The macOS authority backend: kiro-cli (and everything it starts) under a Seatbelt profile.

``sandbox-exec -p PROFILE -D TMPDIR=... kiro-cli acp ...`` confines kiro-cli and every
process it spawns to the same :class:`~kirocrew_conversations.sandbox.policy.SandboxPolicy`
the Linux backend enforces with bind mounts: everything readable except the hidden paths,
writes only to the run's temporary area, kiro-cli's own directories and (``workspace_write``)
the workspace, with Kiro's agent roots, credentials and the workspace's git hooks/config
re-protected inside them. Network and process creation stay allowed.

Seatbelt is path-based and applies the last matching rule between an allow and a deny, so
the profile is ordered: allow by default, deny every write and hard link, allow the writable
roots, then deny the protected paths *after* those allows. Path rules alone leave three gaps
that bind mounts close by construction, and the profile closes them explicitly:

- a hard link puts a protected inode under a writable path (``file-link`` is denied unless
  its source is in a writable root, and never out of a protected path);
- renaming an ancestor of a protected path inside a writable root carries the path out from
  under its rules (those ancestors are pinned: no ``file-write-unlink``);
- another process can write or run code on the run's behalf: mounts, LaunchServices, Apple
  events, launchd jobs, the preferences daemon (each denied by its own operation).

The per-run temporary area is the profile parameter ``TMPDIR`` rather than rendered text, so
one policy always renders to the same profile. Nothing here ever falls back: a missing or
broken ``sandbox-exec`` makes the authority unavailable (``authority_unavailable``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import os
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kirocrew_core import proc

from kirocrew_conversations.authority import pretrusted
from kirocrew_conversations.errors import conversation_error
from kirocrew_conversations.redact import redact_text
from kirocrew_conversations.sandbox.common import failure_text, restricted_backends
from kirocrew_conversations.sandbox.policy import SandboxPolicy, build_policy, prepare
from kirocrew_conversations.vocabulary import READ_ONLY

if TYPE_CHECKING:
    from kirocrew_core.acp_runtime import AcpOptions
    from kirocrew_core.contributions import AuthorityBackend

SANDBOX_EXEC = "/usr/bin/sandbox-exec"
TMPDIR_PARAM = "TMPDIR"
PREFLIGHT_TIMEOUT_SECS = 20.0

# Device nodes ordinary programs write: the null device, their terminal, their own descriptors.
DEVICE_FILTERS = (
    '(literal "/dev/null")',
    '(literal "/dev/zero")',
    '(literal "/dev/tty")',
    '(literal "/dev/dtracehelper")',
    '(literal "/dev/ptmx")',
    '(regex #"^/dev/ttys[0-9]+$")',
    '(subpath "/dev/fd")',
)

# Operations through which another process writes or runs code for the sandboxed one, outside its rules.
WRITE_PROXIES = (
    ("file-mount", "file-unmount"),  # a mount over a protected path would replace it
    ("lsopen",),  # LaunchServices starts apps outside the sandbox
    ("appleevent-send",),  # scripting another app (Terminal's "do script") runs code outside it
    ("job-creation",),  # a launchd job runs outside it
    ("user-preference-write",),  # cfprefsd writes ~/Library/Preferences on the caller's behalf
)


# -- the profile ----------------------------------------------------------------------------


def sbpl_string(text: str) -> str:
    """``text`` as an SBPL string literal; a control character (NUL, newline, ...) is refused.

    The message never names the path: it can end up in a run's error, which must not carry
    absolute paths.
    """
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in text):
        raise ValueError("a sandbox path contains a control character (NUL, newline, ...); "
                         "Seatbelt profiles cannot express it")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _path(path: os.PathLike[str] | str) -> str:
    text = os.fspath(path)
    if not os.path.isabs(text):
        raise ValueError("a sandbox path must be absolute")
    return sbpl_string(text)


def _subpaths(paths: Iterable[Path]) -> list[str]:
    return [f"(subpath {_path(p)})" for p in paths]


def _exactly_and_below(paths: Iterable[Path]) -> list[str]:
    # Both filters, as the original did: a protected leaf may be a plain file (.netrc, .git/config).
    return [f for p in paths for f in (f"(literal {_path(p)})", f"(subpath {_path(p)})")]


def _rule(action: str, operations: str, filters: Sequence[str]) -> list[str]:
    """One rule; several filters in one rule match if any of them matches."""
    if not filters:
        return []
    if len(filters) == 1:
        return [f"({action} {operations} {filters[0]})"]
    return [f"({action} {operations}", *(f"  {f}" for f in filters[:-1]), f"  {filters[-1]})"]


def _unique(paths: Iterable[Path]) -> list[Path]:
    return list(dict.fromkeys(paths))


def rename_pins(policy: SandboxPolicy) -> list[Path]:
    """Ancestors of protected or hidden paths that lie in a writable root, outermost first.

    Renaming one (``~/.kiro`` into another writable root, say) would move the paths below it
    out from under their path-based denies, so the profile forbids unlinking them.
    """
    pins: list[Path] = []
    for protected in (*policy.read_only, *policy.hidden):
        for ancestor in reversed(protected.parents):
            if any(ancestor == root or root in ancestor.parents for root in policy.writable):
                pins.append(ancestor)
    return _unique(pins)


def render_profile(policy: SandboxPolicy) -> str:
    """The ``sandbox-exec`` profile enforcing ``policy``; the same policy always gives the same text.

    Paths are used as spelled: :func:`seatbelt_argv` resolves them first (Seatbelt matches
    resolved paths, ``/private/var/...`` not ``/var/...``). The run's temporary area is the
    ``TMPDIR`` parameter. Raises :class:`ValueError` for a relative path or one holding a
    control character.
    """
    writable = _subpaths(policy.writable)
    read_only = _exactly_and_below(_unique(policy.read_only))
    hidden = _exactly_and_below(_unique(policy.hidden))
    pins = [f"(literal {_path(p)})" for p in rename_pins(policy)]
    what = "kiro-cli's own directories and the workspace" if policy.workspace_writable \
        else "kiro-cli's own directories; the workspace stays read-only"
    lines = [
        "(version 1)",
        f"; kirocrew conversations, authority {policy.mode}: Seatbelt profile for sandbox-exec.",
        "; Generated from the sandbox policy. The run's temporary area is the TMPDIR parameter",
        "; (sandbox-exec -D TMPDIR=...). Seatbelt applies the last matching rule, so order matters:",
        "; every deny below an allow overrides it.",
        "",
        "(allow default)",
        "(allow network*)",
        "(allow process*)",
        "",
        "; Nothing is writable, and nothing can be hard-linked, unless allowed below.",
        "(deny file-write*)",
        "(deny file-link)",
        "",
        "; Device nodes programs write: the null device, their terminal, their own descriptors.",
        *_rule("allow", "file-write*", DEVICE_FILTERS),
        "",
        f"; Writable: the run's temporary area, {what}.",
        *_rule("allow", "file-write* file-link", [f'(subpath (param "{TMPDIR_PARAM}"))', *writable]),
        "",
        "; Read-only, also where a writable root contains them: Kiro's agent, steering and skill roots,",
        "; credentials, the workspace's git hooks and config. No hard link may alias them either.",
        *_rule("deny", "file-write* file-link", read_only),
        "",
        "; Hidden: neither readable nor writable (kirocrew's home: the gateway owner token, the audit key).",
        *_rule("deny", "file-read* file-write* file-link", hidden),
        "",
        "; Ancestors of those paths inside a writable root: renaming one would carry them out from under",
        "; the rules above.",
        *_rule("deny", "file-write-unlink", pins),
        "",
        "; Other processes that would write or run code on the run's behalf, outside these rules:",
        "; mounts, LaunchServices, Apple events, launchd jobs, the preferences daemon.",
        *(f"(deny {operation})" for group in WRITE_PROXIES for operation in group),
    ]
    return "\n".join(lines) + "\n"


def canonical_policy(policy: SandboxPolicy) -> SandboxPolicy:
    """``policy`` in the spelling Seatbelt matches: symlinks resolved (``/var`` → ``/private/var``).

    Protected and hidden paths keep their lexical spelling as well: a symlink itself is
    removed or replaced through that spelling (``rm ~/.kiro/agents`` where it is a link).
    """
    def real(path: Path) -> Path:
        return Path(os.path.realpath(path))

    def both(paths: Iterable[Path]) -> tuple[Path, ...]:
        return tuple(_unique(q for p in paths for q in (p, real(p))))

    return dataclasses.replace(policy, workspace=real(policy.workspace),
                               writable=tuple(_unique(real(p) for p in policy.writable)),
                               read_only=both(policy.read_only), hidden=both(policy.hidden))


def seatbelt_argv(policy: SandboxPolicy, tmpdir: os.PathLike[str] | str, *,
                  sandbox_exec: str = SANDBOX_EXEC) -> list[str]:
    """The launcher: ``sandbox-exec -p PROFILE -D TMPDIR=<tmpdir>``; the confined command's argv follows."""
    tmp = os.path.realpath(tmpdir)
    _path(tmp)  # the same refusals as the profile's own paths
    return [sandbox_exec, "-p", render_profile(canonical_policy(policy)), "-D", f"{TMPDIR_PARAM}={tmp}"]


# -- the run's temporary area -----------------------------------------------------------------


def _private_dir(path: Path) -> None:
    """``path`` exists as our own directory, owner-only; anything else (a link, a stranger's) is refused."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(errno.EPERM, "the sandbox's temporary area is not a private directory of this user")


def run_tmpdir(policy: SandboxPolicy) -> Path:
    """The run's temporary area: ``<temp>/kirocrew-seatbelt-<uid>/<mode>-<workspace digest>``, owner-only.

    The same directory for every run of one mode in one workspace: the orchestrator starts a new
    kiro-cli whenever a run's options differ, so the options (and this path) must be stable.
    """
    base = Path(os.path.realpath(tempfile.gettempdir())) / f"kirocrew-seatbelt-{os.getuid()}"
    _private_dir(base)
    digest = hashlib.sha256(os.fsencode(policy.workspace)).hexdigest()[:16]
    tmp = base / f"{policy.mode}-{digest}"
    _private_dir(tmp)
    return tmp


def sandboxed_options(options: AcpOptions, policy: SandboxPolicy, tmpdir: os.PathLike[str] | str, *,
                      sandbox_exec: str = SANDBOX_EXEC) -> AcpOptions:
    """``options`` launching kiro-cli under ``policy``: wrapped, reads pretrusted, ``TMPDIR`` set.

    ``options.env`` None (inherit ours) becomes a copy of our environment, so ``TMPDIR`` can be set,
    with the augmented ``PATH`` an unsandboxed kiro-cli gets (the profile lets every run read it).
    """
    from kirocrew_core.search_path import with_search_path

    tmp = os.path.realpath(tmpdir)
    env = with_search_path(os.environ) if options.env is None else dict(options.env)
    env["TMPDIR"] = tmp
    launcher = tuple(seatbelt_argv(policy, tmp, sandbox_exec=sandbox_exec))
    return dataclasses.replace(options, launcher=launcher, trust_all_tools=False,
                               trust_tools=pretrusted(tuple(policy.pretrusted_tools), policy.mode), env=env)


# -- the backend ------------------------------------------------------------------------------

# The preflight's self-test; its arguments are: the (read-only) workspace, a path outside every
# root, a writable root, the protected path inside it, the temporary area, a hidden directory.
_PROBE = r'''
touch "$1/probe" 2>/dev/null && exit 11
touch "$2/probe" 2>/dev/null && exit 12
touch "$5/probe" || exit 13
touch "$3/probe" || exit 14
touch "$4/probe" 2>/dev/null && exit 15
cat "$6/secret" >/dev/null 2>&1 && exit 16
ln "$4/file" "$5/alias" 2>/dev/null && exit 17
ln "$2/file" "$3/alias" 2>/dev/null && exit 18
mv "$3" "$5/moved" 2>/dev/null && exit 19
exit 0
'''
_PROBE_FAILURES = {
    11: "the read-only workspace was writable",
    12: "a write outside the allowed roots succeeded",
    13: "the run's temporary area was not writable",
    14: "a writable root was not writable",
    15: "a protected path inside a writable root was writable",
    16: "a hidden path was readable",
    17: "a protected file could be hard-linked into the temporary area",
    18: "a file outside the writable roots could be hard-linked into one",
    19: "the ancestor of a protected path could be renamed",
}


class SeatbeltBackend:
    """Serves ``read_only`` and ``workspace_write`` on macOS; preflighted once per process at first use."""

    def __init__(self, sandbox_exec: str = SANDBOX_EXEC) -> None:
        self.sandbox_exec = sandbox_exec
        self._lock = threading.Lock()
        self._verdict: tuple[bool, str] | None = None

    def available(self) -> tuple[bool, str]:
        """macOS, ``sandbox-exec`` present, a sandboxed no-op runs, and the self-test's forbidden writes fail."""
        if sys.platform != "darwin":
            return False, f"the Seatbelt sandbox (sandbox-exec) needs macOS; this host is {sys.platform}"
        if not os.access(self.sandbox_exec, os.X_OK):
            return False, f"{self.sandbox_exec} is missing or not executable"
        with self._lock:
            if self._verdict is None:
                self._verdict = self._preflight()
            return self._verdict

    def _run(self, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
        return proc.run(argv, env=env, timeout=PREFLIGHT_TIMEOUT_SECS, reason="seatbelt preflight")

    def _preflight(self) -> tuple[bool, str]:
        with tempfile.TemporaryDirectory(prefix="kirocrew-seatbelt-preflight-") as scratch:
            root = Path(os.path.realpath(scratch))
            workspace, outside, writable, tmp, hidden = (root / name for name in
                                                         ("workspace", "outside", "writable", "tmp", "hidden"))
            protected = writable / "protected"
            for directory in (workspace, outside, writable, protected, tmp, hidden):
                directory.mkdir()
            for secret in (protected / "file", outside / "file", hidden / "secret"):
                secret.write_text("x")
            policy = SandboxPolicy(mode=READ_ONLY, workspace=workspace, writable=(writable,),
                                   read_only=(protected,), hidden=(hidden,))
            prefix = seatbelt_argv(policy, tmp, sandbox_exec=self.sandbox_exec)
            env = {**os.environ, "TMPDIR": str(tmp)}
            args = [str(p) for p in (workspace, outside, writable, protected, tmp, hidden)]
            try:
                noop = self._run([*prefix, "/usr/bin/true"], env)
                if noop.returncode != 0:
                    return False, failure_text("a sandboxed no-op failed", noop)
                confined = self._run([*prefix, "/bin/sh", "-c", _PROBE, "probe", *args], env)
            except Exception as exc:  # noqa: BLE001 - spawn failure, timeout: the sandbox cannot be trusted
                return False, redact_text(f"sandbox-exec did not run: {type(exc).__name__}: {exc}")
        if confined.returncode != 0:
            return False, _PROBE_FAILURES.get(confined.returncode,
                                              failure_text("the confinement self-test failed", confined))
        return True, ""

    def factory(self, options: AcpOptions, *, workspace: str, mode: str) -> AcpOptions:
        """``options`` wrapped in the Seatbelt sandbox for ``mode``; ``authority_unavailable`` if it cannot be."""
        ok, reason = self.available()
        if not ok:
            raise conversation_error("authority_unavailable", f"authority {mode} is unavailable: {reason}")
        try:
            policy = build_policy(mode, workspace, platform="darwin")
            prepare(policy)
            return sandboxed_options(options, policy, run_tmpdir(policy), sandbox_exec=self.sandbox_exec)
        except (OSError, ValueError) as exc:
            detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise conversation_error("authority_unavailable", redact_text(
                f"authority {mode} is unavailable: the sandbox could not be prepared: {detail}")) from exc


BACKEND = SeatbeltBackend()


def authority_backends() -> list[AuthorityBackend]:
    """``read_only`` and ``workspace_write`` on macOS, both served by one preflighted Seatbelt backend."""
    descriptions = {
        "read_only": "macOS Seatbelt sandbox: read-only host and workspace, a private temporary area, kiro's own "
                     "dirs writable, network kept; reads pretrusted, other tools ask.",
        "workspace_write": "macOS Seatbelt sandbox: as read_only, plus the workspace writable (its .git hooks and "
                           "config stay read-only).",
    }
    return restricted_backends(BACKEND, descriptions, ("darwin",))
