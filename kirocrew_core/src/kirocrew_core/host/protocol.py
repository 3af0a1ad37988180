"""The host socket's wire format, shared by the host, the relay and the CLI twins (standard library only).

A connection opens with one JSON line from the client, the *hello*, and one JSON
line back from the host. What follows depends on the hello's ``kind``:

``mcp``
    ``{"kirocrew": "hello", "version": 1, "kind": "mcp", "server": "<name or command>",
    "fingerprint": "<code fingerprint>", "caller": {<caller block>}}``. The host answers
    ``{"kirocrew": "welcome", "version": 1, "server": "<name>", "pid": …, "fingerprint": …,
    "retiring": bool}`` and the connection becomes one MCP session: JSON-RPC messages, one per
    line, as on stdio. ``server`` is a hosted server's name (``kirocrew-conversations``) or the
    ``kirocrew`` subcommand that relays to it (``mcp-conversations``).
``ping``
    The host answers a *pong* (:data:`PONG`: pid, fingerprint, start time, dashboard address
    without the token, connections, what keeps it busy) and closes.
``stop``
    The host answers ``{"kirocrew": "stopping", "pid": …}``, closes, and shuts down gracefully.

A refusal is ``{"kirocrew": "refused", "code": "<stable code>", "message": "…"}``, then close.

The *caller block* travels in ``params._meta["kirocrew.caller"]`` of every request the relay
forwards (any block the MCP client sent is replaced) and in the hello::

    {"schemaVersion": 1, "sessionKey": "<KIROCREW_SESSION_KEY or empty>", "sessionType": "relay",
     "relayPid": <the relay's pid>, "hostPid": <the MCP host process, the relay's parent>,
     "hostPidEnv": <KIROCREW_HOST_PID as a number, or null>}

``hostPidEnv`` is the pid the process kirocrew launched kiro-cli through exported for itself
(it survives a sandbox that renumbers pids); the host checks it, never trusts it
(:mod:`kirocrew_core.coretools.identity`). Unknown fields are ignored; only a change that is
not additive bumps ``schemaVersion``.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False  # not typing's: the relay imports this module, and typing costs it 1.5-2 ms
if TYPE_CHECKING:
    from typing import Any

VERSION = 1
TAG = "kirocrew"
HELLO = "hello"
WELCOME = "welcome"
REFUSED = "refused"
PONG = "pong"
STOPPING = "stopping"

KIND_MCP = "mcp"
KIND_PING = "ping"
KIND_STOP = "stop"
KINDS = frozenset({KIND_MCP, KIND_PING, KIND_STOP})

CALLER_META_KEY = "kirocrew.caller"
CALLER_SCHEMA_VERSION = 1
SESSION_TYPE_RELAY = "relay"
SESSION_TYPE_CLI = "cli"
# The variables the host gives every kiro-cli it starts, which a relay or CLI twin repeats in its caller block:
# claims the host compares with the caller's ancestry, never proof (kirocrew_core.coretools.identity).
SESSION_KEY_ENV = "KIROCREW_SESSION_KEY"
HOST_PID_ENV = "KIROCREW_HOST_PID"

# A message sent to the host may be this long (the relay answers a longer client line itself; the host
# closes a connection that sends one). The largest real request, a conversation's 200,000-character
# message, is at most ~1.2 MB of JSON.
MAX_LINE_BYTES = 4 * 1024 * 1024
# What every connection of one host may hold at once, together: lines partly received and requests
# not yet answered. A connection that would pass it is closed, with the reason in the host's log.
MAX_HELD_BYTES = 32 * 1024 * 1024
# A line the host sends may be this long (its own answers: the relay and the CLI read up to it).
MAX_REPLY_LINE_BYTES = 64 * 1024 * 1024
# A hello is small; the host reads at most this much before it answers.
MAX_HELLO_BYTES = 64 * 1024

# JSON-RPC error code the relay uses for requests the host could not answer (host gone, unavailable).
RELAY_ERROR_CODE = -32000


def encode(message: dict[str, Any]) -> bytes:
    """One line of the wire: compact JSON (non-ASCII kept) and a newline."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def hello(kind: str, **fields: Any) -> bytes:
    return encode({"kirocrew": HELLO, "version": VERSION, "kind": kind, **fields})


def refusal(code: str, message: str) -> bytes:
    return encode({"kirocrew": REFUSED, "code": code, "message": message})


def caller_block(session_key: str, session_type: str, relay_pid: int, host_pid: int,
                 host_pid_env: int | None = None) -> dict[str, Any]:
    """The caller block a relay (or a CLI twin) stamps on every request it forwards."""
    return {
        "schemaVersion": CALLER_SCHEMA_VERSION,
        "sessionKey": session_key,
        "sessionType": session_type,
        "relayPid": relay_pid,
        "hostPid": host_pid,
        "hostPidEnv": host_pid_env,
    }


def env_pid(raw: str | None) -> int | None:
    """A pid read from an environment variable (digits only, positive), else None."""
    if not raw or not raw.isdigit() or len(raw) > 10:
        return None
    pid = int(raw)
    return pid if pid > 0 else None


def is_request(message: Any) -> bool:
    """A JSON-RPC request (a method and an id), as opposed to a notification or a response."""
    return isinstance(message, dict) and "method" in message and "id" in message


def stamp_caller(message: Any, block: dict[str, Any]) -> bool:
    """Replace any caller block in a JSON-RPC *request* with ``block``; True when ``message`` is a request.

    Notifications and responses are left alone (only requests carry a caller). A request whose
    ``params`` is absent gets ``{"_meta": {…}}``; one whose ``params`` or ``_meta`` is not an
    object is left for the server to refuse as invalid.
    """
    if not is_request(message):
        return False
    params = message.get("params")
    if params is None:
        params = message["params"] = {}
    if not isinstance(params, dict):
        return True
    meta = params.get("_meta")
    if meta is None:
        meta = params["_meta"] = {}
    if isinstance(meta, dict):
        meta[CALLER_META_KEY] = block
    return True


def rpc_error(request_id: Any, code: str, message: str, *, retryable: bool = False) -> bytes:
    """A JSON-RPC error answering ``request_id``, carrying the stable ``code`` in the text and in ``data``."""
    return encode({
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": RELAY_ERROR_CODE, "message": f"error[{code}]: {message}",
                  "data": {"code": code, "retryable": retryable}},
    })
