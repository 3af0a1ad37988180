"""L0: every provider's PUBLIC OAuth metadata still matches the committed ``l0_expectations``.

``kirocrew connections l0`` (or ``python -m kirocrew_connections.metadata_check``). Unauthenticated
GETs only, no redirect followed, ``Accept-Encoding: identity`` (a compressed body
is refused), at most 16 KiB read per document:

1. Protected-resource metadata (RFC 9728) from ``/.well-known/oauth-protected-resource``
   + the MCP path, then from the origin root. ``resource`` must cover the MCP
   origin (a string, or an array as GitLab serves); ``authorization_servers[0]``
   is the advertised issuer, reported but never fetched.
2. Authorization-server metadata (RFC 8414) from ``/.well-known/oauth-authorization-server``
   + the COMMITTED issuer's path (trailing slash stripped). ``issuer`` must equal
   the committed string exactly (RFC 8414 §2 compares issuers as strings, so a
   trailing-slash disagreement fails by design); ``authorization_endpoint`` and
   ``token_endpoint`` must be https on a public host. DCR = ``registration_endpoint``
   present; PKCE = ``S256`` in ``code_challenge_methods_supported``.

The committed expectations live in the registry (``registry.json``'s
``l0_expectations``), so there is no second data file to drift from it. Strict
mode (the default) fails on any difference, an advertised issuer included.
``--record`` captures DCR/PKCE and stamps ``verified_on`` with today's UTC date
into ``--baselines`` (one provider object per line, for a maintainer to commit);
it never moves ``authorization_server``: a different advertised issuer is
reported as NEEDS APPROVAL and fails the run.

``--state FILE`` turns on the drift gate: a provider fails the run only after
``--drift-threshold`` consecutive failed runs, so one flaky night does not page
anyone; ``--prior-run-expected`` makes a missing state file fatal (a lost CI cache
must not silently reset the count).

``--override-origin ORIGIN=URL`` sends requests meant for ``ORIGIN`` to ``URL``
instead (a staging mirror, or the loopback fixture servers of the tests); every
check still runs against the logical URLs, and the report lists the overrides so
such a run is never mistaken for a real gate. L1 takes the same option.

The report and the exit status are :mod:`kirocrew_connections.gate_report`'s, the same
for L1 and the combined ``kirocrew connections gates``; :func:`run_l0_lane` is the run
both commands share, :func:`finish` the way every one of them ends.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import click

from kirocrew_core.errors import BadInputError
from kirocrew_core.origin_overrides import OriginOverrides, parse_overrides

from kirocrew_connections.disconnect import DEFAULT_PORTS, split_url

if TYPE_CHECKING:
    from kirocrew_connections.registry import Provider

RUNG = "l0"
SCOPE = "static-metadata"
DEFAULT_REPORT = "connections-l0-report.json"
DEFAULT_BASELINES = "connections-l0-baselines.json"
DEFAULT_CONCURRENCY = 4
DEFAULT_TIMEOUT_SECS = 10.0
DEFAULT_DRIFT_THRESHOLD = 2
MAX_BODY_BYTES = 16 * 1024
STATE_SCHEMA_VERSION = 1
PRM_WELL_KNOWN = "/.well-known/oauth-protected-resource"
AS_WELL_KNOWN = "/.well-known/oauth-authorization-server"

CHECK_PRM = "protected_resource_metadata"
CHECK_AS = "authorization_server_metadata"
CHECK_DCR = "dcr_expectation"
CHECK_PKCE = "pkce_expectation"

GATE_IMMEDIATE = "immediate"
GATE_DRIFT = "drift"
GATE_FATAL = "fatal"

PASS = "PASS"
DRIFTING = "DRIFTING"
FAIL = "FAIL"
VERDICTS = (PASS, DRIFTING, FAIL)

_F = TypeVar("_F", bound=Callable[..., Any])


# -- shared with L1: origin overrides, provider selection, reports, standalone runs ----------


def _parse_overrides(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> OriginOverrides:
    try:
        return parse_overrides(values)
    except BadInputError as exc:
        raise click.BadParameter(exc.message) from None


def origin_override_option(function: _F) -> _F:
    """The ``--override-origin ORIGIN=URL`` option (repeatable) of both L0 and L1."""
    return click.option(
        "--override-origin", "origin_overrides", multiple=True, callback=_parse_overrides,
        metavar="ORIGIN=URL",
        help="Send requests for ORIGIN to URL instead (a mirror or a test fixture); listed in the report.",
    )(function)


def run_options(*, report: str, concurrency: int, timeout: float | None, at_once: str) -> Callable[[_F], _F]:
    """``--report``, ``--concurrency`` and ``--timeout`` of L0, L1 and gates (each with its defaults).

    ``timeout`` None (the combined run) leaves each rung its own default.
    """
    per_request = "Seconds per request; a provider's whole budget is 3x this + 1."
    options = (
        click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path),
                     default=report, show_default=True, help="Where to write the JSON report."),
        click.option("--concurrency", type=click.IntRange(min=1), default=concurrency, show_default=True,
                     help=at_once),
        click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=timeout,
                     show_default=timeout is not None,
                     help=per_request if timeout is not None else per_request + " [default: each rung's own]"),
    )

    def apply(function: _F) -> _F:
        for option in reversed(options):
            function = option(function)
        return function

    return apply


def select_providers(slugs: Iterable[str] = (), pm: Any = None) -> tuple[Provider, ...]:
    """Every registry provider (hidden ones too: L0 watches them), or the named ones in registry order.

    Raises :class:`~kirocrew_core.errors.BadInputError` (``unknown_provider``) for an unknown slug.
    """
    from kirocrew_connections.registry import load_registry

    registry = load_registry(pm)
    wanted = list(dict.fromkeys(s.strip().lower() for s in slugs))
    for slug in wanted:
        registry.get(slug)
    return tuple(p for p in registry.all() if not wanted or p.slug in wanted)


def write_report(path: Path, report: Mapping[str, Any]) -> None:
    """Write ``report`` atomically; a report that cannot be written fails the command."""
    from kirocrew_core.errors import KirocrewError
    from kirocrew_core.jsonfile import write_json_atomic

    try:
        write_json_atomic(path, dict(report))
    except OSError as exc:
        raise KirocrewError(f"cannot write the report {path}: {exc.strerror or exc}",
                            code="report_unwritable", exit_code=4) from None


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def run_standalone(command: click.Command) -> None:
    """Run ``command`` as ``python -m`` does, printing a KirocrewError as the kirocrew CLI does."""
    from kirocrew_core.errors import KirocrewError

    try:
        result = command.main(standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KirocrewError as exc:
        print(f"kirocrew: error[{exc.code}]: {exc.message}", file=sys.stderr)
        sys.exit(exc.exit_code)
    sys.exit(result if isinstance(result, int) else 0)


# -- fetching -----------------------------------------------------------------------------------


class _FetchError(Exception):
    """A metadata document could not be obtained; the message is the check's error."""


async def fetch_json(client: Any, url: str, overrides: OriginOverrides) -> Any:
    """GET ``url`` (no redirect, identity encoding, ≤16 KiB) and parse it as JSON."""
    import httpx

    headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
    try:
        async with client.stream("GET", overrides.apply(url), headers=headers) as response:
            status = response.status_code
            if 300 <= status < 400:
                raise _FetchError(f"{url}: HTTP {status} redirect (not followed)")
            if status != 200:
                raise _FetchError(f"{url}: HTTP {status}")
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise _FetchError(f"{url}: compressed response ({encoding}) refused")
            body = bytearray()
            async for chunk in response.aiter_raw():
                body += chunk
                if len(body) > MAX_BODY_BYTES:
                    raise _FetchError(f"{url}: body larger than {MAX_BODY_BYTES} bytes")
    except httpx.TimeoutException:
        raise _FetchError(f"{url}: timed out") from None
    except httpx.HTTPError as exc:
        raise _FetchError(f"{url}: {type(exc).__name__}") from None
    try:
        return json.loads(bytes(body).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise _FetchError(f"{url}: not a JSON document") from None


def prm_urls(mcp_url: str) -> list[str]:
    """Where the protected-resource metadata may be: path-suffixed first, then the origin root."""
    parts = urlsplit(mcp_url)
    origin = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/")
    urls = [origin + PRM_WELL_KNOWN + path] if path else []
    return [*urls, origin + PRM_WELL_KNOWN]


def as_metadata_url(issuer: str) -> str:
    """RFC 8414 §3.1: the well-known segment goes between the host and the issuer's path."""
    parts = urlsplit(issuer)
    return f"{parts.scheme}://{parts.netloc}{AS_WELL_KNOWN}{parts.path.rstrip('/')}"


def _origin_of(url: object) -> str | None:
    split = split_url(url) if isinstance(url, str) else None
    if split is None:
        return None
    parts, port, host = split
    default = DEFAULT_PORTS.get(parts.scheme.lower())
    suffix = f":{port}" if port is not None and port != default else ""
    return f"{parts.scheme.lower()}://{host.lower()}{suffix}"


def _public_https(value: object) -> bool:
    from kirocrew_connections.registry import is_local_host

    if not isinstance(value, str) or not value.startswith("https://"):
        return False
    try:
        host = urlsplit(value).hostname
    except ValueError:
        return False
    return bool(host) and not is_local_host(host or "")


# -- one provider ----------------------------------------------------------------------------------


@dataclass
class L0Result:
    """What L0 found about one provider."""

    slug: str
    name: str
    mcp_url: str
    expected: dict[str, Any]
    checks: list[dict[str, Any]] = field(default_factory=list)
    observed: dict[str, Any] = field(default_factory=lambda: {"authorization_server": None,
                                                              "dcr": None, "pkce": None})
    needs_approval: bool = False
    duration_ms: int = 0

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c["ok"] for c in self.checks)

    def check(self, name: str, ok: bool, error: str = "") -> None:
        entry: dict[str, Any] = {"name": name, "ok": ok, "observed": dict(self.observed)}
        if error:
            entry["error"] = error
        self.checks.append(entry)

    def as_dict(self) -> dict[str, Any]:
        out = {"slug": self.slug, "name": self.name, "mcp_url": self.mcp_url, "ok": self.ok,
               "expected": self.expected, "observed": dict(self.observed), "checks": self.checks,
               "duration_ms": self.duration_ms}
        if self.needs_approval:
            out["needs_approval"] = True
        return out


async def _check_prm(client: Any, provider: Provider, result: L0Result, record: bool,
                     overrides: OriginOverrides) -> None:
    errors: list[str] = []
    document: Any = None
    for url in prm_urls(provider.mcp_url):
        try:
            document = await fetch_json(client, url, overrides)
            break
        except _FetchError as exc:
            errors.append(str(exc))
    if not isinstance(document, dict):
        result.check(CHECK_PRM, False, "; ".join(errors) or "the metadata is not a JSON object")
        return
    servers = document.get("authorization_servers")
    advertised = servers[0] if isinstance(servers, list) and servers and isinstance(servers[0], str) else None
    result.observed["authorization_server"] = advertised
    resources = document.get("resource")
    resources = [resources] if isinstance(resources, str) else resources
    mcp_origin = _origin_of(provider.mcp_url)
    if not isinstance(resources, list) or not any(_origin_of(r) == mcp_origin for r in resources):
        result.check(CHECK_PRM, False, f"resource does not cover {mcp_origin}")
    elif advertised is None:
        result.check(CHECK_PRM, False, "authorization_servers names no issuer")
    elif advertised != provider.l0.authorization_server:
        result.needs_approval = record
        label = "NEEDS APPROVAL: " if record else ""
        result.check(CHECK_PRM, False, f"{label}advertised issuer {advertised!r} is not the committed "
                                       f"{provider.l0.authorization_server!r}")
    else:
        result.check(CHECK_PRM, True)


async def _check_as(client: Any, provider: Provider, result: L0Result, record: bool,
                    overrides: OriginOverrides) -> None:
    committed = provider.l0.authorization_server
    try:
        document = await fetch_json(client, as_metadata_url(committed), overrides)
    except _FetchError as exc:
        document, error = None, str(exc)
    else:
        error = "" if isinstance(document, dict) else "the metadata is not a JSON object"
    if isinstance(document, dict):
        methods = document.get("code_challenge_methods_supported")
        result.observed["dcr"] = isinstance(document.get("registration_endpoint"), str) and bool(
            document["registration_endpoint"])
        result.observed["pkce"] = isinstance(methods, list) and "S256" in methods
        if document.get("issuer") != committed:
            error = f"issuer {document.get('issuer')!r} is not the committed {committed!r}"
        else:
            bad = [name for name in ("authorization_endpoint", "token_endpoint")
                   if not _public_https(document.get(name))]
            if bad:
                error = f"{' and '.join(bad)} must be https on a public host"
    result.check(CHECK_AS, not error, error)
    unavailable = "authorization server metadata unavailable"
    for name, key, expected in ((CHECK_DCR, "dcr", provider.l0.dcr), (CHECK_PKCE, "pkce", provider.l0.pkce)):
        seen = result.observed[key]
        if error:
            result.check(name, False, unavailable)
        elif record or seen == expected:
            result.check(name, True)
        else:
            result.check(name, False, f"{key} is {str(seen).lower()}, expected {str(expected).lower()}")


async def probe_provider(provider: Provider, *, timeout: float, record: bool = False,
                         overrides: OriginOverrides | None = None) -> L0Result:
    """Run the four checks for one provider; never raises for a provider-side problem."""
    import httpx

    started = time.monotonic()
    l0 = provider.l0
    result = L0Result(provider.slug, provider.name, provider.mcp_url, expected={
        "authorization_server": l0.authorization_server, "dcr": l0.dcr, "pkce": l0.pkce,
        "verified_on": l0.verified_on.isoformat()})
    routes = overrides or OriginOverrides()
    budget = timeout * 3 + 1
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(timeout), follow_redirects=False,
                                     trust_env=False) as client, asyncio.timeout(budget):
            await _check_prm(client, provider, result, record, routes)
            await _check_as(client, provider, result, record, routes)
    except TimeoutError:
        done = {c["name"] for c in result.checks}
        for name in (CHECK_PRM, CHECK_AS, CHECK_DCR, CHECK_PKCE):
            if name not in done:
                result.check(name, False, f"exceeded its total timeout of {budget:g}s")
    for check in result.checks:  # every check carries what the whole probe observed
        check["observed"] = dict(result.observed)
    result.duration_ms = int((time.monotonic() - started) * 1000)
    return result


async def run_l0(providers: Sequence[Provider], *, timeout: float = DEFAULT_TIMEOUT_SECS,
                 concurrency: int = DEFAULT_CONCURRENCY, record: bool = False,
                 overrides: OriginOverrides | None = None) -> list[L0Result]:
    """Probe ``providers``, at most ``concurrency`` at once; results in registry order."""
    gate = asyncio.Semaphore(concurrency)

    async def one(provider: Provider) -> L0Result:
        async with gate:
            return await probe_provider(provider, timeout=timeout, record=record, overrides=overrides)

    return list(await asyncio.gather(*(one(p) for p in providers)))


# -- record mode ------------------------------------------------------------------------------------


def baselines(results: Sequence[L0Result], today: date) -> list[dict[str, Any]]:
    """New ``l0_expectations`` for every provider whose AS metadata was read; the issuer never moves."""
    out = []
    for result in results:
        as_check = next((c for c in result.checks if c["name"] == CHECK_AS), None)
        if as_check is None or not as_check["ok"]:
            continue
        entry: dict[str, Any] = {"slug": result.slug, "l0_expectations": {
            "authorization_server": result.expected["authorization_server"],
            "dcr": result.observed["dcr"], "pkce": result.observed["pkce"],
            "verified_on": today.isoformat()}}
        if result.needs_approval:
            entry["needs_approval"] = {"advertised_authorization_server": result.observed["authorization_server"]}
        out.append(entry)
    return out


def write_baselines(path: Path, entries: Sequence[Mapping[str, Any]]) -> None:
    """A JSON array, one provider object per line, so a review diff shows one line per provider."""
    from kirocrew_core.errors import KirocrewError
    from kirocrew_core.jsonfile import write_bytes_atomic

    lines = ",\n".join(json.dumps(e, ensure_ascii=False, sort_keys=True) for e in entries)
    text = "[\n" + lines + "\n]\n" if entries else "[]\n"
    try:
        write_bytes_atomic(path, text.encode("utf-8"))
    except OSError as exc:
        raise KirocrewError(f"cannot write the baselines {path}: {exc.strerror or exc}",
                            code="baselines_unwritable", exit_code=4) from None


# -- the drift gate ------------------------------------------------------------------------------------


class StateError(Exception):
    """The drift state cannot be used; the run is fatal rather than silently reset."""


def load_state(path: Path, *, prior_run_expected: bool) -> dict[str, int]:
    """Consecutive failures per slug from the state file (absent: none, unless a prior run is expected)."""
    from kirocrew_core.jsonfile import ReadState, read_json

    read = read_json(path)
    if read.state in (ReadState.ABSENT, ReadState.EMPTY):
        if prior_run_expected:
            raise StateError(f"state file {path} is missing but --prior-run-expected was given")
        return {}
    if not read.known:
        raise StateError(f"state file {path} is {read.state.value}: {read.error}")
    document = read.document
    providers = document.get("providers") if isinstance(document, dict) else None
    if not isinstance(providers, dict):
        raise StateError(f"state file {path} has no providers object")
    out: dict[str, int] = {}
    for slug, entry in providers.items():
        count = entry.get("consecutive_failures") if isinstance(entry, dict) else None
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise StateError(f"state file {path}: provider {slug!r} has no valid consecutive_failures")
        out[slug] = count
    return out


def advance_state(previous: Mapping[str, int], results: Sequence[L0Result]) -> dict[str, int]:
    """A failure adds one to the provider's count, a pass resets it; unprobed providers keep theirs."""
    counts = dict(previous)
    for result in results:
        counts[result.slug] = 0 if result.ok else counts.get(result.slug, 0) + 1
    return counts


def save_state(path: Path, counts: Mapping[str, int]) -> None:
    from kirocrew_core.jsonfile import write_json_atomic

    write_json_atomic(path, {"schema_version": STATE_SCHEMA_VERSION, "updated_at": utc_now_iso(),
                             "providers": {slug: {"consecutive_failures": n}
                                           for slug, n in sorted(counts.items())}})


# -- the report -------------------------------------------------------------------------------------------


def staleness(providers: Sequence[Provider], today: date, *, enforced: bool) -> dict[str, Any]:
    """Baselines past the warn window; what to do about them is the ``stale-baselines`` runbook row."""
    from kirocrew_connections import gate_report as gr
    from kirocrew_connections.registry import L0_VERIFICATION_WARN_AGE_DAYS, stale_l0_baselines

    overdue = stale_l0_baselines(providers, today, L0_VERIFICATION_WARN_AGE_DAYS)
    return {"warn_after_days": L0_VERIFICATION_WARN_AGE_DAYS, "enforced": enforced,
            "overdue": [p.slug for p in overdue], "runbook": gr.RUNBOOK_STALE_BASELINES if overdue else None}


def _row(result: L0Result, tripped: bool | None) -> dict[str, Any]:
    """``result`` as a report row: ``tripped`` is None under the immediate gate, else whether drift tripped."""
    from kirocrew_connections import gate_report as gr

    reason = next((c["error"] for c in result.checks if not c["ok"] and c.get("error")), None)
    if result.ok:
        verdict, runbook = PASS, None
    else:
        verdict = FAIL if tripped is None or tripped else DRIFTING
        runbook = (gr.RUNBOOK_L0_NEEDS_APPROVAL if result.needs_approval
                   else gr.RUNBOOK_TOTAL_TIMEOUT if reason and gr.TOTAL_TIMEOUT_TEXT in reason
                   else gr.RUNBOOK_L0_DRIFT)
    return {"rung": RUNG, "slug": result.slug, "name": result.name, "verdict": verdict, "reason": reason,
            "runbook": runbook, **result.as_dict()}


def build_report(results: Sequence[L0Result], providers: Sequence[Provider], *, today: date,
                 fail_on_stale: bool, started_at: str, drift: Mapping[str, Any] | None = None,
                 overrides: OriginOverrides | None = None) -> dict[str, Any]:
    """The report; a finding follows the gate (immediate: any failure; drift: one past the threshold)."""
    from kirocrew_connections import gate_report as gr

    tripped = set(drift["tripped"]) if drift is not None else None
    rows = [_row(r, None if tripped is None else r.slug in tripped) for r in results]
    stale = staleness(providers, today, enforced=fail_on_stale)
    extra = [stale["runbook"]] if stale["runbook"] else []
    finding = any(r["verdict"] == FAIL for r in rows) or bool(fail_on_stale and stale["overdue"])
    report = gr.envelope(RUNG, started_at=started_at, finished_at=utc_now_iso(),
                         exit_status=gr.EXIT_FINDING if finding else gr.EXIT_GREEN, vocabulary=VERDICTS,
                         rows=rows, runbook=extra)
    report.update(scope=SCOPE, gate=GATE_IMMEDIATE if drift is None else GATE_DRIFT,
                  exercised_count=len(rows), staleness=stale)
    if drift is not None:
        report["drift"] = dict(drift)
    if overrides:
        report["origin_overrides"] = overrides.as_dict()
    return report


def fatal_report(code: str, message: str, *, started_at: str,
                 overrides: OriginOverrides | None = None) -> dict[str, Any]:
    """The report of a run whose configuration (the registry, the drift state) could not be used."""
    from kirocrew_connections import gate_report as gr

    report = gr.config_error(RUNG, started_at=started_at, finished_at=utc_now_iso(), vocabulary=VERDICTS,
                             code=code, message=message)
    report.update(scope=SCOPE, gate=GATE_FATAL, exercised_count=0)
    if overrides:
        report["origin_overrides"] = overrides.as_dict()
    return report


# -- the run ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class L0Options:
    """What one L0 run was asked to do (the command's options, shared with ``kirocrew connections gates``)."""

    concurrency: int = DEFAULT_CONCURRENCY
    timeout: float = DEFAULT_TIMEOUT_SECS
    state_path: Path | None = None
    drift_threshold: int = DEFAULT_DRIFT_THRESHOLD
    prior_run_expected: bool = False
    record: bool = False
    baselines_path: Path = Path(DEFAULT_BASELINES)
    fail_on_stale: bool = False
    slugs: tuple[str, ...] = ()
    overrides: OriginOverrides = field(default_factory=OriginOverrides)


def run_l0_lane(options: L0Options) -> dict[str, Any]:
    """One L0 run as a report (``exit_status`` in it); writes the state and baselines, not the report.

    A usage error (an unknown slug, ``--prior-run-expected`` without ``--state``) raises
    :class:`~kirocrew_core.errors.BadInputError`; a configuration that cannot be used (the
    registry, the drift state) is a report with exit status 2; a state or baselines file
    that cannot be written is one with exit status 4 (the probes ran, the report says what they found).
    """
    from kirocrew_core.errors import BadInputError, KirocrewError

    from kirocrew_connections import gate_report as gr

    started_at = utc_now_iso()
    if options.prior_run_expected and options.state_path is None:
        raise BadInputError("--prior-run-expected needs --state", code="bad_option")
    try:
        providers = select_providers(options.slugs)
        previous = (load_state(options.state_path, prior_run_expected=options.prior_run_expected)
                    if options.state_path else None)
    except StateError as exc:
        return fatal_report("l0_state_unusable", str(exc), started_at=started_at, overrides=options.overrides)
    except BadInputError:
        raise
    except KirocrewError as exc:
        return fatal_report(exc.code, exc.message, started_at=started_at, overrides=options.overrides)
    today = datetime.now(UTC).date()
    results = asyncio.run(run_l0(providers, timeout=options.timeout, concurrency=options.concurrency,
                                 record=options.record, overrides=options.overrides))
    drift = None
    unwritable: KirocrewError | None = None
    if options.state_path is not None and previous is not None:
        counts = advance_state(previous, results)
        try:
            save_state(options.state_path, counts)
        except OSError as exc:
            unwritable = KirocrewError(f"cannot write the state {options.state_path}: {exc.strerror or exc}",
                                       code="state_unwritable")
        probed = {r.slug for r in results}
        drift = {"threshold": options.drift_threshold,
                 "consecutive_failures": {s: n for s, n in sorted(counts.items()) if s in probed},
                 "tripped": sorted(s for s, n in counts.items() if s in probed and n >= options.drift_threshold)}
    report = build_report(results, providers, today=today, fail_on_stale=options.fail_on_stale,
                          started_at=started_at, drift=drift, overrides=options.overrides)
    if options.record:
        entries = baselines(results, today)
        try:
            write_baselines(options.baselines_path, entries)
        except KirocrewError as exc:
            unwritable = exc
        else:
            report["baselines"] = {"path": str(options.baselines_path), "recorded": [e["slug"] for e in entries]}
    if unwritable is not None:
        report.update(ok=False, exit_status=gr.EXIT_INFRASTRUCTURE, outcome=gr.OUTCOMES[gr.EXIT_INFRASTRUCTURE],
                      runbook=sorted({*report["runbook"], gr.RUNBOOK_WRITE_FAILED}),
                      fatal_error={"code": unwritable.code, "message": unwritable.message})
    return report


def summary_lines(report: Mapping[str, Any]) -> list[str]:
    """What the command prints for an L0 report (the combined run prints it too)."""
    if "fatal_error" in report and not report["rows"]:
        return [f"FAILED: nothing checked: {report['fatal_error']['message']}"]
    lines = [f"{row['verdict']:<8} {row['slug']}" + (f" ({row['reason']})" if row["reason"] else "")
             for row in report["rows"]]
    if report["staleness"]["overdue"]:
        lines.append(f"stale baselines (>{report['staleness']['warn_after_days']} days): "
                     + ", ".join(report["staleness"]["overdue"]))
    if "fatal_error" in report:
        lines.append(f"error: {report['fatal_error']['message']}")
    failed = report["verdict_counts"][FAIL] + report["verdict_counts"][DRIFTING]
    lines.append(("ok: " if report["ok"] else "FAILED: ") + f"{failed} of {len(report['rows'])} failed "
                 f"(gate {report['gate']})")
    return lines


def finish(report_path: Path, report: Mapping[str, Any], lines: Sequence[str],
           warnings: Sequence[str] = ()) -> None:
    """Write the report, print ``warnings`` (stderr) and ``lines``, exit with the report's status.

    Shared by L0, L1 and the combined run, so every path ends the same way; a report
    that cannot be written ends it with status 4 after the verdicts were printed.
    """
    from kirocrew_core.errors import KirocrewError

    for warning in warnings:
        click.echo(warning, err=True)
    for line in lines[:-1]:
        click.echo(line)
    write_report(report_path, report)
    click.echo(f"{lines[-1]}; report: {report_path}" if lines else f"report: {report_path}")
    status = int(report["exit_status"])
    if "fatal_error" in report:
        fatal = report["fatal_error"]
        raise KirocrewError(fatal["message"], code=fatal["code"], exit_code=status)
    if status:
        raise click.exceptions.Exit(status)


# -- the command --------------------------------------------------------------------------------------------


@click.command("l0")
@run_options(report=DEFAULT_REPORT, concurrency=DEFAULT_CONCURRENCY, timeout=DEFAULT_TIMEOUT_SECS,
             at_once="Providers probed at once.")
@click.option("--state", "state_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Consecutive-failure state file: enables the drift gate.")
@click.option("--drift-threshold", type=click.IntRange(min=1), default=DEFAULT_DRIFT_THRESHOLD,
              show_default=True, help="With --state: consecutive failed runs before a provider fails the gate.")
@click.option("--prior-run-expected", is_flag=True,
              help="With --state: a missing state file is fatal instead of a fresh start.")
@click.option("--record", is_flag=True,
              help="Capture DCR/PKCE and stamp verified_on into --baselines; never moves the issuer.")
@click.option("--baselines", "baselines_path", type=click.Path(dir_okay=False, path_type=Path),
              default=DEFAULT_BASELINES, show_default=True, help="With --record: where the new baselines go.")
@click.option("--fail-on-stale", is_flag=True,
              help="Fail when a baseline is older than the warn window (60 days).")
@click.option("--slug", "slugs", multiple=True, help="Only this provider (repeatable).")
@origin_override_option
def l0_command(report_path: Path, concurrency: int, timeout: float, state_path: Path | None,
               drift_threshold: int, prior_run_expected: bool, record: bool, baselines_path: Path,
               fail_on_stale: bool, slugs: tuple[str, ...], origin_overrides: OriginOverrides) -> None:
    """Check providers' public OAuth metadata (RFC 9728, RFC 8414) against the committed expectations.

    Exit status: 0 green, 1 a finding, 2 usage or configuration error, 4 a file could not be written.
    """
    report = run_l0_lane(L0Options(
        concurrency=concurrency, timeout=timeout, state_path=state_path, drift_threshold=drift_threshold,
        prior_run_expected=prior_run_expected, record=record, baselines_path=baselines_path,
        fail_on_stale=fail_on_stale, slugs=slugs, overrides=origin_overrides))
    finish(report_path, report, summary_lines(report))


if __name__ == "__main__":
    run_standalone(l0_command)
