"""What both probe transports share: the result, the three-call handshake, and redaction.

:mod:`kirocrew_mcp.probe` (stdio, and the entry points) and
:mod:`kirocrew_mcp.probe_http` (streamable HTTP) both import this module and
neither imports the other's internals, so the two transports no longer form an
import cycle. :mod:`kirocrew_mcp.probe` re-exports every public name here, so
``kirocrew_mcp.probe.ProbeResult`` and friends stay where callers know them.

- ``ProbeResult`` / ``ProbeFailure`` / ``failed``: what a probe found.
- ``Handshake`` and ``run_handshake(request, notify)``: initialize (with one
  protocol fallback), ``notifications/initialized``, ``tools/list`` (all pages).
- Redaction: ``redact``, ``finish_error``; placeholders: ``expand_placeholders``,
  ``has_placeholder``; ``is_credential_name`` (core's secret vocabulary,
  :mod:`kirocrew_core.redaction`) marks a variable whose value never feeds a
  header that leaves the machine.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from kirocrew_core.redaction import is_credential_name as is_credential_name  # re-exported for both transports

STATUS_UNKNOWN = "unknown"
STATUS_OK = "ok"
STATUS_ERROR = "error"
STATUS_PROBING = "probing"
STATUS_OUTDATED = "outdated"
STATUS_DISABLED = "disabled"
STATUS_NEEDS_AUTH = "needs_auth"
STATUSES = (STATUS_UNKNOWN, STATUS_OK, STATUS_ERROR, STATUS_PROBING, STATUS_OUTDATED,
            STATUS_DISABLED, STATUS_NEEDS_AUTH)

# The newest revision we offer in initialize; an older one is negotiated on a -32602/-32022 refusal.
PROBE_PROTOCOL_VERSION = "2025-11-25"
HANDSHAKE_PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
CLIENT_INFO = {"name": "kirocrew-probe", "version": "0.1.0"}
# tools/list pages followed before the listing is cut (a server paging forever must still end).
MAX_TOOL_PAGES = 20
# What an error may carry at all.
MAX_ERROR_CHARS = 1200
REDACTED = "[redacted]"
# Shorter values are not redacted: replacing every "1" or "on" would garble the message, and a
# value that short protects nothing.
MIN_REDACTED_CHARS = 4

_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_PLACEHOLDER = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)\}")
_BEARER_VALUE = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{4,}")


@dataclass(frozen=True)
class ProbeResult:
    """What one probe found. ``tools`` are names in the server's order."""

    status: str
    tools: tuple[str, ...] = ()
    error: str = ""
    protocol_version: str = ""
    server_info: Mapping[str, Any] = field(default_factory=dict)
    capabilities: Mapping[str, Any] = field(default_factory=dict)
    tool_annotations: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    auth_challenge: bool = False
    probe_mode: str = "handshake"
    probed_at: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready, camelCase like the dashboard's rows."""
        return {
            "status": self.status,
            "tools": list(self.tools),
            "error": self.error,
            "protocolVersion": self.protocol_version,
            "serverInfo": dict(self.server_info),
            "capabilities": dict(self.capabilities),
            "toolAnnotations": {k: dict(v) for k, v in self.tool_annotations.items()},
            "authChallenge": self.auth_challenge,
            "probeMode": self.probe_mode,
            "probedAt": self.probed_at,
        }


class ProbeFailure(Exception):
    """A probe that ended in ``error`` (or ``needs_auth``); the message is shown to the user."""

    def __init__(self, message: str, *, status: str = STATUS_ERROR, auth_challenge: bool = False,
                 http_status: int | None = None, pipe_closed: bool = False):
        super().__init__(message)
        self.pipe_closed = pipe_closed
        self.status = status
        self.auth_challenge = auth_challenge
        self.http_status = http_status


# -- small shared helpers ------------------------------------------------------


def is_muted(spec: Mapping[str, Any] | None) -> bool:
    """True when ``spec`` says ``disabled`` with anything but ``false`` (fail closed, as kiro-cli)."""
    return isinstance(spec, Mapping) and "disabled" in spec and spec["disabled"] is not False


def is_remote(spec: Mapping[str, Any]) -> bool:
    """A ``url`` and no ``command``: probed over HTTP. Both present: the command wins, as in kiro-cli."""
    command = spec.get("command")
    has_command = isinstance(command, str) and bool(command.strip())
    return not has_command and isinstance(spec.get("url"), str) and bool(spec["url"].strip())


def expand_placeholders(value: str, source: Mapping[str, str]) -> tuple[str, list[str]]:
    """Expand ``${VAR}`` / ``${env:VAR}`` from ``source``; a miss stays literal (kiro-cli does the same).

    Returns the expanded text and every value substituted, one by one: a value
    like ``Bearer ${TOKEN}`` sends the token as a fragment, and redaction has to
    know the fragment as well as the whole.
    """
    resolved: list[str] = []

    def substitute(match: re.Match[str]) -> str:
        hit = source.get(match.group(1))
        if hit is None:
            return match.group(0)
        resolved.append(hit)
        return hit

    return _PLACEHOLDER.sub(substitute, value), resolved


def has_placeholder(value: object) -> bool:
    return isinstance(value, str) and _PLACEHOLDER.search(value) is not None


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret value (and its URL-encoded form) and any bearer value replaced."""
    variants: set[str] = set()
    for secret in secrets:
        if isinstance(secret, str) and len(secret.strip()) >= MIN_REDACTED_CHARS:
            variants.update({secret, secret.strip(), quote(secret, safe=""), quote(secret)})
    for value in sorted(variants, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return _BEARER_VALUE.sub(lambda m: f"{m.group(1)} {REDACTED}", text)


def finish_error(message: str, secrets: Iterable[str], *, limit: int = MAX_ERROR_CHARS) -> str:
    """Redact, then cut to ``limit``: cutting first could leave half a secret behind the cut's edge."""
    text = redact(message, secrets)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def fallback_protocol_version(reply: Mapping[str, Any], offered: str) -> str | None:
    """The newest older revision a server names when it refuses ours (-32602 / -32022), else None."""
    error = reply.get("error")
    if not isinstance(error, dict) or error.get("code") not in (-32602, -32022):
        return None
    data = error.get("data")
    supported = data.get("supported") if isinstance(data, dict) else None
    if not isinstance(supported, list):
        return None
    # Revisions are ISO dates, so an older one compares lower.
    older = [v for v in supported if isinstance(v, str) and _ISO_DATE.fullmatch(v) and v < offered]
    return max(older, default=None)


def initialize_request(request_id: int, version: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": dict(CLIENT_INFO)}}


def rpc_error_text(method: str, reply: Mapping[str, Any]) -> str:
    error = reply.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        code = error.get("code")
        text = message if isinstance(message, str) and message else "error"
        return f"{method}: {text}" + (f" (code {code})" if isinstance(code, int) else "")
    return f"{method}: error reply"


@dataclass
class Handshake:
    """What initialize and tools/list returned, gathered across both transports."""

    protocol_version: str = ""
    server_info: dict[str, Any] = field(default_factory=dict)
    capabilities: dict[str, Any] = field(default_factory=dict)
    tools: list[str] = field(default_factory=list)
    annotations: dict[str, dict[str, Any]] = field(default_factory=dict)

    def take_initialize(self, reply: Mapping[str, Any], offered: str) -> None:
        result = reply.get("result")
        if not isinstance(result, dict):
            raise ProbeFailure("initialize: the reply has no result")
        version = result.get("protocolVersion")
        self.protocol_version = version if isinstance(version, str) and version else offered
        info = result.get("serverInfo")
        self.server_info = dict(info) if isinstance(info, dict) else {}
        caps = result.get("capabilities")
        self.capabilities = dict(caps) if isinstance(caps, dict) else {}

    def take_tools_page(self, reply: Mapping[str, Any]) -> str | None:
        """Add one tools/list page; return the next cursor, if any."""
        if "error" in reply:
            raise ProbeFailure(rpc_error_text("tools/list", reply))
        result = reply.get("result")
        tools = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(tools, list):
            # No list is a broken server, not an empty one.
            raise ProbeFailure("tools/list: malformed reply (no tools list)")
        for tool in tools:
            name = tool.get("name") if isinstance(tool, dict) else None
            if isinstance(name, str) and name and name not in self.tools:
                self.tools.append(name)
                annotations = tool.get("annotations")
                if isinstance(annotations, dict) and annotations:
                    self.annotations[name] = dict(annotations)
        cursor = result.get("nextCursor") if isinstance(result, dict) else None
        return cursor if isinstance(cursor, str) and cursor else None

    def result(self) -> ProbeResult:
        return ProbeResult(
            STATUS_OK, tuple(self.tools), "", self.protocol_version, self.server_info,
            self.capabilities, self.annotations, probed_at=time.time(),
        )


def failed(message: str, *, status: str = STATUS_ERROR, auth_challenge: bool = False) -> ProbeResult:
    return ProbeResult(status, error=message, auth_challenge=auth_challenge, probed_at=time.time())


async def run_handshake(request: Any, notify: Any) -> Handshake:
    """initialize (with one protocol fallback), notifications/initialized, tools/list (all pages).

    ``request(method, params, message=None)`` returns the reply object;
    ``notify(method, protocol_version)`` sends a notification. Shared by both transports.
    """
    shake = Handshake()
    offered = PROBE_PROTOCOL_VERSION
    reply = await request("initialize", {}, message=initialize_request(0, offered))
    older = fallback_protocol_version(reply, offered)
    if older is not None:
        offered = older
        reply = await request("initialize", {}, message=initialize_request(0, offered))
    if "error" in reply:
        raise ProbeFailure(rpc_error_text("initialize", reply))
    shake.take_initialize(reply, offered)
    await notify("notifications/initialized", shake.protocol_version)
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        params: dict[str, Any] = {"cursor": cursor} if cursor else {}
        cursor = shake.take_tools_page(await request("tools/list", params))
        if cursor is None:
            break
    return shake
