"""The warm mint table: premint every card's approval URL on one shared kiro-cli, adopt it on Connect.

A cold Connect spawns its own kiro-cli (seconds); the Connections page instead
*premints* on mount (``POST /api/connections/premint``): one warm process
activates every candidate provider at once and each URL becomes a *shared* row
in the mint engine's table. The Connect click then *adopts* the row
(:func:`adopt_shared_mint`: atomic, token rotated, watcher re-armed, provenance
kept) and answers ``waiting`` at once; on a miss it redrains the live session
that activated the provider once, then the cold path serves, unchanged.

Rows have two axes (see :mod:`kirocrew_connections.mint`): ``shared`` says
nobody has claimed the URL; ``generation``/``activation`` say which process
and session can redeem it. :func:`expire_dead_mints` is the only judge of warm
rows. A premint never makes a card look mid-consent and never counts as busy;
an adopted row does both.

Public surface: :func:`mintable_providers`, :func:`warm_mint_all`,
:func:`adopt_shared_mint`, :func:`expire_dead_mints`,
:func:`rearm_invalidated_provider`, :func:`shutdown_warm_mint`,
:func:`scavenge_warm_mint_artifacts`. Nothing imports this module at gateway
boot; the handlers import it per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kirocrew_connections import warm_plan
from kirocrew_connections.mint import EXPIRED, GRANTED, LIVE_STATES, MINTING, WAITING, MintEngine, MintRow
from kirocrew_connections.warm_runtime import Activation, WarmDied, WarmRefused, WarmRuntime, audit_event

if TYPE_CHECKING:
    from kirocrew_connections.registry import Provider

log = logging.getLogger(__name__)

WARM_EVENT = "connections_warm_mint"
ADOPT_EVENT = "connections_warm_mint_adopt"
URL_EVENT = "connections_warm_mint_url"
PRESENCE_EVENT = "connections_premint.oauth_grant_presence"
ACTIVATION_ATTEMPTS = 2  # one respawn after a death, then the cold path


@dataclass
class _Claim:
    row: MintRow
    token: str
    provider: Provider


def audited_candidates(catalog: Callable[[], Iterable[Provider]]) -> tuple[list[Provider], list[Provider]]:
    """:func:`warm_plan.candidate_scan` plus the grant-presence read audit (best-effort, when non-empty)."""
    universe, candidates = warm_plan.candidate_scan(catalog)
    if candidates:
        audit_event(PRESENCE_EVENT, "success", providers=[p.slug for p in candidates], grant="absent")
    return universe, candidates


class WarmTable:
    """The warm rows in the mint engine's table, and the runtime that mints them."""

    def __init__(self, engine: MintEngine, pm: Any = None) -> None:
        self.engine = engine
        self.pm = pm
        self.catalog: Callable[[], Iterable[Provider]] = self._registry
        self.runtime = WarmRuntime(self, self._plan)
        self.runtime.rearm = self._rearm_dead
        self._providers: dict[str, Provider] = {}
        self._invalidation_rearms: dict[str, asyncio.Task[Any]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._audits: set[asyncio.Task[Any]] = set()  # awaited, never cancelled, by shutdown

    def _registry(self) -> Iterable[Provider]:
        from kirocrew_connections.registry import routed_registry

        return routed_registry(self.pm).all()

    def _plan(self) -> warm_plan.WarmPlan:
        return warm_plan.build_plan(warm_plan.spec_universe(self.catalog()))

    def candidates(self) -> list[Provider]:
        """The audited candidate scan over this table's catalog (blocking; run it off the loop)."""
        return audited_candidates(self.catalog)[1]

    def _audit(self, event: str, outcome: str, **fields: Any) -> None:
        task = asyncio.ensure_future(asyncio.to_thread(audit_event, event, outcome, **fields))
        self._audits.add(task)
        task.add_done_callback(self._audits.discard)

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- row predicates (RowTable) -------------------------------------------------------

    def _warm_rows(self) -> list[MintRow]:
        return [row for row in self.engine.rows() if row.warm]

    def row_alive(self, row: MintRow) -> bool:
        """Redeemable: its process holds the verifier *and* its session still answers the redirect."""
        return self.runtime.generation_is_live(row.generation) and self.runtime.activation_is_live(row.activation)

    def holds_live_rows(self, generation: int) -> bool:
        return any(row.generation == generation and row.state in LIVE_STATES for row in self._warm_rows())

    def activations_in_use(self) -> set[int]:
        return {row.activation for row in self._warm_rows()
                if row.activation is not None and row.state in LIVE_STATES}

    def pending(self) -> bool:
        return any(row.state in LIVE_STATES for row in self._warm_rows())

    def _expire(self, row: MintRow) -> None:
        row.state, row.reason, row.oauth_url = EXPIRED, "mint_process_gone", None
        if row.watcher is not None and not row.watcher.done():
            row.watcher.cancel()
        provider = self._providers.get(row.slug)
        if provider is not None:
            self._spawn(self.engine.audit(row, provider, outcome="expired", reason="mint_process_gone",
                                          url_minted=True))

    def expire_generation(self, generation: int) -> list[str]:
        """Withdraw every live row of a generation being killed (narrowed by generation only)."""
        gone = [row for row in self._warm_rows() if row.generation == generation and row.state in LIVE_STATES]
        for row in gone:
            self._expire(row)
        return [row.slug for row in gone]

    def expire_dead(self) -> list[str]:
        """Every waiting warm row whose process or session is gone becomes ``expired``."""
        gone = [row for row in self._warm_rows()
                if row.generation is not None and row.state == WAITING and not self.row_alive(row)]
        for row in gone:
            self._expire(row)
        return [row.slug for row in gone]

    # -- claims ---------------------------------------------------------------------------

    def _claimable(self, row: MintRow | None) -> bool:
        """A row a premint may displace: none, a terminal one, or a dead shared one.

        Never a cold mint under way, an adopted row (a user is mid-consent) or a
        live premint (it is already adoptable, or an activation will fill it).
        """
        if row is None or row.state not in LIVE_STATES:
            return True
        if not row.warm:
            return False
        if not row.shared:
            return False  # adopted
        return row.state == WAITING and not self.row_alive(row)

    def claim(self, providers: Sequence[Provider]) -> tuple[dict[str, _Claim], list[MintRow]]:
        """Claim a shared ``minting`` row per claimable provider; no await (atomic)."""
        claims: dict[str, _Claim] = {}
        displaced: list[MintRow] = []
        for provider in providers:
            current = self.engine.row(provider.slug)
            if not self._claimable(current):
                continue
            row = MintRow(slug=provider.slug, token=uuid.uuid4().hex, shared=True)
            previous = self.engine.put(row)
            if previous is not None:
                displaced.append(previous)
            self._providers[provider.slug] = provider
            claims[provider.slug] = _Claim(row, row.token, provider)
        return claims, displaced

    def _holds_claim(self, claim: _Claim) -> bool:
        row = claim.row
        return self.engine.row(row.slug) is row and row.token == claim.token and row.shared

    def release(self, claims: dict[str, _Claim]) -> None:
        """Drop every claim still ``minting`` under its own token (no URL came for it)."""
        for claim in claims.values():
            if self._holds_claim(claim) and claim.row.state == MINTING:
                self.engine.remove(claim.row)

    def absorb(self, result: Activation, claims: dict[str, _Claim]) -> list[str]:
        """Turn each claim the activation answered into a ``waiting`` shared row with its watcher.

        A URL the approval gate refuses (a credential in it, or a host outside the
        provider's approval hosts) is never recorded: its claim is released (a
        later Connect takes the cold path, which owns the retry and says why on
        the row) and it is audited by slug and reason (and a foreign host by
        name). Synchronous, so it is atomic.
        """
        from kirocrew_connections.approval_url import REFUSED_HOST, refusal, url_host
        from kirocrew_connections.mint import server_alias

        minted: list[str] = []
        try:
            for slug, claim in claims.items():
                url = result.requests.get(server_alias(slug))
                if url is None or not self._holds_claim(claim) or claim.row.state != MINTING:
                    continue
                refused = refusal(url, claim.provider)
                if refused is not None:
                    log.warning("warm mint for %s: approval URL refused (%s); released", slug, refused)
                    where = {"approval_host": url_host(url)} if refused == REFUSED_HOST else {}
                    self._audit(URL_EVENT, "refused", provider=slug, reason=refused, **where)
                    continue
                row = claim.row
                row.state, row.oauth_url, row.url_minted = WAITING, url, True
                row.generation, row.activation = result.generation, result.activation
                row.watcher = self._spawn(self._watch(row, claim.token, claim.provider))
                minted.append(slug)
        finally:
            self.runtime.settle_activation(result.activation, bool(minted) or result.late_possible)
        return minted

    async def _watch(self, row: MintRow, token: str, provider: Provider) -> None:
        """Hold the row until the grant lands or the TTL passes; every write is fenced on ``token``."""
        from kirocrew_core import grants

        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.engine.ttl

        def fenced() -> bool:
            return self.engine.row(row.slug) is row and row.token == token and row.state == WAITING

        while fenced():
            if await asyncio.to_thread(grants.grant_presence, provider.mcp_url) is True:
                if fenced():
                    row.state, row.oauth_url = GRANTED, None
                    await self.engine.audit(row, provider, reason="grant_observed", url_minted=True)
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                if fenced():
                    row.state, row.reason, row.oauth_url = EXPIRED, "mint_ttl_elapsed", None
                    await self.engine.audit(row, provider, outcome="expired", reason="mint_ttl_elapsed",
                                            url_minted=True)
                return
            await asyncio.sleep(min(self.engine.poll, remaining))

    # -- warming --------------------------------------------------------------------------

    async def warm_mint_all(self, providers: Sequence[Provider] | None = None, *,
                            arm_supervision: bool = True) -> list[str]:
        """Premint every candidate on the shared process; the slugs that got a URL. Never raises on a mint failure."""
        from kirocrew_connections.mint import server_alias

        if providers is None:
            providers = await asyncio.to_thread(self.candidates)
        if not providers:
            return []
        if arm_supervision:
            self.runtime.arm_supervision()
        claims, displaced = self.claim(providers)
        if not claims:
            return []
        minted: list[str] = []
        activated = 0
        try:
            for row in displaced:
                self.engine.dispose(row)
            result = None
            for _attempt in range(ACTIVATION_ATTEMPTS):
                try:
                    result = await self.runtime.activate(server_alias(slug) for slug in claims)
                    break
                except WarmDied:
                    continue
                except WarmRefused:
                    break
                except Exception as exc:  # noqa: BLE001 - warming never fails a caller; the cold path serves
                    log.warning("warm activation failed: %s", type(exc).__name__)
                    break
            if result is not None:
                activated = len(result.covered)
                minted = self.absorb(result, claims)
        finally:
            self.release(claims)
        self._audit(WARM_EVENT, "ok", activated=activated, minted=len(minted))
        return minted

    def start_premint(self, providers: Sequence[Provider]) -> asyncio.Task[Any]:
        """Schedule :meth:`warm_mint_all` for ``providers`` (the premint route; never awaited there)."""
        return self._spawn(self.warm_mint_all(list(providers)))

    async def _rearm_dead(self) -> list[str]:
        """The single replacement after a death: the ordinary scan, never earning another attempt."""
        candidates = await asyncio.to_thread(self.candidates)
        return await self.warm_mint_all(candidates, arm_supervision=False)

    def rearm_invalidated_provider(self, slug: str) -> None:
        """After a Disconnect removed the grant: warm that provider again (one task per slug, not awaited)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        running = self._invalidation_rearms.get(slug)
        if running is not None and not running.done():
            return
        task = self._spawn(self._rearm_provider(slug))
        self._invalidation_rearms[slug] = task
        task.add_done_callback(lambda t: self._invalidation_rearms.pop(slug, None)
                               if self._invalidation_rearms.get(slug) is t else None)

    async def _rearm_provider(self, slug: str) -> list[str]:
        candidates = await asyncio.to_thread(self.candidates)
        chosen = [p for p in candidates if p.slug == slug]
        current = self.engine.row(slug)
        if not chosen or (current is not None and current.state in LIVE_STATES):
            return []
        return await self.warm_mint_all(chosen, arm_supervision=False)

    # -- adoption -------------------------------------------------------------------------

    def _adopt_row(self, slug: str, mcp_url: str) -> str | None:
        """Atomic (no await): rotate the token, drop ``shared``, re-arm the watcher, keep provenance."""
        row = self.engine.row(slug)
        provider = self._providers.get(slug)
        if (row is None or provider is None or not row.shared or row.state != WAITING or not row.oauth_url
                or provider.mcp_url != mcp_url or not self.row_alive(row)):
            return None
        if row.watcher is not None and not row.watcher.done():
            row.watcher.cancel()
        row.token = uuid.uuid4().hex
        row.shared = False
        row.watcher = self._spawn(self._watch(row, row.token, provider))
        self._audit(ADOPT_EVENT, "ok", provider=slug, generation=row.generation)
        return row.token

    async def adopt_shared_mint(self, slug: str, mcp_url: str) -> str | None:
        """The premint's token for the click, or None (the cold path serves); one redrain on a miss."""
        token = self._adopt_row(slug, mcp_url)
        if token is not None:
            return token
        try:
            if await self._redrain(slug, mcp_url):
                return self._adopt_row(slug, mcp_url)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed redrain means the cold path
            log.info("warm redrain for %s failed: %s", slug, type(exc).__name__)
        return None

    async def _redrain(self, slug: str, mcp_url: str) -> bool:
        """Read a late approval URL from the live session that activated ``slug``, through the claim path.

        Only when the provider is still a candidate and asks for the very
        shape the session activated; any mismatch reads nothing.
        """
        from kirocrew_connections.mint import server_alias

        current = self.engine.row(slug)
        if current is not None and current.state in LIVE_STATES and not self._claimable(current):
            return False
        _universe, candidates = await asyncio.to_thread(warm_plan.candidate_scan, self.catalog)
        provider = next((p for p in candidates if p.slug == slug and p.mcp_url == mcp_url), None)
        if provider is None:
            return False
        alias = server_alias(slug)
        shape = warm_plan.auth_shape(warm_plan.registry_entry(provider))
        for activation, record in self.runtime.live_sessions_for(alias, shape):
            claims, displaced = self.claim([provider])
            if not claims:
                return False
            try:
                for row in displaced:
                    self.engine.dispose(row)
                found = await self.runtime.collect(record.session, {alias})
                if alias in found:
                    result = Activation(record.generation, activation, found, frozenset({alias}))
                    return bool(self.absorb(result, claims))
            finally:
                self.release(claims)
        return False

    # -- stop -----------------------------------------------------------------------------

    async def shutdown(self) -> None:
        """Disarm, cancel in-flight warms and re-arms, then retire every process."""
        for task in list(self._invalidation_rearms.values()):
            task.cancel()
        pending = [t for t in self._tasks if not t.done() and t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(BaseException):
                await task
        await self.runtime.shutdown()
        await asyncio.gather(*self._audits, return_exceptions=True)


_table: WarmTable | None = None


def warm_table(pm: Any = None) -> WarmTable:
    """The process-wide table over :func:`kirocrew_connections.mint.mint_engine` (created on first use)."""
    from kirocrew_connections.mint import mint_engine

    global _table
    if _table is None:
        _table = WarmTable(mint_engine(), pm)
    elif pm is not None:
        _table.pm = pm
    return _table


def mintable_providers(pm: Any = None) -> list[Provider]:
    """The providers a premint would warm now (the candidate scan; blocking, run it off the loop)."""
    return warm_table(pm).candidates()


async def warm_mint_all(providers: Sequence[Provider] | None = None, *, arm_supervision: bool = True) -> list[str]:
    return await warm_table().warm_mint_all(providers, arm_supervision=arm_supervision)


async def adopt_shared_mint(slug: str, mcp_url: str) -> str | None:
    return await warm_table().adopt_shared_mint(slug, mcp_url)


async def expire_dead_mints() -> list[str]:
    """Withdraw every warm URL whose process or session is gone (a no-op before any warm)."""
    return _table.expire_dead() if _table is not None else []


def rearm_invalidated_provider(slug: str) -> None:
    if _table is not None:
        _table.rearm_invalidated_provider(slug)


async def shutdown_warm_mint() -> None:
    """The gateway's stop: nothing warm outlives it (a gateway that never warmed does nothing)."""
    if _table is not None:
        await _table.shutdown()


def scavenge_warm_mint_artifacts() -> int:
    """Boot: remove generation trees whose host and runtime are provably dead (blocking; off the loop)."""
    from kirocrew_connections.warm_files import scavenge_generations

    return scavenge_generations()
