"""What the installed kiro-cli can do, asked live and cached for a few minutes.

Three probes: ``kiro-cli --version``, the model catalog, and one ``initialize``
over ACP (no session is created, so probing leaves nothing behind in kiro's
session store). Agents (modes) and slash commands are only announced inside a
session, so they come from the sessions workers have opened.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from kirocrew_core.errors import KirocrewError

from kirocrew_conversations.errors import conversation_error
from kirocrew_conversations.redact import redact_text

CACHE_TTL_SECS = 600.0


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


async def probe() -> KiroCapabilities:
    """Ask kiro-cli now; ``kiro_unavailable`` (with a redacted reason) when it cannot answer."""
    from kirocrew_core import kiro
    from kirocrew_core.acp_runtime import AcpOptions, AcpRuntime

    kiro.clear_caches()
    try:
        version = await asyncio.to_thread(kiro.kiro_cli_version)
        catalog = await asyncio.to_thread(kiro.list_models)
        async with AcpRuntime(AcpOptions()) as runtime:
            init = runtime.initialize_response
    except (KirocrewError, OSError) as exc:
        raise conversation_error("kiro_unavailable", redact_text(f"kiro-cli cannot answer: {exc}")) from exc
    caps = init.agent_capabilities
    prompt = caps.prompt_capabilities if caps is not None else None
    session = caps.session_capabilities if caps is not None else None
    fork_client = hasattr(AcpRuntime, "fork_session")
    return KiroCapabilities(
        version=version,
        models=tuple(Model(m.model_id, m.name, m.description) for m in catalog.models),
        default_model=catalog.default_model,
        protocol_version=int(init.protocol_version) if init.protocol_version is not None else None,
        load_session=bool(caps and caps.load_session),
        session_fork=fork_client and bool(session is not None and session.fork is not None),
        embedded_context=bool(prompt and prompt.embedded_context),
        images=bool(prompt and prompt.image),
        fetched_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
    )


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
