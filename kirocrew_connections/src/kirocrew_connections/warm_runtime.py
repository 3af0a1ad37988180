"""The one shared warm kiro-cli: generations, sessions, parking, the reaper, the single re-arm.

A *generation* is one warm process, numbered when it is handed over (a spawn
that never became current gets no number). The process spawns on the base
agent (no servers) in its private directory; an *activation* is one
``session/new`` (``mcpServers`` always ``[]``) switched to the all agent, whose
servers each announce an approval URL. The PKCE verifier lives in the process
and the callback listener in the session, so a URL is redeemable only while
both live: :meth:`WarmRuntime.generation_is_live` and
:meth:`WarmRuntime.activation_is_live`.

Session-handle ownership (the spec's nine points): a handle is registered
before anything can interrupt, and forgotten only once its destroy completed.
``session/new`` runs as a kept, shielded task; its handle is registered with no
await in between; an abandoned create that still yields a handle is registered
settled-and-expired and destroyed, one that yields none quarantines the
generation (its plan is cleared, so the next activation stands it down and the
orphan session dies with the process). A failed collection marks its record
expired before the destroy; the sweep pops a record only after its destroy.

A generation that must go while a card still holds one of its URLs is
*parked*, not killed; the parked drain retires it once its rows are gone. A
dead process withdraws its rows and, when the page armed supervision, starts
at most one automatic replacement. Every mutation is either free of awaits or
settled in ``finally``/``except BaseException`` that re-raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kirocrew_connections.mint import SERVER_SETTLED
from kirocrew_connections.warm_plan import ALL_AGENT, BASE_AGENT, AuthShape, WarmPlan

if TYPE_CHECKING:
    from kirocrew_core.acp_runtime import AcpRuntime
    from kirocrew_core.acp_session import AcpSession

log = logging.getLogger(__name__)

SPAWN_EVENT = "connections_warm_mint_spawn"
SPEC_WRITE_EVENT = "warm_mint_spec_write"
SPEC_REMOVAL_EVENT = "warm_mint_spec_removal"


class WarmDied(Exception):
    """The warm process died during an activation (one respawn is worth trying)."""


class WarmRefused(Exception):
    """Warming was refused (a planned spec is not ours): the cold path serves."""


class RowTable(Protocol):
    """What the runtime asks of the mint table's warm rows (:class:`kirocrew_connections.warm.WarmTable`)."""

    def holds_live_rows(self, generation: int) -> bool: ...
    def activations_in_use(self) -> set[int]: ...
    def pending(self) -> bool: ...
    def expire_generation(self, generation: int) -> list[str]: ...
    def expire_dead(self) -> list[str]: ...


@dataclass
class Generation:
    number: int
    runtime: AcpRuntime
    path: Path
    plan: WarmPlan | None  # None once quarantined: the next activation stands it down

    @property
    def alive(self) -> bool:
        return self.runtime.returncode is None and self.runtime.pid is not None


@dataclass
class WarmSession:
    generation: int
    session: AcpSession
    expires_at: float
    settled: bool = False
    roster: dict[str, AuthShape] = field(default_factory=dict)
    frames: dict[str, str] = field(default_factory=dict)  # announced URLs read from the session, not yet taken
    taken: set[str] = field(default_factory=set)  # servers whose URL went to a claim (one URL per server)

    def may_still_announce(self, alias: str) -> bool:
        """A redrain can yield ``alias``: its URL is not taken and was announced, or its server has not settled."""
        if alias in self.taken:
            return False
        if alias in self.frames or alias in self.session.oauth_servers:
            return True
        status = self.session.mcp_status.get(alias)
        return status is None or status.state not in SERVER_SETTLED


@dataclass(frozen=True)
class Activation:
    generation: int
    activation: int
    requests: dict[str, str]  # server alias -> approval URL
    covered: frozenset[str]  # the aliases this activation asked for
    settled: frozenset[str] = frozenset()  # asked-for servers that started without a challenge

    @property
    def late_possible(self) -> bool:
        """Some asked-for server neither announced a URL nor settled: one may still come (a redrain reads it)."""
        return bool(self.covered - self.requests.keys() - self.settled)


def _changed(read: Callable[[Any], tuple[int, int]], seen: tuple[int, int], state: Any) -> bool:
    return read(state) != seen


def audit_event(event: str, outcome: str, **fields: Any) -> None:
    """Best-effort SEL record (never a URL, never exception text): a failure is a warning."""
    from kirocrew_core import audit

    try:
        audit.record(event, actor="system", outcome=outcome, **fields)
    except Exception as exc:  # noqa: BLE001 - auditing must not break warming
        log.warning("could not audit %s: %s", event, type(exc).__name__)


class WarmRuntime:
    """The process-wide warm kiro-cli and its sessions; timers are attributes so tests can shorten them."""

    def __init__(self, rows: RowTable, plan_builder: Callable[[], WarmPlan]) -> None:
        from kirocrew_connections.mint import MINT_TTL_SECS

        self.rows = rows
        self.plan_builder = plan_builder
        self.spawn_timeout = 90.0
        self.create_timeout = 90.0
        self.destroy_timeout = 10.0
        self.late_create_timeout = 10.0
        self.kill_timeout = 20.0
        self.settle_window = 0.5
        self.settle_rounds = 6
        self.session_ttl = MINT_TTL_SECS
        self.idle_grace = MINT_TTL_SECS / 10
        self.reaper_interval = 5.0
        self.rearm_budget = 1
        self.current: Generation | None = None
        self.retiring: list[Generation] = []
        self.sessions: dict[int, WarmSession] = {}
        self.generation = 0  # the last handed-over number; bumped only on a handed-over spawn
        self._seq = 0
        self._lock = asyncio.Lock()
        self._reaper: asyncio.Task[None] | None = None
        self._drain: asyncio.Task[None] | None = None
        self._armed = False
        self._rearms_left = 0
        self._rearm_task: asyncio.Task[Any] | None = None
        self.rearm: Callable[[], Awaitable[Any]] | None = None  # set by the table: rescan + warm
        self._background: set[asyncio.Task[Any]] = set()
        self._exit_watchers: set[asyncio.Task[Any]] = set()

    # -- liveness ------------------------------------------------------------------------

    def generation_is_live(self, number: int | None) -> bool:
        """The process numbered ``number`` (current or parked) still runs: it holds the verifier."""
        if number is None or number <= 0:
            return False
        if self.current is not None and self.current.number == number and self.current.alive:
            return True
        return any(g.number == number and g.alive for g in self.retiring)

    def activation_is_live(self, activation: int | None) -> bool:
        """The session still answers its callback (it is registered, so not yet destroyed)."""
        return activation is not None and activation in self.sessions

    @property
    def processes(self) -> list[Generation]:
        return [g for g in (self.current, *self.retiring) if g is not None]

    def _track(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # -- activation ----------------------------------------------------------------------

    async def activate(self, wanted: Iterable[str]) -> Activation | None:
        """Activate the all agent for ``wanted`` aliases on a fitting process; None when none is planned.

        Raises :class:`WarmDied` when the process died under the activation,
        :class:`WarmRefused` when the specs could not be trusted.
        """
        async with self._lock:
            await self._sweep_retiring_locked()
            plan = await asyncio.to_thread(self.plan_builder)
            asked = frozenset(alias for alias in wanted if alias in plan.entries)
            if not asked:
                return None
            gen = await self._ensure_locked(plan)
            try:
                return await self._activate_locked(gen, asked, plan)
            except Exception as exc:
                if gen.alive:
                    raise
                log.info("warm kiro-cli generation %d died during an activation", gen.number)
                if self.current is gen:
                    await self._park_or_kill_locked()
                raise WarmDied() from exc

    async def _ensure_locked(self, plan: WarmPlan) -> Generation:
        """Reuse the resident process when it serves ``plan`` as is, else stand it down and spawn."""
        from kirocrew_connections.warm_plan import servable

        gen = self.current
        if gen is not None and gen.alive and servable(gen.plan, plan):
            gen.plan = plan
            return gen
        if gen is not None:
            await self._park_or_kill_locked()
        return await self._spawn_locked(plan)

    async def _spawn_locked(self, plan: WarmPlan) -> Generation:
        from kirocrew_core.acp_runtime import AcpOptions, AcpRuntime

        from kirocrew_connections import warm_files

        pending: list[asyncio.Future[Any]] = []

        async def offload(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            # Shielded and kept: a cancelled wait never leaves a worker writing into a tree being removed.
            future = self._track(asyncio.to_thread(fn, *args, **kwargs))
            pending.append(future)
            return await asyncio.shield(future)

        created = self._track(asyncio.to_thread(warm_files.create_generation_dir))
        try:
            path = await asyncio.shield(created)
        except BaseException:
            self._track(self._discard_created(created))
            raise
        runtime: AcpRuntime | None = None
        handed = False
        try:
            refused = await offload(warm_files.write_specs, path, plan.specs)
            for name in refused:
                log.warning("a foreign file holds warm spec %s; not written", name)
                await offload(audit_event, SPEC_WRITE_EVENT, "refused", spec=name)
            unowned = await offload(warm_files.unowned_specs, path, sorted(plan.specs))
            if unowned:
                await offload(audit_event, SPAWN_EVENT, "refused", reason=f"unowned_specs:{len(unowned)}")
                raise WarmRefused(f"{len(unowned)} planned warm spec(s) are not ours")
            runtime = AcpRuntime(AcpOptions(agent=BASE_AGENT, cwd=path, initialize_timeout=self.spawn_timeout,
                                            session_timeout=self.create_timeout))
            await asyncio.wait_for(runtime.open(), self.spawn_timeout)
            assert runtime.pid is not None
            await offload(warm_files.write_marker, path, runtime_pid=runtime.pid)
            # The handover: synchronous from here to the return.
            self.generation += 1
            gen = Generation(self.generation, runtime, path, plan)
            self.current, handed = gen, True
            self._reaper = self._track(self._reap(gen))
            self._watch_exit(gen)
        finally:
            if not handed:
                await asyncio.shield(self._track(self._abandon_spawn(runtime, path, pending)))
        self._track(asyncio.to_thread(audit_event, SPAWN_EVENT, "ok", providers=len(plan.entries),
                                      generation=gen.number))
        return gen

    async def _discard_created(self, created: asyncio.Future[Path]) -> None:
        from kirocrew_connections import warm_files

        with contextlib.suppress(Exception):
            await asyncio.to_thread(warm_files.remove_generation_dir, await created)

    async def _abandon_spawn(self, runtime: AcpRuntime | None, path: Path,
                             pending: list[asyncio.Future[Any]]) -> None:
        """A spawn that was never handed over: kill its child; keep the tree only if the kill did not take."""
        from kirocrew_connections import warm_files

        await asyncio.gather(*pending, return_exceptions=True)
        if runtime is not None and not await self._kill(runtime):
            self.retiring.append(Generation(-1, runtime, path, None))
            self._arm_drain()
            return
        await asyncio.to_thread(warm_files.remove_generation_dir, path)

    async def _activate_locked(self, gen: Generation, asked: frozenset[str], plan: WarmPlan) -> Activation:
        loop = asyncio.get_running_loop()
        self._seq += 1
        activation = self._seq
        # Every server the all agent mounts: any of them may announce a URL a later redrain can serve.
        roster = {alias: shape for alias in plan.entries if (shape := plan.shape(alias)) is not None}
        # 1: the create is a kept, shielded task: abandoning the wait never loses the handle.
        create = self._track(gen.runtime.new_session(gen.path, mcp_servers=[]))
        try:
            session = await asyncio.wait_for(asyncio.shield(create), self.create_timeout)
        except BaseException:
            await self._abandon_creation_locked(gen, activation, create, roster)
            raise
        # 2: registered with no await between the handle arriving and here.
        record = WarmSession(gen.number, session, loop.time() + self.session_ttl, roster=roster)
        self.sessions[activation] = record
        try:
            await session.set_mode(ALL_AGENT)
            requests = await self.collect(session, set(asked))
            settled = frozenset(alias for alias in asked if (status := session.mcp_status.get(alias)) is not None
                                and status.state in SERVER_SETTLED and alias not in requests)
        except BaseException:
            # 5: settled and expired before the destroy, popped only after it: an interrupted
            # destroy leaves a record the sweep finishes.
            record.settled, record.expires_at = True, 0.0
            await self._destroy_record(activation)
            raise
        return Activation(gen.number, activation, requests, asked, settled)

    async def _abandon_creation_locked(self, gen: Generation, activation: int,
                                       create: asyncio.Task[Any], roster: dict[str, AuthShape]) -> None:
        session = None
        try:
            session = await asyncio.wait_for(asyncio.shield(create), self.late_create_timeout)
        except BaseException:  # noqa: BLE001 - the caller re-raises its own exception
            session = None
        if session is not None:
            # 3: a recovered handle enters the ordinary settled-and-expired path.
            self.sessions[activation] = WarmSession(gen.number, session, 0.0, settled=True, roster=roster)
            await self._destroy_record(activation)
            return
        # 4: no handle: quarantine, so the orphan session dies with this process.
        create.cancel()
        gen.plan = None

    async def collect(self, session: AcpSession, wanted: set[str]) -> dict[str, str]:
        """The approval URLs announced for ``wanted``, within the spec's bounds.

        An alias has *reported* once it announced a URL or its server settled
        without one (initialized, failed). Collection stops once every wanted
        alias reported, after ``settle_rounds`` quiet windows with no new report
        (each new one renews the budget), or after ``settle_rounds`` windows per
        wanted alias in all.
        """
        def settled_of(state: Any) -> set[str]:
            return {alias for alias in wanted
                    if (status := state.mcp_status.get(alias)) is not None and status.state in SERVER_SETTLED}

        def reports(state: Any) -> tuple[int, int]:
            return len(state.oauth_servers), len(settled_of(state))

        record = next((r for r in self.sessions.values() if r.session is session), None)
        frames = record.frames if record is not None else {}
        taken = record.taken if record is not None else set()
        found: dict[str, str] = {}
        quiet = rounds = 0
        cap = self.settle_rounds * max(1, len(wanted))
        heard = 0
        while True:
            for request in session.drain_oauth_requests():
                frames.setdefault(request.server_name, request.url)  # kept: a later redrain may want it
            for alias in wanted & frames.keys():
                found.setdefault(alias, frames.pop(alias))
                taken.add(alias)
            settled = settled_of(session)
            if wanted <= found.keys() | settled:
                return found
            now = len(found) + len(settled)
            quiet, heard = (0, now) if now > heard else (quiet + 1, heard)
            if quiet > self.settle_rounds or rounds >= cap:
                return found
            rounds += 1
            await session.wait_until(functools.partial(_changed, reports, reports(session)), self.settle_window)

    # -- sessions ------------------------------------------------------------------------

    async def _destroy_quietly(self, record: WarmSession) -> bool:
        """Terminate the session; True once it is gone. Swallows failures, never cancellation (9)."""
        runtime = record.session.runtime
        if runtime.returncode is not None or record.session.session_id not in runtime.sessions:
            return True  # its process is gone (or it was already forgotten there): it died with it
        try:
            await asyncio.wait_for(record.session.terminate(), self.destroy_timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - retried by the next sweep
            log.info("destroying a warm session failed: %s", type(exc).__name__)
            return False
        return True

    async def _destroy_record(self, activation: int) -> None:
        record = self.sessions.get(activation)
        if record is None:
            return
        destroyed = False
        try:
            destroyed = await self._destroy_quietly(record)
        finally:
            if destroyed:
                self.sessions.pop(activation, None)

    async def sweep_sessions(self) -> None:
        async with self._lock:
            await self._sweep_sessions_locked()

    async def _sweep_sessions_locked(self) -> None:
        """6: destroy settled, unused, expired sessions; a record goes only once its destroy did."""
        now = asyncio.get_running_loop().time()
        in_use = self.rows.activations_in_use()
        for activation, record in list(self.sessions.items()):
            if record.settled and activation not in in_use and record.expires_at <= now:
                await self._destroy_record(activation)

    def settle_activation(self, activation: int, keep: bool) -> None:
        """The activation's rows are written: it outlives them by one TTL (a replaced URL may still be open).

        One with nothing to keep (it minted nothing and no late URL can come) is
        expired at once. The sweep runs on the next reaper tick.
        """
        record = self.sessions.get(activation)
        if record is None or record.settled:
            return  # the first settlement stands (a redrain re-reads a settled session)
        record.settled = True
        if not keep:
            record.expires_at = 0.0

    def _drop_generation_sessions(self, number: int) -> None:
        """7/8: the process is dead or being killed; its sessions die with it (no destroy)."""
        for activation in [a for a, r in self.sessions.items() if r.generation == number]:
            del self.sessions[activation]

    def live_sessions_for(self, alias: str, shape: AuthShape) -> list[tuple[int, WarmSession]]:
        """Live sessions (newest first) whose roster asked for ``alias`` with this same shape."""
        return [(a, r) for a, r in sorted(self.sessions.items(), reverse=True)
                if r.roster.get(alias) == shape and self.generation_is_live(r.generation)
                and r.may_still_announce(alias)]

    # -- standing down -------------------------------------------------------------------

    async def _kill(self, runtime: AcpRuntime) -> bool:
        """Stop the process (tracked, so an interrupted caller never abandons it half-way); True once gone."""
        task = self._track(runtime.aclose())
        with contextlib.suppress(Exception, asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), self.kill_timeout)
        return runtime.pid is None or runtime.returncode is not None

    async def _park_or_kill_locked(self) -> None:
        """Stand the current generation down: parked while a card holds one of its URLs, else killed."""
        gen, self.current = self.current, None
        self._cancel_reaper()
        if gen is None:
            return
        if gen.alive and self.rows.holds_live_rows(gen.number):
            self.retiring.append(gen)
            self._arm_drain()
            return
        if not await self._retire_generation(gen):
            self.retiring.append(gen)
            self._arm_drain()

    async def _retire_generation(self, gen: Generation) -> bool:
        """Kill, then (once the kill took) drop its sessions, withdraw its rows, remove its tree."""
        from kirocrew_connections import warm_files

        if not await self._kill(gen.runtime):
            return False
        self._drop_generation_sessions(gen.number)
        self.rows.expire_generation(gen.number)
        removed = await asyncio.to_thread(warm_files.remove_generation_dir, gen.path)
        if not removed:
            await asyncio.to_thread(audit_event, SPEC_REMOVAL_EVENT, "refused", generation=gen.number)
        return True

    async def _sweep_retiring_locked(self) -> None:
        """Retire parked generations that died or no longer hold a card's URL."""
        for gen in list(self.retiring):
            if gen.alive and self.rows.holds_live_rows(gen.number):
                continue
            if await self._retire_generation(gen):
                with contextlib.suppress(ValueError):
                    self.retiring.remove(gen)

    def _cancel_reaper(self) -> None:
        reaper, self._reaper = self._reaper, None
        if reaper is not None and reaper is not asyncio.current_task() and not reaper.done():
            reaper.cancel()

    def _arm_drain(self) -> None:
        if self._drain is None or self._drain.done():
            self._drain = self._track(self._drain_parked())

    async def _drain_parked(self) -> None:
        """Sweep until nothing is parked: nothing else retires a parked process once no mint comes."""
        while self.retiring:
            await asyncio.sleep(self.reaper_interval)
            try:
                self.rows.expire_dead()
                async with self._lock:
                    await self._sweep_retiring_locked()
                    await self._sweep_sessions_locked()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - keep draining
                log.warning("warm parked drain: %s", type(exc).__name__)

    # -- the exit watcher, the reaper and the re-arm ---------------------------------------

    def _watch_exit(self, gen: Generation) -> None:
        """Withdraw ``gen``'s URLs the moment its process exits, not at the reaper's next tick.

        A URL whose verifier died with the process opens a consent page nothing
        can complete; a click in the reaper's gap opened exactly that. The
        withdrawal is synchronous (atomic); retiring, sweeping and the re-arm stay
        the reaper's. Kept apart from the tracked tasks, because shutdown cancels
        it rather than waiting on a process that might outlive its kill.
        """
        async def watch() -> None:
            await gen.runtime.wait_exit()
            gone = self.rows.expire_generation(gen.number)
            if gone:
                log.info("warm kiro-cli generation %d exited; withdrew %s", gen.number, ", ".join(gone))

        task = asyncio.ensure_future(watch())
        self._exit_watchers.add(task)
        task.add_done_callback(self._exit_watchers.discard)

    async def _reap(self, gen: Generation) -> None:
        """Every ``reaper_interval``: withdraw dead rows, sweep, notice death, retire when idle."""
        loop = asyncio.get_running_loop()
        idle_since = loop.time()
        while True:
            await asyncio.sleep(self.reaper_interval)
            try:
                self.rows.expire_dead()
                async with self._lock:
                    await self._sweep_retiring_locked()
                    await self._sweep_sessions_locked()
                    dead = not gen.alive
                    if dead and self.current is gen:
                        self.current = None
                        await self._retire_generation(gen)
                if dead:
                    task = self.start_rearm(gen.number)
                    if task is not None:
                        with contextlib.suppress(Exception):
                            await asyncio.shield(task)
                    elif self.retiring:
                        self._arm_drain()
                    return
                if self.rows.pending():
                    idle_since = loop.time()
                elif loop.time() - idle_since >= self.idle_grace:
                    log.info("warm kiro-cli generation %d idle; retiring it", gen.number)
                    await self.retire_all()
                    return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the reaper must outlive a bad tick
                log.warning("warm reaper: %s", type(exc).__name__)

    def arm_supervision(self) -> None:
        """An explicit page warm: one automatic replacement if the process dies."""
        self._armed, self._rearms_left = True, self.rearm_budget

    def start_rearm(self, number: int) -> asyncio.Task[Any] | None:
        """The single-flight replacement for dead generation ``number``, or None when declined."""
        if self._rearm_task is not None and not self._rearm_task.done():
            return self._rearm_task
        current_alive = self.current is not None and self.current.alive
        if (not self._armed or self._rearms_left <= 0 or number != self.generation or current_alive
                or self._lock.locked() or self.rearm is None):
            return None
        self._rearms_left -= 1
        self._rearm_task = self._track(self.rearm())
        return self._rearm_task

    async def retire_all(self) -> None:
        """Kill every generation, parked first; a pair goes only once its kill took."""
        self._cancel_reaper()
        async with self._lock:
            gens = [*self.retiring, *([self.current] if self.current is not None else [])]
            self.current, self.retiring = None, []
            for gen in gens:
                if not await self._retire_generation(gen):
                    self.retiring.append(gen)
            if self.retiring:
                self._arm_drain()

    async def shutdown(self) -> None:
        """Disarm, settle the in-flight re-arm, retire everything, then wait for every teardown (the gateway's stop)."""
        self._armed, self._rearms_left = False, 0
        for task in (self._rearm_task, self._drain, self._reaper):
            if task is not None and not task.done() and task is not asyncio.current_task():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        await self.retire_all()
        for watcher in list(self._exit_watchers):
            watcher.cancel()
        await asyncio.gather(*self._exit_watchers, return_exceptions=True)
        others = [t for t in self._background if t is not asyncio.current_task() and t is not self._drain]
        await asyncio.gather(*others, return_exceptions=True)
