"""L1: a tokenless smoke of every configured provider that holds a grant.

``kirocrew connections l1`` (or ``python -m kirocrew_connections.endpoint_smoke``).

Kirocrew holds no token: kiro-cli keeps the grant and injects the bearer inside
its own process. So the exchange opened here (``initialize`` →
``notifications/initialized`` → ``tools/list``, never ``tools/call``) carries no
credential for a managed provider, and a healthy authorized provider answers
with an OAuth challenge. Verdicts follow from that:

* ``PASS`` (depth ``tools_list``): the exchange ran and the registry's smoke
  fixture tool is still advertised (an entry with its own credential, or an
  open server).
* ``GRANT_HELD`` (depth ``challenge``): a tokenless 401/403 carrying a Bearer
  ``WWW-Authenticate`` challenge. A challenge is not a failure: grading it
  otherwise would hold the lane permanently red.
* ``NEEDS_RECONSENT``: a credential this process presented was refused, or a
  JSON-RPC error names an authorization failure. A human must re-approve.
* ``FAIL``: anything else — a 403 without a challenge (an edge proxy or a geo
  block reads the same, and a consent verdict would send a human to re-approve
  a healthy grant), a redirect (never followed: it would carry headers to
  another origin), a non-2xx, a timeout, a broken ``tools/list``, a missing
  fixture tool.
* ``SKIPPED``: no entry for the provider in the MCP scopes, an entry whose
  endpoint is not the registry's (a slug is a label anyone can collide with;
  the endpoint is what is talked to), a disabled entry, or no grant. L1 never
  initiates consent.

The wire is kirocrew-mcp's one HTTP MCP client
(:class:`kirocrew_mcp.public.HttpMcpChannel`, which the MCP probe uses too);
L1 passes its own status judge and keeps its verdicts.

Grant presence is :func:`kirocrew_core.grants.grant_presence` itself (a stat
of the paired artifacts, never opened) on the entry's URL, the one kiro-cli
keys the grant on. It emits no SEL read audit: this is an operator's own CLI.
``--min-exercised N`` turns a run that exercised fewer than N providers into a
vacuous one (exit status 3), since an all-SKIPPED run establishes nothing. The
report and exit statuses are :mod:`kirocrew_connections.gate_report`'s.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kirocrew_core import grants
from kirocrew_mcp.public import (
    HttpMcpChannel,
    ProbeFailure,
    ServerRow,
    bearer_challenge,
    discover,
    expand_headers,
    finish_error,
    has_placeholder,
    header_source_env,
    url_secrets,
)

from kirocrew_connections.disconnect import normalized_endpoint
from kirocrew_connections.metadata_check import (
    finish,
    origin_override_option,
    run_options,
    run_standalone,
    select_providers,
    utc_now_iso,
)

if TYPE_CHECKING:
    from kirocrew_core.origin_overrides import OriginOverrides

    from kirocrew_connections.registry import Provider

RUNG = "l1"
DEFAULT_REPORT = "connections-l1-report.json"
DEFAULT_CONCURRENCY = 4
DEFAULT_TIMEOUT_SECS = 20.0
PROTOCOL_VERSION = "2024-11-05"
CLIENT_INFO = {"name": "kirocrew-l1-smoke", "version": "0.1.0"}
MAX_ERROR_CHARS = 200
MAX_REPLY_BYTES = 4 * 1024 * 1024
MAX_TOOL_PAGES = 20

PASS = "PASS"
GRANT_HELD = "GRANT_HELD"
NEEDS_RECONSENT = "NEEDS_RECONSENT"
FAIL = "FAIL"
SKIPPED = "SKIPPED"
VERDICTS = (PASS, GRANT_HELD, NEEDS_RECONSENT, FAIL, SKIPPED)
DEPTH_TOOLS_LIST = "tools_list"
DEPTH_CHALLENGE = "challenge"
DEPTH_NONE = "none"

_AUTH_ERROR = re.compile(r"unauthori[sz]ed|invalid_token|invalid_grant|forbidden", re.IGNORECASE)

__all__ = ["l1_command", "normalized_endpoint", "run_l1", "smoke_provider", "build_report"]


# -- endpoint identity ---------------------------------------------------------------
# ``normalized_endpoint`` (from disconnect.py, the one definition) keeps the query and
# ignores a trailing slash: it names the server an entry talks to, not its grant file.


# -- rows and the report --------------------------------------------------------------


@dataclass
class L1Row:
    """One provider's verdict; ``errors`` are redacted, then cut to 200 characters."""

    slug: str
    name: str
    verdict: str = SKIPPED
    depth: str = DEPTH_NONE
    installed: bool = False
    grant_present: bool | None = None
    credential_presented: bool = False
    fixture_tool: str = ""
    fixture_tool_advertised: bool | None = None
    tools_listed: int | None = None
    errors: list[str] = field(default_factory=list)
    duration_ms: int = 0


def _row(row: L1Row) -> dict[str, Any]:
    """``row`` as a report row: its first error is the reason, and a red verdict names its runbook key."""
    from kirocrew_connections import gate_report as gr

    reason = row.errors[0] if row.errors else None
    runbook = None
    if row.verdict == NEEDS_RECONSENT:
        runbook = gr.RUNBOOK_NEEDS_RECONSENT
    elif row.verdict == FAIL:
        timed_out = reason is not None and gr.TOTAL_TIMEOUT_TEXT in reason
        runbook = gr.RUNBOOK_TOTAL_TIMEOUT if timed_out else gr.RUNBOOK_L1_FAIL
    return {"rung": RUNG, "slug": row.slug, "name": row.name, "verdict": row.verdict, "reason": reason,
            "runbook": runbook, **asdict(row)}


def build_report(rows: Sequence[L1Row], *, min_exercised: int, started_at: str,
                 overrides: OriginOverrides | None = None) -> dict[str, Any]:
    """The report: a finding is a FAIL or NEEDS_RECONSENT; too few exercised rows are vacuous."""
    from kirocrew_connections import gate_report as gr

    exercised = sum(1 for r in rows if r.verdict != SKIPPED)
    vacuous = exercised < min_exercised
    if any(r.verdict in (FAIL, NEEDS_RECONSENT) for r in rows):
        status = gr.EXIT_FINDING
    else:
        status = gr.EXIT_VACUOUS if vacuous else gr.EXIT_GREEN
    report = gr.envelope(RUNG, started_at=started_at, finished_at=utc_now_iso(), exit_status=status,
                         vocabulary=VERDICTS, rows=[_row(r) for r in rows],
                         runbook=[gr.RUNBOOK_VACUOUS] if vacuous else [])
    report.update(exercised_count=exercised, min_exercised=min_exercised, vacuous=vacuous)
    if overrides:
        report["origin_overrides"] = overrides.as_dict()
    return report


# -- configured entries ------------------------------------------------------------------


def configured_entries(pm: Any = None) -> tuple[dict[str, ServerRow], list[str]]:
    """Every MCP server the scopes (and the rendered agent file) declare, by alias and raw key.

    Also the sources discovery could not use: a provider declared only there reads
    as not configured, and the report says why rather than hiding it.
    """
    found = discover(pm=pm)
    out: dict[str, ServerRow] = {}
    for row in found.rows:
        for key in (row.name, *row.keys):
            out.setdefault(key, row)
    return out, [problem.message() for problem in found.problems]


# -- the exchange ----------------------------------------------------------------------------


class _Verdict(Exception):
    """Ends a provider's exchange with a verdict (raised from deep inside the exchange)."""

    def __init__(self, verdict: str, message: str = "", *, depth: str = DEPTH_NONE) -> None:
        super().__init__(message)
        self.verdict = verdict
        self.depth = depth


def _judge(credential: bool) -> Callable[[str, Any], None]:
    """L1's reading of a non-2xx answer (the channel's ``judge_status``); see the module docstring."""

    def judge(method: str, response: Any) -> None:
        status = response.status_code
        if 200 <= status < 300:
            return
        if status in (401, 403):
            if credential:
                raise _Verdict(NEEDS_RECONSENT, f"{method}: HTTP {status}: the presented credential was refused")
            if bearer_challenge(response.headers):
                raise _Verdict(GRANT_HELD, depth=DEPTH_CHALLENGE)
            raise _Verdict(FAIL, f"{method}: HTTP {status} without an authentication challenge")
        if 300 <= status < 400:
            raise _Verdict(FAIL, f"{method}: HTTP {status} redirect (not followed)")
        raise _Verdict(FAIL, f"{method}: HTTP {status}")

    return judge


async def _call(channel: HttpMcpChannel, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """One request's result; a JSON-RPC error naming an authorization failure means re-consent."""
    reply = await channel.request(method, params)
    error = reply.get("error")
    if error is not None:
        text = json.dumps(error) if not isinstance(error, str) else error
        if _AUTH_ERROR.search(text):
            raise _Verdict(NEEDS_RECONSENT, f"{method}: authorization error: {text}")
        raise _Verdict(FAIL, f"{method}: JSON-RPC error: {text}")
    result = reply.get("result")
    if not isinstance(result, dict):
        raise _Verdict(FAIL, f"{method}: the reply has no result")
    return result


async def _run_exchange(channel: HttpMcpChannel, row: L1Row) -> None:
    await _call(channel, "initialize", {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                                        "clientInfo": dict(CLIENT_INFO)})
    await channel.notify("notifications/initialized", PROTOCOL_VERSION, strict=True)
    names: list[str] = []
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        result = await _call(channel, "tools/list", {"cursor": cursor} if cursor else {})
        tools = result.get("tools")
        if not isinstance(tools, list):
            raise _Verdict(FAIL, "tools/list: malformed reply (no tools list)")
        names += [t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)]
        cursor = result.get("nextCursor") if isinstance(result.get("nextCursor"), str) else None
        if not cursor:
            break
    row.tools_listed = len(set(names))
    row.fixture_tool_advertised = row.fixture_tool in names
    if not row.fixture_tool_advertised:
        raise _Verdict(FAIL, f"fixture tool {row.fixture_tool!r} is no longer advertised",
                       depth=DEPTH_TOOLS_LIST)
    raise _Verdict(PASS, depth=DEPTH_TOOLS_LIST)


async def smoke_provider(provider: Provider, entry: ServerRow | None, *, timeout: float,
                         overrides: OriginOverrides | None = None) -> L1Row:
    """One provider's verdict. Never raises for a provider-side problem; never calls a tool."""
    import httpx

    started = time.monotonic()
    row = L1Row(slug=provider.slug, name=provider.name, fixture_tool=provider.smoke_tool)

    def done(verdict: str, message: str = "", depth: str = DEPTH_NONE,
             secrets: Sequence[str] = ()) -> L1Row:
        row.verdict, row.depth = verdict, depth
        if message:
            row.errors.append(finish_error(message, secrets, limit=MAX_ERROR_CHARS))
        row.duration_ms = int((time.monotonic() - started) * 1000)
        return row

    if entry is None or not entry.is_remote or not entry.url:
        return done(SKIPPED, "not a configured remote MCP server here")
    row.installed = True
    # An entry Connect installed under ``serve --override-origin`` holds the routed URL: the same override
    # given to L1 makes it the provider's (and the grant it stats is the one that entry's consent wrote).
    endpoints = {normalized_endpoint(provider.mcp_url),
                 normalized_endpoint(overrides.apply(provider.mcp_url) if overrides else provider.mcp_url)}
    if normalized_endpoint(entry.url) not in endpoints:
        return done(SKIPPED, "the configured entry's endpoint is not the registry mcp_url",
                    secrets=url_secrets(entry.url))
    if entry.disabled:
        return done(SKIPPED, "the configured entry is disabled")
    try:
        present = await asyncio.to_thread(grants.grant_presence, entry.url)
    except ValueError:
        present = None
    row.grant_present = present
    if present is not True:
        why = "no grant for this endpoint" if present is False else "grant presence could not be determined"
        return done(SKIPPED, why)

    url = entry.url.strip()
    sent, resolved = expand_headers(entry.headers, header_source_env())
    secrets = [*url_secrets(url), *sent.values(), *resolved]
    authorization = next((v for k, v in sent.items() if k.lower() == "authorization"), "")
    row.credential_presented = bool(authorization.strip()) and not has_placeholder(authorization)
    target = overrides.apply(url) if overrides else url
    budget = timeout * 3 + 1
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(timeout), follow_redirects=False,
                                     trust_env=False) as client:
            channel = HttpMcpChannel(client, target, sent, judge_status=_judge(row.credential_presented),
                                     max_reply_bytes=MAX_REPLY_BYTES)
            try:
                async with asyncio.timeout(budget):
                    await _run_exchange(channel, row)
            except TimeoutError:
                return done(FAIL, f"exceeded its total timeout of {budget:g}s", secrets=secrets)
    except _Verdict as verdict:
        return done(verdict.verdict, str(verdict), verdict.depth, secrets)
    except ProbeFailure as failure:  # a reply the channel could not use
        return done(FAIL, str(failure), secrets=secrets)
    except httpx.TimeoutException:
        return done(FAIL, f"timed out after {timeout:g}s", secrets=secrets)
    except httpx.HTTPError as exc:
        return done(FAIL, f"{type(exc).__name__}: {exc}", secrets=secrets)
    return done(FAIL, "the exchange ended without a verdict", secrets=secrets)  # pragma: no cover


async def run_l1(providers: Sequence[Provider], entries: Mapping[str, ServerRow], *,
                 timeout: float = DEFAULT_TIMEOUT_SECS, concurrency: int = DEFAULT_CONCURRENCY,
                 overrides: OriginOverrides | None = None) -> list[L1Row]:
    """Smoke ``providers`` (at most ``concurrency`` at once), rows in registry order."""
    gate = asyncio.Semaphore(concurrency)

    async def one(provider: Provider) -> L1Row:
        async with gate:
            return await smoke_provider(provider, entries.get(provider.slug), timeout=timeout,
                                        overrides=overrides)

    return list(await asyncio.gather(*(one(p) for p in providers)))


# -- the run -------------------------------------------------------------------------------


def run_l1_lane(*, concurrency: int = DEFAULT_CONCURRENCY, timeout: float = DEFAULT_TIMEOUT_SECS,
                min_exercised: int = 0, slugs: Sequence[str] = (),
                overrides: OriginOverrides | None = None) -> dict[str, Any]:
    """One L1 run as a report (``exit_status`` in it); writes nothing.

    An unknown slug raises :class:`~kirocrew_core.errors.BadInputError`; a registry that
    cannot be used is a report with exit status 2 and no rows.
    """
    from kirocrew_core.errors import BadInputError, KirocrewError

    from kirocrew_connections import gate_report as gr

    started_at = utc_now_iso()
    try:
        providers = select_providers(slugs)
        entries, problems = configured_entries()
    except BadInputError:
        raise
    except KirocrewError as exc:
        report = gr.config_error(RUNG, started_at=started_at, finished_at=utc_now_iso(), vocabulary=VERDICTS,
                                 code=exc.code, message=exc.message)
        report.update(exercised_count=0, min_exercised=min_exercised, vacuous=False)
        return report
    rows = asyncio.run(run_l1(providers, entries, timeout=timeout, concurrency=concurrency, overrides=overrides))
    report = build_report(rows, min_exercised=min_exercised, started_at=started_at, overrides=overrides)
    if problems:
        report["unusable_sources"] = problems
    return report


def warnings(report: Mapping[str, Any]) -> list[str]:
    """What the command prints to stderr for an L1 report: the MCP sources it could not use."""
    return [f"warning: MCP source not usable, its entries are missing: {problem}"
            for problem in report.get("unusable_sources", ())]


def summary_lines(report: Mapping[str, Any]) -> list[str]:
    """What the command prints for an L1 report (the combined run prints it too)."""
    if "fatal_error" in report:
        return [f"FAILED: nothing checked: {report['fatal_error']['message']}"]
    lines = []
    for row in report["rows"]:
        detail = f" ({row['reason']})" if row["reason"] else ""
        lines.append(f"{row['verdict']:<16} {row['slug']} [{row['depth']}]{detail}")
    counts = report["verdict_counts"]
    summary = (f"{report['exercised_count']} exercised, {counts[PASS]} pass, {counts[GRANT_HELD]} grant held, "
               f"{counts[NEEDS_RECONSENT]} needs reconsent, {counts[FAIL]} failed, {counts[SKIPPED]} skipped")
    if report["vacuous"]:
        summary += f"; vacuous: fewer than --min-exercised {report['min_exercised']}"
    lines.append(("ok: " if report["ok"] else "FAILED: ") + summary)
    return lines


# -- the command -----------------------------------------------------------------------------


@click.command("l1")
@run_options(report=DEFAULT_REPORT, concurrency=DEFAULT_CONCURRENCY, timeout=DEFAULT_TIMEOUT_SECS,
             at_once="Providers smoked at once.")
@click.option("--min-exercised", type=click.IntRange(min=0), default=0, show_default=True,
              help="Exit 3 (vacuous) unless at least N providers were exercised (not SKIPPED).")
@click.option("--slug", "slugs", multiple=True, help="Only this provider (repeatable).")
@origin_override_option
def l1_command(report_path: Path, concurrency: int, timeout: float, min_exercised: int,
               slugs: tuple[str, ...], origin_overrides: OriginOverrides) -> None:
    """Tokenless smoke of configured providers holding a grant; never calls a tool.

    Exit status: 0 green, 1 a finding, 2 usage or configuration error, 3 vacuous, 4 the report could not be written.
    """
    report = run_l1_lane(concurrency=concurrency, timeout=timeout, min_exercised=min_exercised, slugs=slugs,
                         overrides=origin_overrides)
    finish(report_path, report, summary_lines(report), warnings(report))


if __name__ == "__main__":
    run_standalone(l1_command)
