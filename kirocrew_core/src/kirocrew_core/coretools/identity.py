"""Session keys: which crew session a ``kirocrew-core`` call comes from, decided by the host.

The host issues an unguessable key to every kiro-cli it starts (:meth:`SessionRegistry.issue`),
injects it as ``KIROCREW_SESSION_KEY``, and binds the key to the process once it runs
(:meth:`SessionRegistry.bind_pid`: the pid and its kernel start id, plus a signed sidecar
``session_pid_<pid>.txt``/``.sig`` for the ``KIROCREW_HOST_PID`` route). A call resolves to a
session only on facts the host checks itself (:meth:`SessionRegistry.resolve_strict`):

1. the caller block's key is live, and the process it is bound to (same start id) is an
   ancestor of the relay, whose pid the host read from the socket's kernel credentials; or
2. the block's ``hostPidEnv`` names a pid whose sidecar verifies (HMAC keyed from the audit
   log's key), whose key is live and bound to that very pid (same start id), and that pid is
   an ancestor of the relay.

Why the ancestry is *checked* and never *walked*: holding a key proves nothing, because any
process of the same user can read it from ``/proc/<pid>/environ`` of a kiro-cli; being a
descendant of the bound process is what a copied key cannot fake. A discovery walk (look up
every ancestor for some session) would make a sub-agent resolve to its parent; here a
sub-agent is its own kiro-cli with its own key, so it resolves to itself. There is no lenient
fallback for identity: :meth:`SessionRegistry.resolve_lenient` is the strict answer or None.

The registry lives in the process that starts the kiro-cli workers (the host; a standalone
conversations server has its own, which the host does not know, so its sessions' calls are
unverified). Nothing here is per caller: the registry is host state keyed by session key.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import logging
import os
import re
import secrets
import stat
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from kirocrew_core.coretools.contract import CrewSession, SessionKind

if TYPE_CHECKING:
    from collections.abc import Callable

    from kirocrew_core.acp_runtime import AcpOptions
    from kirocrew_core.host.caller import CallerContext

log = logging.getLogger(__name__)

SESSION_KEY_ENV = "KIROCREW_SESSION_KEY"
HOST_PID_ENV = "KIROCREW_HOST_PID"
KEY_PREFIX = "kcs1-"
KEY_PATTERN = re.compile(r"^kcs1-[0-9a-f]{32}$")
SIDECAR_PURPOSE = b"kirocrew.session_pid.sig.v1"
SIDECAR_DIR_MODE = 0o700
MAX_SIDECAR_BYTES = 4096
# How far up from the relay the bound process may be (kiro-cli, its chat child, a sandbox's init…).
MAX_ANCESTRY_DEPTH = 64
_SIDECAR_NAME = re.compile(r"^session_pid_([0-9]{1,10})\.(txt|sig)$")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def fingerprint(key: str) -> str:
    """What logs and audit records name a session by: never the key itself."""
    return "kcs:" + hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()[:12] if key else "none"


@dataclass(frozen=True)
class _Binding:
    session: CrewSession
    pid: int | None = None
    start_id: str | None = None


class SessionRegistry:
    """The live session keys of this process, with their bound pids (see the module docstring).

    :param sidecar_dir: where sidecars go (default :func:`kirocrew_core.home.session_pid_dir`).
    :param signing_key: returns the sidecar subkey or None (default: derived from the audit
        log's key); without one, sidecars are not published and route 2 refuses.
    """

    def __init__(self, sidecar_dir: Path | None = None,
                 signing_key: Callable[[], bytes | None] | None = None) -> None:
        self._dir = sidecar_dir
        self._signing_key = signing_key or _audit_subkey
        self._lock = threading.Lock()
        self._live: dict[str, _Binding] = {}

    # -- the host's side ---------------------------------------------------------------------------
    def issue(self, kind: SessionKind, target_id: str, *, agent: str | None = None,
              workspace: str | None = None) -> str:
        """A fresh key for a session about to start; nothing about it is derivable from ``target_id``."""
        key = KEY_PREFIX + secrets.token_hex(16)
        with self._lock:
            self._live[key] = _Binding(CrewSession(key, kind, target_id, agent, workspace))
        return key

    def bind_pid(self, key: str, pid: int) -> bool:
        """Record the process the key was injected into, and publish its signed sidecar; False if not live.

        Blocking file I/O: a coroutine calls it through ``asyncio.to_thread``.
        """
        start = _start_id(pid)
        with self._lock:
            binding = self._live.get(key)
            if binding is None:
                return False
            self._live[key] = replace(binding, pid=pid, start_id=start)
        self._publish(pid, key)
        return True

    def revoke(self, key: str) -> None:
        """The session ended: its key resolves no more and its sidecar is removed (idempotent)."""
        with self._lock:
            binding = self._live.pop(key, None)
        if binding is not None and binding.pid is not None:
            self._unpublish(binding.pid)

    def get(self, key: str) -> CrewSession | None:
        with self._lock:
            binding = self._live.get(key)
        return binding.session if binding is not None else None

    def live_count(self) -> int:
        with self._lock:
            return len(self._live)

    # -- resolving a caller ------------------------------------------------------------------------
    def resolve_strict(self, caller: CallerContext | None) -> CrewSession | None:
        """The caller's session on host-checked facts only (module docstring), else None. Never raises."""
        if caller is None or not caller.peer_verified:
            return None
        try:
            return self._by_key(caller) or self._by_host_pid(caller)
        except Exception:
            log.exception("resolving a caller failed; treating it as unverified")
            return None

    def resolve_lenient(self, caller: CallerContext | None) -> CrewSession | None:
        """For read-only and telemetry tools: the strict answer, or None (there is no weaker source)."""
        return self.resolve_strict(caller)

    def _by_key(self, caller: CallerContext) -> CrewSession | None:
        key = caller.session_key
        if not key:
            return None
        with self._lock:
            binding = self._live.get(key)
        if binding is None or binding.pid is None:
            return None
        if not self._same_process(binding) or not is_ancestor(binding.pid, caller.relay_pid):
            return None
        return binding.session

    def _by_host_pid(self, caller: CallerContext) -> CrewSession | None:
        pid = caller.host_pid_env
        if pid is None:
            return None
        key = self.verified_sidecar(pid)
        if key is None:
            return None
        with self._lock:
            binding = self._live.get(key)
        if binding is None or binding.pid != pid or not self._same_process(binding):
            return None
        return binding.session if is_ancestor(pid, caller.relay_pid) else None

    @staticmethod
    def _same_process(binding: _Binding) -> bool:
        """The bound pid still runs the process the key was injected into (not a reused pid)."""
        return binding.pid is not None and binding.start_id is not None and _start_id(binding.pid) == binding.start_id

    # -- the sidecar -------------------------------------------------------------------------------
    def sidecar_dir(self) -> Path:
        if self._dir is not None:
            return self._dir
        from kirocrew_core import home

        return home.session_pid_dir()

    def verified_sidecar(self, pid: int) -> str | None:
        """The key ``session_pid_<pid>.txt`` holds when its ``.sig`` verifies; None on any doubt."""
        directory = self.sidecar_dir()
        body = read_regular_nofollow(directory / f"session_pid_{pid}.txt")
        signature = read_regular_nofollow(directory / f"session_pid_{pid}.sig")
        subkey = self._signing_key()
        if body is None or signature is None or subkey is None:
            return None
        if not hmac.compare_digest(_sign(subkey, pid, body).encode(), signature.strip().encode("ascii", "replace")):
            log.warning("session_pid_%s signature mismatch: refusing that identity (a forgery or a stale sidecar)",
                        pid)
            return None
        return body if KEY_PATTERN.match(body) else None

    def _publish(self, pid: int, key: str) -> None:
        subkey = self._signing_key()
        if subkey is None:
            # Said once at host start (an unusable SEL); a standalone server, which never logs, has no key either.
            log.debug("no audit log key: session_pid_%s is not published, so the KIROCREW_HOST_PID route "
                      "refuses this session (the injected key still works)", pid)
            return
        from kirocrew_core.jsonfile import write_bytes_atomic

        try:
            directory = _private_dir(self.sidecar_dir())
            for name, data in ((f"session_pid_{pid}.txt", key), (f"session_pid_{pid}.sig", _sign(subkey, pid, key))):
                path = directory / name
                with contextlib.suppress(FileNotFoundError):
                    if path.is_symlink():  # never write through a link someone placed here
                        path.unlink()
                write_bytes_atomic(path, data.encode("ascii"), secret=True)
        except OSError as exc:
            log.warning("could not publish session_pid_%s: %s", pid, exc.strerror or exc)

    def _unpublish(self, pid: int) -> None:
        directory = self.sidecar_dir()
        for suffix in ("txt", "sig"):
            with contextlib.suppress(OSError):
                (directory / f"session_pid_{pid}.{suffix}").unlink()

    def sweep_sidecars(self) -> int:
        """Remove sidecars no live key of this registry is bound to (a host starts with none); how many.

        A sidecar of a pid that still runs is not this host's either (a previous host issued
        it, and its keys died with it), so every sidecar not bound here goes.
        """
        directory = self.sidecar_dir()
        with self._lock:
            bound = {b.pid for b in self._live.values() if b.pid is not None}
        removed = 0
        try:
            names = os.listdir(directory)
        except OSError:
            return 0
        for name in names:
            matched = _SIDECAR_NAME.match(name)
            if matched is None or int(matched.group(1)) in bound:
                continue
            with contextlib.suppress(OSError):
                (directory / name).unlink()
                removed += 1
        return removed


def _sign(subkey: bytes, pid: int, key: str) -> str:
    return hmac.new(subkey, f"{pid}:{key}".encode(), hashlib.sha256).hexdigest()


def _audit_subkey() -> bytes | None:
    from kirocrew_core import audit

    return audit.derived_key(SIDECAR_PURPOSE)


def _private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=SIDECAR_DIR_MODE)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(errno.ENOTDIR, f"{path} is not a directory")
    if stat.S_IMODE(st.st_mode) != SIDECAR_DIR_MODE:
        os.chmod(path, SIDECAR_DIR_MODE)
    return path


def read_regular_nofollow(path: Path) -> str | None:
    """A small regular file's UTF-8 text, never through a link; None on any refusal (fails closed)."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SIDECAR_BYTES:
            return None
        data = os.read(fd, MAX_SIDECAR_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > MAX_SIDECAR_BYTES:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _start_id(pid: int) -> str | None:
    from kirocrew_core.kiro_sessions import start_id

    return start_id(pid)


def is_ancestor(ancestor: int, pid: int) -> bool:
    """Whether ``ancestor`` is a (strict) ancestor of ``pid``, read from the kernel (``/proc``); False if unknown."""
    from kirocrew_core.kiro_sessions import parent_pid

    if ancestor <= 1 or pid <= 1 or ancestor == pid:
        return False
    current: int | None = pid
    for _ in range(MAX_ANCESTRY_DEPTH):
        current = parent_pid(current) if current is not None else None
        if current is None or current <= 1:
            return False
        if current == ancestor:
            return True
    return False


_REGISTRY: SessionRegistry | None = None
_REGISTRY_LOCK = threading.Lock()


def registry() -> SessionRegistry:
    """This process's one registry (the host's, or a standalone conversations server's)."""
    global _REGISTRY
    with _REGISTRY_LOCK:
        if _REGISTRY is None:
            _REGISTRY = SessionRegistry()
        return _REGISTRY


# Run kiro-cli through ``sh`` so the process the sidecar names exports its own pid before it execs
# the launcher (a sandbox) or kiro-cli: the one pid fact that survives a sandbox renumbering pids.
HOST_PID_PREFIX = ("/bin/sh", "-c", f'{HOST_PID_ENV}=$$; export {HOST_PID_ENV}; exec "$@"', "sh")


def session_launch(options: AcpOptions, key: str) -> AcpOptions:
    """``options`` for a kiro-cli that runs as session ``key``: the key in its env, the pid prefix first.

    An env left to the runtime (None) becomes ours with the augmented ``PATH``, as the runtime would give it.
    """
    from kirocrew_core.search_path import with_search_path

    env = with_search_path(os.environ) if options.env is None else dict(options.env)
    env[SESSION_KEY_ENV] = key
    env.pop(HOST_PID_ENV, None)  # the prefix sets it; an inherited one would name another process
    return replace(options, env=env, launcher=(*HOST_PID_PREFIX, *options.launcher))
