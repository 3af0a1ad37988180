"""Which crew session a call comes from, decided by the host from process ancestry, never from a claim.

The host issues a key to every kiro-cli it starts (:meth:`SessionRegistry.issue`), injects it
as ``KIROCREW_SESSION_KEY``, and binds the key to that process once it runs
(:meth:`SessionRegistry.bind_pid`: its pid and start time). A caller is the process at the
other end of a host connection: the relay or CLI twin whose pid the host read from the socket's
kernel credentials and pinned with its start time at accept (:mod:`kirocrew_core.host.server`).
:meth:`SessionRegistry.resolve` answers, per call, with a :class:`Resolution`:

1. ``gone``: the pinned process has exited, or its pid now names another process (a connection
   handed to a child that outlived it keeps no identity);
2. ``session``: the nearest process among the caller and its ancestors that is a bound kiro-cli
   (same pid, same start time) decides. A sub-agent is its own kiro-cli, started by the host, so
   it resolves to itself;
3. ``session`` too: no bound ancestor, but the caller is in the kernel session of a live bound
   kiro-cli that leads one (every kiro-cli starts in its own, :mod:`kirocrew_core.proc`). A
   process cannot join a session, only be born into it, so this catches what left the tree by
   being re-parented (``cmd &`` of a shell that exited, ``nohup``, a double fork without
   ``setsid``) while the session runs;
4. ``person`` too: the nearest such process is one the host started *for the person* and vouched
   for (:meth:`SessionRegistry.vouch_person`: a cron command job the person made), as the nearest
   bound kiro-cli decides for a session;
5. ``host``: the host itself is an ancestor, through none of the above: a process the host started
   for no one in particular (an MCP probe). It is nobody, never the person;
6. ``person``: none of the above, on an ancestry read all the way up: one of the owner's own
   processes;
7. ``unverified``: the host has no kernel credentials for the caller (no peer pid on this system,
   or a call made in process with no connection), or could not read its ancestry all the way up
   (an ancestor that exited mid-walk): unknowable is never the person.

What the caller's block says (``sessionKey``, ``hostPidEnv``) is a claim: it never decides.
Why: holding a key proves nothing (any process of the same user reads a kiro-cli's environment),
and dropping it proved nothing either: ``env -u KIROCREW_SESSION_KEY kirocrew cron pause …`` from a
session's shell is still that session. A claim the ancestry contradicts is reported
(:func:`contradiction`) so the host can log and audit it.

What is not covered, said in the docs: a process that both leaves its kiro-cli's tree *and* its
kernel session (``setsid`` and a double fork: a daemon) is re-parented to init or a subreaper and
resolves as the person; so does one that outlives its session's kiro-cli outside its tree.

The registry lives in the process that starts the kiro-cli workers (the host; a standalone
conversations server has its own, which the host does not know, so its sessions are unverified).
Nothing here is per caller: the registry is host state keyed by session key.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import secrets
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from kirocrew_core.coretools.contract import CrewSession, Origin, SessionKind
from kirocrew_core.host.protocol import HOST_PID_ENV, SESSION_KEY_ENV

if TYPE_CHECKING:
    from kirocrew_core.acp_runtime import AcpOptions
    from kirocrew_core.host.caller import CallerContext
    from kirocrew_core.processes import ProcessRef

log = logging.getLogger(__name__)

KEY_PREFIX = "kcs1-"
KEY_PATTERN = re.compile(r"^kcs1-[0-9a-f]{32}$")
# Signed pid sidecars an earlier version published; a starting host removes any it finds.
_LEGACY_SIDECAR = re.compile(r"^session_pid_([0-9]{1,10})\.(txt|sig)$")


def fingerprint(key: str) -> str:
    """What logs and audit records name a session by: never the key itself."""
    return "kcs:" + hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()[:12] if key else "none"


@dataclass(frozen=True)
class Resolution:
    """Who a call comes from (module docstring): its :data:`Origin`, and its session when that is ``session``."""

    origin: Origin
    session: CrewSession | None = None


UNVERIFIED = Resolution("unverified")
PERSON = Resolution("person")
GONE = Resolution("gone")
_ORIGINS: dict[Origin, str] = {
    "session": "a session", "person": "the person (no session's descendant)",
    "host": "a process the host started for no session", "unverified": "unverified", "gone": "gone",
}


@dataclass(frozen=True)
class _Binding:
    session: CrewSession
    process: ProcessRef | None = None
    leads_session: bool = False  # the bound process is its kernel session's leader


class SessionRegistry:
    """The live session keys of this process, each with the process it is bound to (module docstring).

    :param host: the process whose descendants, through no session, are ``host`` callers
        (default: this process, as it was when the registry was made).
    """

    def __init__(self, host: ProcessRef | None = None) -> None:
        self._host = host
        self._lock = threading.Lock()
        self._live: dict[str, _Binding] = {}
        self._person: set[ProcessRef] = set()

    # -- the host's side ---------------------------------------------------------------------------
    def issue(self, kind: SessionKind, target_id: str, *, agent: str | None = None,
              workspace: str | None = None) -> str:
        """A fresh key for a session about to start; nothing about it is derivable from ``target_id``."""
        key = KEY_PREFIX + secrets.token_hex(16)
        with self._lock:
            self._live[key] = _Binding(CrewSession(key, kind, target_id, agent, workspace))
        return key

    def bind_pid(self, key: str, pid: int) -> bool:
        """Bind the key to the process it was injected into (pid and start time); False if not live or gone.

        Reads the process table: a coroutine calls it through ``asyncio.to_thread``.
        """
        from kirocrew_core import processes

        process = processes.ref(pid)
        if process is None:
            return False
        leads = processes.session_id(pid) == pid
        with self._lock:
            binding = self._live.get(key)
            if binding is None:
                return False
            self._live[key] = replace(binding, process=process, leads_session=leads)
        return True

    def vouch_person(self, pid: int) -> ProcessRef | None:
        """Vouch that ``pid``, a process the host started for the person (their cron command job), and what
        descends from it act as the person; the vouched process, or None when it is already gone.

        Reads the process table: a coroutine calls it through ``asyncio.to_thread``. End it with
        :meth:`unvouch` when the process ends.
        """
        from kirocrew_core import processes

        process = processes.ref(pid)
        if process is not None:
            with self._lock:
                self._person.add(process)
        return process

    def unvouch(self, process: ProcessRef) -> None:
        """The vouched process ended (idempotent)."""
        with self._lock:
            self._person.discard(process)

    def revoke(self, key: str) -> None:
        """The session ended: its key resolves no more (idempotent)."""
        with self._lock:
            self._live.pop(key, None)

    def get(self, key: str) -> CrewSession | None:
        with self._lock:
            binding = self._live.get(key)
        return binding.session if binding is not None else None

    def live_count(self) -> int:
        with self._lock:
            return len(self._live)

    # -- resolving a caller ------------------------------------------------------------------------
    def resolve(self, caller: CallerContext | None) -> Resolution:
        """Who ``caller`` is, from the kernel's process facts only (module docstring). Never raises."""
        if caller is None or not caller.peer_verified or caller.relay_started is None:
            return UNVERIFIED
        try:
            return self._resolve(caller.relay_pid, caller.relay_started)
        except Exception:
            log.exception("resolving a caller failed; treating it as unverified")
            return UNVERIFIED

    def resolve_strict(self, caller: CallerContext | None) -> CrewSession | None:
        """The caller's session (:meth:`resolve`), or None."""
        return self.resolve(caller).session

    def resolve_lenient(self, caller: CallerContext | None) -> CrewSession | None:
        """For read-only and telemetry tools: the same answer (there is no weaker source)."""
        return self.resolve_strict(caller)

    def _resolve(self, pid: int, started: float) -> Resolution:
        from kirocrew_core import processes

        lineage = processes.lineage(pid)
        chain = lineage.links
        if not chain or chain[0].started != started:
            return GONE
        with self._lock:
            bound = {b.process: b for b in self._live.values() if b.process is not None}
            vouched = set(self._person)
        answer = next((Resolution("session", bound[link].session) if link in bound else PERSON
                       for link in chain if link in bound or link in vouched), None)
        if answer is None:
            answer = self._by_kernel_session(pid, bound)
        if answer is None and self._host_process() in chain:
            answer = Resolution("host")
        if answer is None:
            # The person only on a walk that reached the top: an ancestor that could not be read might be a session.
            answer = PERSON if lineage.complete else UNVERIFIED
        # Everything above was read while the caller ran; if it exited meanwhile, its pid may name another.
        return answer if processes.is_running(chain[0]) else GONE

    @staticmethod
    def _by_kernel_session(pid: int, bound: dict[ProcessRef, _Binding]) -> Resolution | None:
        """The live bound kiro-cli whose kernel session ``pid`` is in, if it leads one."""
        from kirocrew_core import processes

        sid = processes.session_id(pid)
        for process, binding in bound.items():
            # While its leader runs, a session id names that session only: the kernel keeps the number taken.
            if binding.leads_session and process.pid == sid and processes.is_running(process):
                return Resolution("session", binding.session)
        return None

    def _host_process(self) -> ProcessRef | None:
        if self._host is None:
            from kirocrew_core import processes

            self._host = processes.ref(os.getpid())
        return self._host

    # -- what an earlier version left ----------------------------------------------------------------
    @staticmethod
    def remove_legacy_sidecars(directory: Path | None = None) -> int:
        """Remove the signed pid sidecars an earlier version published (identity no longer reads them); how many."""
        if directory is None:
            from kirocrew_core import home

            directory = home.session_pid_dir()
        try:
            names = os.listdir(directory)
        except OSError:
            return 0
        removed = 0
        for name in names:
            if _LEGACY_SIDECAR.match(name):
                with contextlib.suppress(OSError):
                    (directory / name).unlink()
                    removed += 1
        return removed


def contradiction(caller: CallerContext, resolution: Resolution) -> str | None:
    """What the caller's block claims that its ancestry contradicts, or None (nothing claimed, or the same).

    The claim is never used; this says what to log and audit: a key of another live session,
    or a key or ``hostPidEnv`` claimed by a process that is no session's.
    """
    claimed_key = caller.session_key
    claimed_pid = caller.host_pid_env
    if not claimed_key and claimed_pid is None:
        return None
    session = resolution.session
    if session is None:
        what = f"session key {fingerprint(claimed_key)}" if claimed_key else f"KIROCREW_HOST_PID {claimed_pid}"
        return f"the caller claims {what}, but by its ancestry it is {_ORIGINS[resolution.origin]}"
    if claimed_key and claimed_key != session.key:
        return (f"the caller claims session key {fingerprint(claimed_key)}, but its ancestry is session "
                f"{fingerprint(session.key)}")
    return None


_REGISTRY: SessionRegistry | None = None
_REGISTRY_LOCK = threading.Lock()


def registry() -> SessionRegistry:
    """This process's one registry (the host's, or a standalone conversations server's)."""
    global _REGISTRY
    with _REGISTRY_LOCK:
        if _REGISTRY is None:
            _REGISTRY = SessionRegistry()
        return _REGISTRY


# Run kiro-cli through ``sh`` so the process the key is bound to exports its own pid before it execs the
# launcher (a sandbox) or kiro-cli. Only a claim a relay repeats (``hostPidEnv``): the host compares it
# with what the ancestry says and records a contradiction, it never resolves by it.
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
