"""What the installed kiro-cli can do, asked live and cached for a few minutes.

Three probes: ``kiro-cli --version``, the model catalog, and one ACP
``initialize`` followed by one ``session/new``. kiro-cli announces its agents
(the ACP modes) only in a session result, so the probe opens a throwaway
session, in an empty temporary directory, in a process started the way
workers start theirs (no ``--agent``): its ``modes`` are exactly the agents a
run can ask for — built-ins included, agent files kiro refuses left out — and
its ``currentModeId`` is the agent a run without a mode gets. Reading the agent
directories ourselves would guess at kiro's built-ins and its strict parsing;
this asks kiro. The probe's process is closed gracefully and the session's
files are removed, so nothing is left in kiro's session store. The same
session's ``_kiro.dev/commands/available`` gives the slash commands, so a
conversation can allow one before any run (when kiro is slow to announce them,
the probe waits a few seconds, then falls back to what workers' sessions announced).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kirocrew_core.errors import KirocrewError

from kirocrew_conversations import slash
from kirocrew_conversations.errors import conversation_error
from kirocrew_conversations.redact import redact_text

log = logging.getLogger(__name__)

CACHE_TTL_SECS = 600.0
# The throwaway session may start the default agent's MCP servers; past this, modes are reported unknown.
MODES_PROBE_TIMEOUT_SECS = 60.0


@dataclass(frozen=True)
class Model:
    id: str
    name: str
    description: str


@dataclass(frozen=True)
class KiroCapabilities:
    version: str | None
    models: tuple[Model, ...]
    default_model: str | None
    protocol_version: int | None
    load_session: bool
    session_fork: bool  # advertised by the agent AND supported by our ACP client
    embedded_context: bool
    images: bool
    fetched_at: str
    modes: tuple[str, ...] | None = None  # the agents kiro announced; None when it could not be asked
    default_mode: str | None = None  # the agent a session starts on without --agent
    commands: tuple[str, ...] | None = None  # the slash commands kiro announced; None when it did not say


async def probe() -> KiroCapabilities:
    """Ask kiro-cli now; ``kiro_unavailable`` (with a redacted reason) when it cannot answer."""
    from kirocrew_core import kiro
    from kirocrew_core.acp_runtime import AcpOptions, AcpRuntime

    kiro.clear_caches()
    try:
        version = await asyncio.to_thread(kiro.kiro_cli_version)
        catalog = await asyncio.to_thread(kiro.list_models)
        async with AcpRuntime(AcpOptions(session_timeout=MODES_PROBE_TIMEOUT_SECS)) as runtime:
            init = runtime.initialize_response
            started = await _throwaway_session(runtime)
    except (KirocrewError, OSError) as exc:
        raise conversation_error("kiro_unavailable", redact_text(f"kiro-cli cannot answer: {exc}")) from exc
    caps = init.agent_capabilities
    prompt = caps.prompt_capabilities if caps is not None else None
    session = caps.session_capabilities if caps is not None else None
    fork_client = hasattr(AcpRuntime, "fork_session")
    models = tuple(Model(m.model_id, m.name, m.description) for m in catalog.models)
    # What a session started without --model runs on is the default that matters (kiro's "auto" is not
    # served everywhere); the catalog's own default only when the session did not say.
    default_model = catalog.default_model
    if started.model in {m.id for m in models}:
        default_model = started.model
    return KiroCapabilities(
        version=version,
        models=models,
        default_model=default_model,
        protocol_version=int(init.protocol_version) if init.protocol_version is not None else None,
        load_session=bool(caps and caps.load_session),
        session_fork=fork_client and bool(session is not None and session.fork is not None),
        embedded_context=bool(prompt and prompt.embedded_context),
        images=bool(prompt and prompt.image),
        fetched_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        modes=started.modes,
        default_mode=started.mode,
        commands=started.commands,
    )


@dataclass(frozen=True)
class _Started:
    """What a session started without ``--agent``/``--model`` announced; all None if it could not start."""

    modes: tuple[str, ...] | None = None
    mode: str | None = None
    model: str | None = None
    commands: tuple[str, ...] | None = None


async def _throwaway_session(runtime: Any) -> _Started:
    """The agents a throwaway ``session/new`` announces and what it started on; its files are removed."""
    from kirocrew_core import kiro_sessions
    from kirocrew_core.acp_runtime import AcpError

    with tempfile.TemporaryDirectory(prefix="kirocrew-probe-") as cwd:
        try:
            session = await runtime.new_session(cwd)
        except (AcpError, KirocrewError) as exc:
            log.warning("kiro-cli announced no agents: session/new failed (%s)", exc.code)
            return _Started()
        commands = await slash.wait_announced(session)
        # Evicting it here lets kiro drop the session's lock and MCP servers before the process ends; older
        # builds lack the extension, and the graceful close that follows releases the lock too.
        with contextlib.suppress(AcpError, KirocrewError):
            await runtime.terminate_session(session.session_id)
        await runtime.aclose()
        await asyncio.to_thread(kiro_sessions.remove_session, session.session_id)
    modes = session.modes
    return _Started(tuple(modes.ids()) if modes else None, modes.current_mode_id if modes else None,
                    session.current_model_id, commands)


class CapabilityCache:
    """One cached probe; concurrent callers share the probe in flight."""

    def __init__(self, ttl: float = CACHE_TTL_SECS) -> None:
        self.ttl = ttl
        self._value: KiroCapabilities | None = None
        self._at = 0.0
        self._lock = asyncio.Lock()

    @property
    def cached(self) -> KiroCapabilities | None:
        """The last answer if still fresh, without probing."""
        if self._value is not None and time.monotonic() - self._at < self.ttl:
            return self._value
        return None

    async def get(self, *, refresh: bool = False) -> tuple[KiroCapabilities, bool]:
        """The capabilities and whether they came from the cache."""
        async with self._lock:
            if not refresh and self.cached is not None:
                return self._value, True  # type: ignore[return-value]
            self._value = await probe()
            self._at = time.monotonic()
            return self._value, False
