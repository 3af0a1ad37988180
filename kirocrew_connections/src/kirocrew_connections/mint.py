"""The cold mint: one dedicated ``kiro-cli acp`` per Connect click, held until consent lands.

kiro-cli owns the whole OAuth chain (discovery, registration, the PKCE
verifier, the loopback callback listener, the token exchange, the grant files);
kirocrew only starts a promptless single-server session, relays the approval
URL kiro-cli announces (``_kiro.dev/mcp/oauth_request``) to the card, keeps the
process alive while the user consents, and observes the grant pair by stat
(:mod:`kirocrew_core.grants`). Nothing here opens a grant file.

A mint is a row in the per-process table, keyed by slug and owned by a token
(``uuid4().hex``): a newer Connect replaces the row and disposes the old
attempt, and every write a running attempt makes is fenced on still being the
row in the table, so a superseded or cancelled attempt can never overwrite its
successor. States: ``minting`` → ``waiting`` (with ``oauth_url``) →
``granted`` | ``failed`` | ``expired``; ``idle`` is the view of no row.

The ephemeral agent spec each attempt mounts lives in the mint work dir's own
project agents dir (``<mint work dir>/.kiro/agents``, owner-only; kiro-cli
resolves project agents from its cwd, which is the mint work dir), never in
the global ``~/.kiro/agents``: a pre-registered provider's spec carries the
operator's client secret, and only this private dir may hold it. The spec is
recorded in a manifest before it is written, and cleanup unlinks only a path
that is a manifest row, a direct child of that dir (or, for rows an older
build recorded, of the global agents dir), not a symlink, mint-shaped and not
the rendered ``kirocrew.json``, so a planted row can never make the mint
delete anything else. Filesystem work runs through :func:`asyncio.to_thread`.

A pre-registered provider's callback port is fixed (it is registered with the
provider), so two consents for it cannot listen at once: a newer Connect waits
until the attempt it superseded is disposed (its listener closed) before it
spawns, and a port something else holds fails the mint with
``mint_redirect_port_busy`` rather than a server kiro-cli could not start.

The warm table (:mod:`kirocrew_connections.warm`) keeps its rows in this
table too and plugs in before :meth:`MintEngine.start` reserves a cold row. A
warm row has two marks: ``shared`` (an unclaimed premint any Connect may adopt)
and its provenance ``generation``/``activation`` (the shared process and session
holding the verifier and the callback listener). :meth:`MintEngine.view` never
serves an unclaimed row's URL, the status card does not read it as a consent
under way, and the cold liveness judge abstains on a row with a generation
(:func:`kirocrew_connections.warm.expire_dead_mints` is the only judge of those).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import re
import secrets
import stat
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from kirocrew_core import grants, home

from kirocrew_connections.approval_url import REFUSED_CREDENTIAL, refusal, url_host

if TYPE_CHECKING:
    from kirocrew_core.acp_runtime import AcpRuntime, AcpSession

    from kirocrew_connections.clients import OperatorClient
    from kirocrew_connections.registry import Provider

log = logging.getLogger(__name__)

IDLE, MINTING, WAITING, GRANTED, FAILED, EXPIRED = "idle", "minting", "waiting", "granted", "failed", "expired"
LIVE_STATES = frozenset({MINTING, WAITING})
AUDIT_EVENT = "connections_oauth_mint"

# How long a held process waits for the user before the row expires (seconds).
MINT_TTL_SECS = 600.0
# Spawn + initialize + session/new + the server's first report, as one deadline.
READY_TIMEOUT_SECS = 90.0
# The longest gap between two grant stats while waiting; kiro's own server reports wake us sooner.
GRANT_POLL_SECS = 5.0
# A credential-bearing URL is disposed and minted once more, then the mint fails.
URL_REJECTION_ATTEMPTS = 2
# Verdicts of the Test classifier that prove an existing grant answers. Only ``usable``: a grant
# whose server exposes no tools, or whose session never completes, proves nothing.
GRANT_PROVEN_VERDICTS = frozenset({"usable"})

MANIFEST_NAME = "mint-specs.json"
SPEC_PREFIX = "kirocrew-mint-"
SPEC_NAME_RE = re.compile(r"\Akirocrew-mint-[A-Za-z0-9_.-]+-[0-9]+-[0-9a-f]{8}\.json\Z")
# Files kirocrew itself owns in the agents dir: never a mint spec, whatever the manifest says.
OWNED_AGENT_FILES = frozenset({"kirocrew.json"})
#: Server states that end a server's start: it will announce no approval URL after one of these.
SERVER_SETTLED = frozenset({"initialized", "running", "failed", "disabled"})
_SERVER_FAILED = frozenset({"failed", "disabled"})

# -- ephemeral agent specs ----------------------------------------------------------


def manifest_file() -> Path:
    """``<crew home>/state/connections/mint-specs.json``: every spec a mint wrote and not yet removed."""
    return home.state_dir("connections") / MANIFEST_NAME


def mint_work_dir() -> Path:
    """The cwd of mint sessions: a private dir, so no project's ``.kiro`` leaks into the spec."""
    return home.state_dir("connections") / "mint"


def mint_agents_dir() -> Path:
    """``<mint work dir>/.kiro/agents``: where the mint's specs live (kiro-cli's project agents for that cwd)."""
    return mint_work_dir() / ".kiro" / "agents"


PRIVATE_DIR_MODE = 0o700


def ensure_private_dirs() -> Path:
    """Create the mint work dir and its agents dir owner-only (0700), tightening any that exist.

    A symlink or another user's directory anywhere on that chain is refused:
    a spec may carry a client secret and must land only where nobody else can read.
    """
    agents = mint_agents_dir()
    for directory in (mint_work_dir(), agents.parent, agents):
        directory.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
        st = os.lstat(directory)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            raise PermissionError(errno.EPERM, "not a private directory of this user", str(directory))
        if stat.S_IMODE(st.st_mode) != PRIVATE_DIR_MODE:
            os.chmod(directory, PRIVATE_DIR_MODE)
    return agents


def _read_manifest() -> list[dict[str, Any]]:
    """The manifest rows; a missing, malformed or unreadable manifest reads as no rows (nothing to clean)."""
    from kirocrew_core.jsonfile import ReadState, read_json

    read = read_json(manifest_file())
    if read.state is not ReadState.DOCUMENT or not isinstance(read.document, dict):
        if read.state not in (ReadState.ABSENT, ReadState.EMPTY):
            log.warning("mint spec manifest %s is %s; no spec will be cleaned up", read.path, read.state.value)
        return []
    rows = read.document.get("specs")
    return [row for row in rows if isinstance(row, dict)] if isinstance(rows, list) else []


def _write_manifest(rows: list[dict[str, Any]]) -> None:
    from kirocrew_core.jsonfile import write_json_atomic

    write_json_atomic(manifest_file(), {"schema_version": 1, "specs": rows}, secret=True)


def spec_body(name: str, alias: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """A promptless, model-free agent mounting exactly one server, with nothing auto-approved."""
    return {
        "name": name,
        "description": f"kirocrew connections: OAuth consent for {alias}",
        "model": "auto",
        "includeMcpJson": False,
        "prompt": "",
        "mcpServers": {alias: dict(entry)},
        "tools": [f"@{alias}"],
        "allowedTools": [],
    }


def write_mint_spec(slug: str, alias: str, entry: Mapping[str, Any]) -> tuple[str, Path]:
    """Record, then write, a dedicated spec; ``(agent name, path)``.

    The manifest row comes first so a crash between the two leaves a row whose
    file is absent (harmless) rather than a file nothing will ever clean up; a
    row that cannot be recorded means no spec is written at all.
    """
    from kirocrew_core.jsonfile import write_json_atomic
    from kirocrew_core.locks import named_lock

    name = f"{SPEC_PREFIX}{alias}-{os.getpid()}-{secrets.token_hex(4)}"
    path = mint_agents_dir() / f"{name}.json"
    if not SPEC_NAME_RE.match(path.name):
        raise ValueError(f"not a mint spec name: {path.name!r}")
    with named_lock("connections"):
        rows = _read_manifest()
        rows.append({"path": str(path), "slug": slug, "created_at": time.time()})
        _write_manifest(rows)
    try:
        os.lstat(path)
    except FileNotFoundError:
        pass
    else:  # a random name already taken: something planted it; never write through it
        raise FileExistsError(errno.EEXIST, "mint spec name already taken", str(path))
    ensure_private_dirs()
    write_json_atomic(path, spec_body(name, alias, entry), secret=True)  # 0600: it may carry a client secret
    return name, path


def _removable(path: Path, recorded: set[str]) -> bool:
    """All five conjuncts: recorded, a direct child of a mint agents dir, not a symlink, mint-shaped, not ours.

    The mint agents dir is the private one; the global agents dir still counts
    for rows an older build recorded there, so its leftovers are cleaned up too.
    """
    text = str(path)
    if text not in recorded or not os.path.isabs(text):
        return False
    if os.path.normpath(text) != text or Path(os.path.dirname(text)) not in (mint_agents_dir(),
                                                                               home.kiro_agents_dir()):
        return False
    if not SPEC_NAME_RE.match(path.name) or path.name in OWNED_AGENT_FILES:
        return False
    try:
        return not stat.S_ISLNK(os.lstat(path).st_mode)
    except FileNotFoundError:
        return True  # nothing to unlink; the row can go
    except OSError:
        return False


def remove_mint_spec(path: Path) -> bool:
    """Unlink a spec this engine recorded and drop its row; False (and nothing touched) otherwise."""
    from kirocrew_core.locks import named_lock

    with named_lock("connections"):
        rows = _read_manifest()
        recorded = {row.get("path") for row in rows if isinstance(row.get("path"), str)}
        if not _removable(path, recorded):  # type: ignore[arg-type]
            return False
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        _write_manifest([row for row in rows if row.get("path") != str(path)])
    return True


def sweep_orphan_specs(live: set[str], older_than: float = 2 * MINT_TTL_SECS) -> list[str]:
    """Remove recorded specs older than ``older_than`` that no live mint holds (a crashed gateway's)."""
    cutoff = time.time() - older_than
    removed = []
    for row in _read_manifest():
        path, created = row.get("path"), row.get("created_at")
        if not (isinstance(path, str) and path not in live and isinstance(created, (int, float))):
            continue
        if created < cutoff and remove_mint_spec(Path(path)):
            removed.append(path)
    return removed


def mint_entry(provider: Provider, alias: str, client: OperatorClient | None = None) -> dict[str, Any]:
    """The entry a mint spec mounts (cold or warm): the configured one if it is this provider's, else the registry's.

    The configured entry wins so kiro-cli authorizes exactly what the runtime
    will use; one whose URL names another grant key (a user's server that
    merely shares the name) is ignored, because the grant it would mint is not
    the one the card observes. A pre-registered provider's entry then gets the
    operator's client (``client``, else the one configured now): ``oauth``
    with ``clientId``, ``redirectUri`` and, for a confidential client,
    ``clientSecret``, plus ``oauthScopes`` unless the entry names its own. The
    result may hold a secret: write it only into a private spec. Blocking.
    """
    from kirocrew_connections.clients import mint_oauth_fields, operator_client

    entry = _configured_entry(provider, alias)
    if provider.preregistered:
        chosen = client if client is not None else operator_client(provider)
        fields = mint_oauth_fields(provider, chosen, with_secret=True)
        if fields:
            entry["oauth"] = fields["oauth"]
            if "oauthScopes" in fields and not isinstance(entry.get("oauthScopes"), list):
                entry["oauthScopes"] = fields["oauthScopes"]
    return entry


def redirect_listener(entry: Mapping[str, Any]) -> tuple[str, int] | None:
    """``(host, port)`` of the fixed callback listener an entry asks kiro-cli for, None for a random one."""
    oauth = entry.get("oauth")
    value = oauth.get("redirectUri") if isinstance(oauth, Mapping) else None
    if not isinstance(value, str):
        return None
    netloc = urlsplit(value).netloc if "//" in value else value.split("/", 1)[0]
    host, _, port = netloc.rpartition(":")
    return (host, int(port)) if host and port.isdigit() else None


def port_is_free(host: str, port: int) -> bool:
    """Whether a listener could bind ``host:port`` now (what kiro-cli's callback listener will need)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As asyncio's listeners do: a closed listener's TIME_WAIT connections do not hold the port.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host if host != "localhost" else "127.0.0.1", port))
        except OSError:
            return False
    return True


class RedirectPortBusyError(Exception):
    """Something else listens on the registered callback port; kiro-cli could not take the consent."""

    reason = "mint_redirect_port_busy"


def _configured_entry(provider: Provider, alias: str) -> dict[str, Any]:
    from kirocrew_core.jsonfile import ReadState, read_json

    read = read_json(home.rendered_agent_file())
    if read.state is ReadState.DOCUMENT and isinstance(read.document, dict):
        servers = read.document.get("mcpServers")
        entry = servers.get(alias) if isinstance(servers, dict) else None
        if isinstance(entry, dict) and isinstance(entry.get("url"), str):
            try:
                same = grants.grant_key(entry["url"]) == grants.grant_key(provider.mcp_url)
            except ValueError:
                same = False
            if same:
                return {k: v for k, v in entry.items() if k != "disabled"}  # a Connect means "start it"
    return {"url": provider.mcp_url}


def server_alias(slug: str) -> str:
    """The key the spec mounts the provider under (registry slugs are already kiro-safe)."""
    try:
        from kirocrew_mcp.public import mcp_server_alias
    except ImportError:  # the MCP plugin is optional; slugs hold no "/" anyway
        return slug
    return mcp_server_alias(slug)


# -- the table ----------------------------------------------------------------------


@dataclass
class MintRow:
    """One mint attempt; only the task that owns it (and the engine, under its fence) writes it."""

    slug: str
    token: str
    state: str = MINTING
    reason: str | None = None
    oauth_url: str | None = None
    url_minted: bool | None = None
    task: asyncio.Task[None] | None = None
    runtime: AcpRuntime | None = None
    spec_path: Path | None = None
    disposals: list[asyncio.Task[None]] = field(default_factory=list)
    # The disposal of the attempt this row superseded; a fixed callback port waits for it before spawning.
    predecessor: asyncio.Task[None] | None = None
    shared: bool = False  # an unclaimed premint: nobody asked for this URL yet
    generation: int | None = None  # the warm process holding the verifier
    activation: int | None = None  # the warm session holding the callback listener
    watcher: asyncio.Task[None] | None = None  # a warm row's grant watcher (token-fenced)

    @property
    def warm(self) -> bool:
        """A warm-table row: still shared (a claim, maybe minting) or carrying warm provenance (adopted)."""
        return self.shared or self.generation is not None

    def view(self) -> dict[str, Any]:
        """What ``GET /api/connections/mint`` serves: ``oauth_url`` only while waiting, never for a premint."""
        out: dict[str, Any] = {"slug": self.slug, "state": self.state, "token": self.token}
        if self.state == WAITING and self.oauth_url and not self.shared:
            out["oauth_url"] = self.oauth_url
        if self.reason:
            out["reason"] = self.reason
        return out


class _Attempt:
    """One dedicated kiro-cli process and the spec it mounts."""

    def __init__(self, runtime: AcpRuntime, session: AcpSession, spec_path: Path) -> None:
        self.runtime, self.session, self.spec_path = runtime, session, spec_path


class MintEngine:
    """The process-wide mint table and the tasks that drive its rows."""

    def __init__(self) -> None:
        self._rows: dict[str, MintRow] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._swept = False
        self.ttl = MINT_TTL_SECS
        self.ready_timeout = READY_TIMEOUT_SECS
        self.poll = GRANT_POLL_SECS

    # -- reading --

    def state(self, slug: str) -> str | None:
        """The row's state, None when no mint was ever started for ``slug`` in this process."""
        row = self._rows.get(slug)
        if row is None:
            return None
        self._expire_dead_holder(row)
        return row.state

    def consent_state(self, slug: str) -> str | None:
        """:meth:`state`, except that an unclaimed premint reads as no mint (it is nobody's consent)."""
        row = self._rows.get(slug)
        if row is not None and row.shared:
            return None
        return self.state(slug)

    def row(self, slug: str) -> MintRow | None:
        """The table's row for ``slug`` (the warm engine reads and writes it under its own rules)."""
        return self._rows.get(slug)

    def rows(self) -> list[MintRow]:
        return list(self._rows.values())

    def put(self, row: MintRow) -> MintRow | None:
        """Install ``row`` (a warm claim); the row it displaced, for the caller to :meth:`dispose`."""
        previous = self._rows.get(row.slug)
        self._rows[row.slug] = row
        return previous

    def remove(self, row: MintRow) -> bool:
        """Drop ``row`` if it is still the table's; True when it was."""
        if self._rows.get(row.slug) is row:
            del self._rows[row.slug]
            return True
        return False

    def dispose(self, row: MintRow) -> None:
        """Stop a row already out of the table in the background (its attempt or watcher)."""
        self._spawn_background(self._stop(row))

    def view(self, slug: str) -> dict[str, Any]:
        """The card's feed: ``{slug, state:"idle"}`` without a row, else the row's view."""
        row = self._rows.get(slug)
        if row is None:
            return {"slug": slug, "state": IDLE}
        self._expire_dead_holder(row)
        return row.view()

    def in_progress(self) -> int:
        """Mints still minting or waiting for consent (what keeps an auto-started host from idling out).

        An adopted warm row counts (the owner is mid-consent); an unclaimed premint does not.
        """
        return sum(1 for row in self._rows.values()
                   if (row.task is not None and not row.task.done())
                   or (row.generation is not None and not row.shared and row.state in LIVE_STATES))

    def _expire_dead_holder(self, row: MintRow) -> None:
        """A waiting row whose process died can never be redeemed: say expired, never serve its URL.

        Audited as the watch loop audits the same expiry, so the record does not depend on
        which reader noticed the death first (the loop's fence then finds the row settled).
        Abstains on a warm row: it owns no process of its own, and an absent one is not a verdict.
        """
        if row.generation is not None:
            return
        if row.state == WAITING and row.runtime is not None and row.runtime.returncode is not None:
            row.state, row.reason, row.oauth_url = EXPIRED, "mint_process_gone", None
            if row.task is not None:
                row.task.cancel()
            self._spawn_background(self._audit(row, None, outcome="expired", reason="mint_process_gone",
                                                url_minted=True))

    # -- writing --

    def start(self, provider: Provider) -> MintRow:
        """Reserve a fresh row (superseding any other) and start its attempt; the row is visible on return."""
        previous = self._rows.pop(provider.slug, None)
        stopping = self._spawn_background(self._stop(previous)) if previous is not None else None
        row = MintRow(slug=provider.slug, token=uuid.uuid4().hex, predecessor=stopping)
        self._rows[provider.slug] = row
        row.task = asyncio.get_running_loop().create_task(self._run(row, provider), name=f"mint-{provider.slug}")
        return row

    async def cancel(self, slug: str, token: str | None = None) -> bool:
        """Dispose the slug's row if it is still ``token``'s (any row when None); True if a live one went."""
        row = self._rows.get(slug)
        if row is None or (token is not None and row.token != token):
            return False
        del self._rows[slug]
        live = row.state in LIVE_STATES
        await self._stop(row)
        return live

    async def cancel_slug(self, slug: str) -> bool:
        """Dispose any mint for ``slug`` (Disconnect's first step); True if a live one was disposed."""
        return await self.cancel(slug, None)

    async def aclose(self) -> None:
        """Dispose every row (gateway shutdown): no held kiro-cli outlives the gateway."""
        rows, self._rows = list(self._rows.values()), {}
        await asyncio.gather(*(self._stop(row) for row in rows), return_exceptions=True)
        for task in list(self._background):
            with contextlib.suppress(BaseException):
                await task

    async def _stop(self, row: MintRow) -> None:
        """Cancel the row's attempt (or warm watcher) and wait until its process and spec are really gone."""
        loop = asyncio.get_running_loop()
        watcher = row.watcher
        if watcher is not None and watcher.get_loop() is loop and not watcher.done():
            watcher.cancel()
        task = row.task
        if task is not None and task.get_loop() is not loop:
            return  # a row left by an event loop that is gone (a restarted gateway): nothing to wait for
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        await asyncio.gather(*row.disposals, return_exceptions=True)

    def _spawn_background(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def _owns(self, row: MintRow) -> bool:
        return self._rows.get(row.slug) is row

    def _settle(self, row: MintRow, state: str, reason: str | None = None) -> bool:
        """Write a terminal state, only while the row is still the table's (the fence)."""
        if not self._owns(row) or row.state not in LIVE_STATES:
            return False
        row.state, row.reason, row.oauth_url = state, reason, None
        return True

    # -- one attempt --

    async def _run(self, row: MintRow, provider: Provider) -> None:
        """Validate an existing grant, else mint (retrying once on a rejected URL), hold, watch."""
        try:
            await self._run_inner(row, provider)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed mint is a coarse reason on the row, never a raise
            log.warning("mint for %s failed: %s", row.slug, type(exc).__name__)
            reason = getattr(exc, "reason", None) or "mint_" + type(exc).__name__.lower()[:32]
            if self._settle(row, FAILED, reason):
                await self._audit(row, provider, outcome="error", reason=reason)

    async def _run_inner(self, row: MintRow, provider: Provider) -> None:
        alias = server_alias(provider.slug)
        if not self._swept:
            self._swept = True
            await asyncio.to_thread(sweep_orphan_specs, set())
        entry = await asyncio.to_thread(mint_entry, provider, alias)
        url = str(entry["url"])
        baseline: tuple[int, int] | None = None
        disproved = False
        if await asyncio.to_thread(grants.grant_presence, url) is True:
            verdict = await self._validate(row, provider, alias, entry)
            if verdict in GRANT_PROVEN_VERDICTS:
                if self._settle(row, GRANTED):
                    await self._audit(row, provider, reason="validated_grant", verdict=verdict)
                return
            disproved = True
            baseline = await asyncio.to_thread(_fingerprint, url)
        attempt = 1
        pair_removed = False
        while attempt <= URL_REJECTION_ATTEMPTS:
            outcome = await self._attempt(row, provider, alias, entry, url, baseline, disproved)
            if outcome == "dead_pair" and not pair_removed:
                # kiro-cli (in its no-re-consent form) refused the pair the validation proved dead and
                # asked for nothing: remove that pair, then spawn once more for a real consent page.
                pair_removed = True
                if not await self._remove_dead_pair(row, provider, url, baseline):
                    return
                baseline, disproved = None, False
                continue
            if outcome != "rejected":
                return
            log.warning("mint for %s: kiro-cli sent a credential-bearing URL (attempt %d)", row.slug, attempt)
            attempt += 1
        if self._settle(row, FAILED, REFUSED_CREDENTIAL):
            await self._audit(row, provider, outcome="error", reason=REFUSED_CREDENTIAL, url_minted=True)

    async def _attempt(self, row: MintRow, provider: Provider, alias: str, entry: Mapping[str, Any], url: str,
                       baseline: tuple[int, int] | None, disproved: bool) -> str:
        """One dedicated process: ``"rejected"`` when its URL failed the gate, else ``"done"``."""
        attempt = await self._spawn(row, provider.slug, alias, entry)
        try:
            request = await self._first_report(attempt, alias)
            if request is None:
                return await self._no_challenge(row, provider, attempt, alias, url, disproved)
            refused = refusal(request, provider)
            if refused == REFUSED_CREDENTIAL:
                return "rejected"  # never recorded: the finally disposes process and spec
            if refused is not None:
                # Another consent page than the provider's own: asking the same server again would
                # send the user to the same page, so the mint ends here (the URL is never recorded).
                if self._settle(row, FAILED, refused):
                    await self._audit(row, provider, outcome="refused", reason=refused, url_minted=True,
                                      approval_host=url_host(request))
                return "done"
            if not self._owns(row) or row.state != MINTING:
                return "done"
            row.state, row.oauth_url, row.url_minted = WAITING, request, True
            await self._audit(row, provider, outcome="ok", reason="awaiting_consent", url_minted=True)
            await self._watch(row, provider, attempt, url, baseline)
            return "done"
        finally:
            await self._dispose(row, attempt)

    async def _spawn(self, row: MintRow, slug: str, alias: str, entry: Mapping[str, Any]) -> _Attempt:
        """Write the spec, start ``kiro-cli acp --agent <spec>``, open one promptless session."""
        from kirocrew_core.acp_runtime import AcpOptions, AcpRuntime

        await self._free_callback_port(row, entry)
        work_dir = mint_work_dir()
        prepared = asyncio.ensure_future(asyncio.to_thread(_prepare, slug, alias, entry, work_dir))
        try:
            name, spec_path = await asyncio.shield(prepared)
        except asyncio.CancelledError:
            # The thread still records and writes the spec: remove it once written, tracked on the row so a
            # cancel returns only after the spec (and its manifest row) are gone.
            self._track_disposal(row, _remove_when_written(prepared))
            raise
        runtime = AcpRuntime(AcpOptions(agent=name, cwd=work_dir, session_timeout=self.ready_timeout,
                                        initialize_timeout=self.ready_timeout))
        try:
            if self._owns(row):
                row.runtime, row.spec_path = runtime, spec_path
            await asyncio.wait_for(runtime.open(), self.ready_timeout)
            # mcpServers [] on purpose: kiro-cli loads the one server from the agent spec.
            session = await runtime.new_session(work_dir, mcp_servers=[])
        except BaseException:
            await _close_quietly(runtime)
            await asyncio.shield(asyncio.to_thread(remove_mint_spec, spec_path))
            raise
        return _Attempt(runtime, session, spec_path)

    async def _free_callback_port(self, row: MintRow, entry: Mapping[str, Any]) -> None:
        """For a fixed callback port: the superseded attempt's listener gone, and nothing else on the port."""
        listener = redirect_listener(entry)
        if listener is None:
            return
        if row.predecessor is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(row.predecessor)
        if not await asyncio.to_thread(port_is_free, *listener):
            raise RedirectPortBusyError(f"port {listener[1]} is in use")

    async def _first_report(self, attempt: _Attempt, alias: str) -> str | None:
        """The approval URL kiro-cli announced for ``alias``, or None when the server settled without one."""
        def settled(state: Any) -> bool:
            status = state.mcp_status.get(alias)
            return alias in state.oauth_servers or (status is not None and status.state in SERVER_SETTLED)

        if not await attempt.session.wait_until(settled, self.ready_timeout):
            raise TimeoutError("kiro-cli did not report the server in time")
        for request in attempt.session.drain_oauth_requests():
            if request.server_name == alias:  # a challenge for another server is not ours to claim
                return request.url
        return None

    async def _no_challenge(self, row: MintRow, provider: Provider, attempt: _Attempt, alias: str, url: str,
                            disproved: bool) -> str:
        """The server settled without a consent: granted if it runs (an open endpoint or a fresh grant).

        ``"dead_pair"`` (nothing settled) when the server failed over a pair the
        validation already disproved: the caller removes that pair and spawns once
        more. A server that *runs* over a disproved pair (it answers, but exposes no
        tools) is ``mint_grant_unproven``: nothing proves it, and it is not dead.
        """
        status = attempt.session.mcp_status.get(alias)
        if status is not None and status.state in _SERVER_FAILED:
            if disproved:
                return "dead_pair"
            state, reason = FAILED, "mint_server_failed"
        elif disproved:
            state, reason = FAILED, "mint_grant_unproven"
        else:
            state, reason = GRANTED, None
        if self._settle(row, state, reason):
            row.url_minted = False
            await self._audit(row, provider, outcome="ok" if state == GRANTED else "error",
                              reason=reason or "no_challenge", url_minted=False)
        return "done"

    async def _remove_dead_pair(self, row: MintRow, provider: Provider, url: str,
                                baseline: tuple[int, int] | None) -> bool:
        """Unlink the pair the validation proved dead (stat + unlink, never open), audited; True to spawn again.

        Only that same pair: one that changed since (a consent landing meanwhile) is
        left alone and the mint ends ``mint_dead_grant_kept``, as does a pair whose
        unlink did not take. A dead pair holds nothing for anyone sharing it; kiro-cli
        itself deletes a refused token before asking again.
        """
        if not self._owns(row) or row.state != MINTING:
            return False
        unlinked = await asyncio.to_thread(_unlink_dead_pair, url, baseline)
        if unlinked is not None:
            removed, surviving = unlinked
            await self._audit(row, provider, outcome="ok" if removed and not surviving else "error",
                              reason="dead_grant_removed", grant_removed=removed, grant_surviving=surviving,
                              url_minted=False)
            if removed and not surviving:
                return True
        if self._settle(row, FAILED, "mint_dead_grant_kept"):
            await self._audit(row, provider, outcome="error", reason="mint_dead_grant_kept", url_minted=False)
        return False

    async def _watch(self, row: MintRow, provider: Provider, attempt: _Attempt, url: str,
                     baseline: tuple[int, int] | None) -> None:
        """Hold the process until the pair appears (or, over a disproved pair, changes) or the TTL passes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.ttl
        while self._owns(row) and row.state == WAITING:
            if await asyncio.to_thread(_granted, url, baseline):
                if self._settle(row, GRANTED):
                    await self._audit(row, provider, reason="grant_observed", url_minted=True)
                return
            if _server_failed(attempt, server_alias(provider.slug)):
                # The consent came back and kiro-cli could not finish it (denied, or the provider refused
                # the client at the token exchange: a wrong client secret); waiting longer cannot help.
                if self._settle(row, FAILED, "mint_consent_failed"):
                    await self._audit(row, provider, outcome="error", reason="mint_consent_failed",
                                      url_minted=True)
                return
            if attempt.runtime.returncode is not None:
                if self._settle(row, EXPIRED, "mint_process_gone"):
                    await self._audit(row, provider, outcome="expired", reason="mint_process_gone",
                                      url_minted=True)
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                if self._settle(row, EXPIRED, "mint_ttl_elapsed"):
                    await self._audit(row, provider, outcome="expired", reason="mint_ttl_elapsed", url_minted=True)
                return
            version = _status_version(attempt.session)
            # Woken early by kiro's own report (the server initializes once the exchange is done).
            await attempt.session.wait_until(lambda s: _status_version(s) != version,  # noqa: B023 - awaited here
                                             min(self.poll, remaining))

    async def _validate(self, row: MintRow, provider: Provider, alias: str, entry: Mapping[str, Any]) -> str:
        """The Test classifier's verdict on an existing pair, through the same single-server session."""
        classify = _classifier()
        if classify is None:
            return "unavailable"
        try:
            attempt = await self._spawn(row, provider.slug, alias, entry)
        except Exception as exc:  # noqa: BLE001 - any spawn failure is the 'failed' verdict
            log.info("grant validation for %s could not start: %s", provider.slug, type(exc).__name__)
            return "failed"
        try:
            async def inventory() -> list[Any] | None:
                await self._first_report(attempt, alias)
                if alias in attempt.session.oauth_servers:
                    return None  # kiro-cli asked for consent: the pair does not answer, no inventory needed
                return [await attempt.session.execute_command("/mcp"),
                        await attempt.session.execute_command("/tools")]

            results = await asyncio.wait_for(inventory(), self.ready_timeout)
            if results is None:
                return "consent_requested"
            return str(classify([result.data for result in results], alias).verdict)
        except Exception as exc:  # noqa: BLE001 - any inventory failure is the 'failed' verdict
            log.info("grant validation for %s did not answer: %s", provider.slug, type(exc).__name__)
            return "failed"
        finally:
            await self._dispose(row, attempt)

    def _track_disposal(self, row: MintRow, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        row.disposals.append(task)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _dispose(self, row: MintRow, attempt: _Attempt) -> None:
        """Release the process (and with it the listener and verifier) and the spec, even when cancelled.

        The teardown is its own task, tracked on the row, so a cancelled attempt
        cannot abandon it half-way and :meth:`_stop` can wait for it to finish.
        """
        task = asyncio.get_running_loop().create_task(self._teardown(row, attempt))
        row.disposals.append(task)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        await asyncio.shield(task)

    async def _teardown(self, row: MintRow, attempt: _Attempt) -> None:
        try:
            await _close_quietly(attempt.runtime)
        finally:
            try:
                await asyncio.to_thread(remove_mint_spec, attempt.spec_path)
            finally:
                if row.runtime is attempt.runtime:
                    row.runtime, row.spec_path = None, None

    async def audit(self, row: MintRow, provider: Provider | None, *, outcome: str = "ok", **fields: Any) -> None:
        """A ``connections_oauth_mint`` event for a row the warm engine settles (same rules as the cold path's)."""
        await self._audit(row, provider, outcome=outcome, **fields)

    def audit_soon(self, row: MintRow, provider: Provider | None, *, outcome: str = "ok", **fields: Any) -> None:
        """:meth:`audit` in the background (tracked; :meth:`aclose` waits for it): a click need not wait on fsync."""
        self._spawn_background(self._audit(row, provider, outcome=outcome, **fields))

    async def _audit(self, row: MintRow, provider: Provider | None, *, outcome: str = "ok", **fields: Any) -> None:
        """One ``connections_oauth_mint`` SEL event; best-effort: an SEL outage must not fail the mint.

        A tracked task, so cancelling the attempt right after it settled (a
        Cancel, a shutdown) does not lose the record of how it settled.
        """
        from kirocrew_core import audit

        slug, state = row.slug, row.state  # as settled now, whatever the row becomes before the write

        def write() -> None:
            try:
                audit.record(AUDIT_EVENT, actor="owner", outcome=outcome, slug=slug, state=state, **fields)
            except Exception as exc:  # noqa: BLE001 - auditing is best-effort off the event loop
                log.warning("could not audit the mint of %s: %s", row.slug, exc)

        task = asyncio.get_running_loop().create_task(asyncio.to_thread(write))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        await asyncio.shield(task)


async def _remove_when_written(prepared: asyncio.Future[tuple[str, Path]]) -> None:
    try:
        _name, path = await prepared
    except Exception:  # noqa: BLE001 - nothing was written, so nothing to remove
        return  # nothing was written (a failed record leaves at most a harmless row)
    await asyncio.to_thread(remove_mint_spec, path)


def _prepare(slug: str, alias: str, entry: Mapping[str, Any], work_dir: Path) -> tuple[str, Path]:
    ensure_private_dirs()
    return write_mint_spec(slug, alias, entry)


def _fingerprint(url: str) -> tuple[int, int] | None:
    """``(mtime_ns, size)`` of the token file (stat only), None when it cannot be stat-ed."""
    token, _registration = grants.artifact_paths(url)
    try:
        st = os.stat(token)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _unlink_dead_pair(url: str, baseline: tuple[int, int] | None) -> tuple[bool, list[str]] | None:
    """``(removed, labels surviving)`` for the pair at ``url``; None (nothing tried) unless it is still ``baseline``.

    Under the ``connections`` lock, so a Disconnect's transaction never sees it half done.
    """
    from kirocrew_core.locks import named_lock

    from kirocrew_connections.disconnect import revoke_local_grants

    with named_lock("connections"):
        if baseline is None or _fingerprint(url) != baseline:
            return None
        return revoke_local_grants([grants.grant_key(url)])


def _granted(url: str, baseline: tuple[int, int] | None) -> bool:
    """The pair is present and, over a pair already disproved, is not that same pair."""
    if grants.grant_presence(url) is not True:
        return False
    return baseline is None or _fingerprint(url) != baseline


def _server_failed(attempt: _Attempt, alias: str) -> bool:
    status = attempt.session.mcp_status.get(alias)
    return status is not None and status.state in _SERVER_FAILED


def _status_version(state: Any) -> tuple[Any, ...]:
    return tuple(sorted((name, s.state) for name, s in state.mcp_status.items()))


async def _close_quietly(runtime: AcpRuntime) -> None:
    try:
        await runtime.aclose()
    except Exception as exc:  # noqa: BLE001 - closing is best-effort
        log.warning("closing a mint's kiro-cli failed: %s", exc)


def _classifier() -> Any:
    """The Test action's classifier (``liveness``), imported lazily; None when it is not installed."""
    try:
        from kirocrew_connections.liveness import classify
    except ImportError:
        return None
    return classify


_engine: MintEngine | None = None


def mint_engine() -> MintEngine:
    """The process-wide engine, created on first use (never at gateway boot)."""
    global _engine
    if _engine is None:
        _engine = MintEngine()
    return _engine


def mints_in_progress() -> int:
    """How many mints the process-wide engine is running (0 when it was never created)."""
    return _engine.in_progress() if _engine is not None else 0


async def aclose_engine() -> None:
    """Dispose every mint if the engine was ever created (the gateway's shutdown; creates nothing)."""
    if _engine is not None:
        await _engine.aclose()
