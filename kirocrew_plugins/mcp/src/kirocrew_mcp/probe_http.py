"""Probing a streamable-HTTP MCP server: initialize, initialized, tools/list over POST.

Entry point: ``probe_remote(name, spec, *, timeout) -> ProbeResult`` (called by
:func:`kirocrew_mcp.probe.probe_server_async`; see there for why the wire is ours).
:class:`HttpMcpChannel` is the one HTTP MCP client: ``kirocrew connections l1``
talks through it too, with its own status judge. What both probe transports
share comes from :mod:`kirocrew_mcp.handshake`, so this module never imports
:mod:`kirocrew_mcp.probe`.

- Replies may be ``application/json`` or ``text/event-stream``; from a stream
  the reply carrying our request id is taken, server notifications skipped.
- ``Mcp-Session-Id`` from initialize and the negotiated ``MCP-Protocol-Version``
  ride on every later request; the session is closed with DELETE at the end.
- A refused protocol revision (-32602 / -32022 with ``data.supported``) is
  retried once with the newest older one the server names.
- 401, or 403 with a ``WWW-Authenticate`` challenge, is ``needs_auth`` with no
  error: kiro-cli holds the OAuth grant, the probe never does. It is an error
  instead when the probe did present a credential (a resolved ``Authorization``
  header; for a plain 401 without a challenge, any configured header that
  resolved), because then the user's credential was refused.
- Header values expand ``${VAR}`` / ``${env:VAR}`` from our environment minus
  every credential-named variable (:func:`kirocrew_mcp.handshake.is_credential_name`):
  a header leaves the machine, and an entry someone slipped into a scope file
  must not be able to mail ``${AWS_SECRET_ACCESS_KEY}`` to a host of its choosing
  just because the dashboard probed it. A miss stays literal, as in kiro-cli.
- Errors are redacted by the exact values sent: every header value, every value
  a placeholder expanded to, and the URL's userinfo, query values and fragment.
- Redirects are not followed (they would carry the headers to another origin),
  and ``trust_env`` is off so no ``.netrc`` credential is attached behind our back.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from kirocrew_mcp.handshake import (
    STATUS_NEEDS_AUTH,
    Handshake,
    ProbeFailure,
    ProbeResult,
    expand_placeholders,
    failed,
    finish_error,
    has_placeholder,
    is_credential_name,
    run_handshake,
)

log = logging.getLogger(__name__)

# A tools/list of a few hundred tools is a few hundred KiB; beyond this it is not a reply.
MAX_REPLY_BYTES = 16 * 1024 * 1024
# Closing the session is a courtesy: it never holds a probe up for long.
SESSION_CLOSE_TIMEOUT_SECS = 2.0
_ACCEPT = "application/json, text/event-stream"


def header_source_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables a header placeholder may read: the environment minus credential names."""
    source = os.environ if environ is None else environ
    return {k: v for k, v in source.items() if not is_credential_name(k)}


def expand_headers(headers: Mapping[str, str], source: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """Headers as sent, and every value a placeholder expanded to (for redaction)."""
    sent: dict[str, str] = {}
    resolved: list[str] = []
    for name, value in headers.items():
        sent[name], substituted = expand_placeholders(value, source)
        resolved.extend(substituted)
    return sent, resolved


def url_secrets(url: str) -> list[str]:
    """The parts of a URL that may hold a credential: userinfo, query values, fragment."""
    parts = urlsplit(url)
    found: list[str] = []
    if parts.password:
        found += [parts.password, unquote(parts.password)]
    if parts.username:
        found += [parts.username, unquote(parts.username)]
    for _, value in parse_qsl(parts.query, keep_blank_values=False):
        found.append(value)
    if parts.query:
        found.append(parts.query)
    if parts.fragment:
        found += [parts.fragment, unquote(parts.fragment)]
    return found


def _challenge(headers: Any) -> str:
    return str(headers.get("www-authenticate", "") or "")


def bearer_challenge(headers: Any) -> bool:
    """A well-formed challenge: a ``WWW-Authenticate`` naming the Bearer scheme."""
    return re.search(r"(?i)(?:^|,)\s*bearer(?:\s|$)", _challenge(headers)) is not None


def _credential_presented(sent: Mapping[str, str], *, any_header: bool) -> bool:
    """Whether the probe presented a credential a refusal can be blamed on.

    An unresolved ``${VAR}`` supplied nothing (the variable is missing or
    credential-filtered), so it never counts.
    """
    for name, value in sent.items():
        if has_placeholder(value) or not value.strip():
            continue
        if any_header or name.lower() == "authorization":
            return True
    return False


class HttpMcpChannel:
    """JSON-RPC over POST to one streamable-HTTP MCP endpoint: the one HTTP MCP client.

    The probe and ``kirocrew connections l1`` both talk through it. It carries
    ``Mcp-Session-Id`` from initialize and the protocol version on every later
    request, reads a reply as JSON or from an event stream (the message that
    answers our id; server notifications skipped) up to ``max_reply_bytes``,
    and raises :class:`ProbeFailure` for a reply it cannot use. A non-2xx
    answer goes to ``judge_status(method, response)``: by default the probe's
    (401/403 is ``needs_auth``, a redirect is never followed); a caller with
    verdicts of its own passes its judge. The client must be built with
    ``follow_redirects=False`` and ``trust_env=False``.
    """

    def __init__(self, client: Any, url: str, headers: Mapping[str, str], *,
                 judge_status: Callable[[str, Any], None] | None = None,
                 max_reply_bytes: int = MAX_REPLY_BYTES) -> None:
        self.client = client
        self.url = url
        self.headers = {**headers, "Accept": _ACCEPT, "Content-Type": "application/json"}
        self.session_id = ""
        self.max_reply_bytes = max_reply_bytes
        self._judge_status = judge_status if judge_status is not None else probe_status
        self._next_id = 0

    async def request(self, method: str, params: Mapping[str, Any], *,
                      message: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Send one request and return the JSON-RPC message that answers it (result or error)."""
        self._next_id += 1
        body: dict[str, Any] = dict(message) if message is not None else {"jsonrpc": "2.0", "method": method,
                                                                          "params": dict(params)}
        body["id"] = self._next_id
        async with self.client.stream("POST", self.url, json=body, headers=self.headers) as response:
            self._judge_status(method, response)
            if method == "initialize":
                session = response.headers.get("mcp-session-id")
                if session:
                    self.session_id = session
                    self.headers["Mcp-Session-Id"] = session
            return await self._reply(method, body["id"], response)

    async def notify(self, method: str, version: str, *, strict: bool = False) -> None:
        """Send a notification. Not ``strict``: its failure is only logged (the request after it
        reports a dead endpoint properly); ``strict``: its status is judged and errors raise."""
        self.headers["MCP-Protocol-Version"] = version
        try:
            async with self.client.stream("POST", self.url, json={"jsonrpc": "2.0", "method": method},
                                          headers=self.headers) as response:
                if strict:
                    self._judge_status(method, response)
                await response.aread()
        except Exception as exc:
            if strict or isinstance(exc, ProbeFailure):
                raise
            log.debug("MCP probe: %s failed: %s", method, type(exc).__name__)

    async def _reply(self, method: str, request_id: int, response: Any) -> dict[str, Any]:
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind == "text/event-stream":
            return await self._reply_from_stream(method, request_id, response)
        if kind in ("application/json", "") or kind.endswith("+json"):
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > self.max_reply_bytes:
                    raise ProbeFailure(f"{method}: reply larger than {self.max_reply_bytes} bytes")
            try:
                reply = json.loads(bytes(body).decode("utf-8", "replace"))
            except json.JSONDecodeError as exc:
                raise ProbeFailure(f"{method}: the reply is not JSON ({exc.msg})") from None
            for message in reply if isinstance(reply, list) else [reply]:
                if isinstance(message, dict) and message.get("id") == request_id:
                    return message
            raise ProbeFailure(f"{method}: the reply does not answer the request")
        raise ProbeFailure(f"{method}: unexpected content type {kind!r}")

    async def _reply_from_stream(self, method: str, request_id: int, response: Any) -> dict[str, Any]:
        data: list[str] = []
        size = 0
        async for line in response.aiter_lines():
            size += len(line)
            if size > self.max_reply_bytes:
                raise ProbeFailure(f"{method}: event stream larger than {self.max_reply_bytes} bytes")
            if line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
                continue
            if line.strip() or not data:
                continue  # event:, id:, retry:, comments; or a blank line with nothing pending
            message = _event_message("\n".join(data))
            data = []
            if isinstance(message, dict) and "method" not in message and message.get("id") == request_id:
                return message
        message = _event_message("\n".join(data)) if data else None
        if isinstance(message, dict) and message.get("id") == request_id:
            return message
        raise ProbeFailure(f"{method}: the event stream ended without a reply")

    async def close(self) -> None:
        if not self.session_id:
            return
        try:
            async with asyncio.timeout(SESSION_CLOSE_TIMEOUT_SECS):
                await self.client.delete(self.url, headers=self.headers)
        except Exception as exc:  # noqa: BLE001 - best effort: the server expires idle sessions anyway
            log.debug("MCP probe: closing the session failed: %s", type(exc).__name__)


def probe_status(method: str, response: Any) -> None:
    """The probe's reading of a non-2xx answer: 401/403 is ``needs_auth``, anything else an error."""
    status = response.status_code
    if 200 <= status < 300:
        return
    if status in (401, 403):
        raise ProbeFailure(f"{method}: HTTP {status}", status=STATUS_NEEDS_AUTH, http_status=status,
                           auth_challenge=bool(_challenge(response.headers)))
    if 300 <= status < 400:
        raise ProbeFailure(f"{method}: HTTP {status} (redirects are not followed)")
    raise ProbeFailure(f"{method}: HTTP {status}")


def _event_message(payload: str) -> Any:
    try:
        return json.loads(payload)
    except json.JSONDecodeError:
        return None


def _valid_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


async def probe_remote(name: str, spec: Mapping[str, Any], *, timeout: float) -> ProbeResult:
    """Probe the streamable-HTTP server at ``spec["url"]`` (see the module docstring)."""
    import httpx

    url = str(spec["url"]).strip()
    secrets = url_secrets(url)
    if not _valid_url(url):
        return failed(finish_error(f"url is not an http(s) URL: {url}", secrets))
    configured = spec.get("headers") or {}
    if not isinstance(configured, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in configured.items()):
        return failed("headers must map names to strings")
    sent, resolved = expand_headers(configured, header_source_env())
    secrets += [*sent.values(), *resolved]

    channel: HttpMcpChannel | None = None
    stage = {"method": "initialize"}
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(timeout), follow_redirects=False,
                                     trust_env=False) as client:
            channel = HttpMcpChannel(client, url, sent)

            async def request(method: str, params: Mapping[str, Any], *,
                              message: Mapping[str, Any] | None = None) -> dict[str, Any]:
                stage["method"] = method
                assert channel is not None
                return await channel.request(method, params, message=message)

            try:
                async with asyncio.timeout(timeout):
                    shake: Handshake = await run_handshake(request, channel.notify)
            finally:
                await channel.close()
        return shake.result()
    except ProbeFailure as exc:
        return _refusal(name, exc, sent, secrets)
    except (TimeoutError, httpx.TimeoutException):
        message = f"{stage['method']}: timed out after {timeout:g}s"
    except httpx.HTTPError as exc:
        message = f"{stage['method']}: {type(exc).__name__}: {exc}"
    message = finish_error(message, secrets)
    log.warning("MCP probe failed [%s]: %s", name, message)
    return failed(message)


def _refusal(name: str, exc: ProbeFailure, sent: Mapping[str, str], secrets: list[str]) -> ProbeResult:
    message = finish_error(str(exc), secrets)
    if exc.status == STATUS_NEEDS_AUTH:
        if exc.http_status == 403 and not exc.auth_challenge:
            message = f"{message} (forbidden, and no authentication challenge)"
        elif _credential_presented(sent, any_header=not exc.auth_challenge):
            message = f"{message} (the configured credentials were refused)"
        else:
            return ProbeResult(STATUS_NEEDS_AUTH, auth_challenge=exc.auth_challenge, probed_at=time.time())
    log.warning("MCP probe failed [%s]: %s", name, message)
    return failed(message, auth_challenge=exc.auth_challenge)
