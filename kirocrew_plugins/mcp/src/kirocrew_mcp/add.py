"""Add a custom MCP server: the one path that declares a NEW server (``POST /api/mcp/servers``, ``kirocrew mcp add``).

Apply (:mod:`kirocrew_mcp.apply`) only moves a server that some scope already
declares; this writes a new one, with the same machinery: the ``crew-mcp``
lock, every file read once, atomic writes through
:func:`kirocrew_mcp.scopes.write_scope_document`, one rebuild, one audit record.
The request::

    {"name": "notes", "command": "npx", "args": ["-y", "notes-mcp"], "env": {"TOKEN": "…"},
     "scopes": ["kirocrew", "kiro"]}
    {"name": "docs", "url": "https://mcp.example.com/mcp", "headers": {"X-Team": "a"},
     "scopes": ["kirocrew"]}

``scopes`` says who sees it: ``kirocrew`` (kirocrew sessions) and any shared
scope id (``kiro``, a seam scope such as ``cc``). The spec goes into each
shared scope named; when none is named it goes into the crew store. Without
``kirocrew`` the crew store gets a ``disabled`` stub, so the shared file's
owner keeps the server and kirocrew sessions do not load it.

Every refusal changes nothing and names the request field at fault
(:attr:`FieldError.field`), so the dashboard shows it at that field: a
hostile or taken name (``invalid_name``, ``server_exists``, ``managed_server``),
a bad command, URL, argument, env or header (``bad_command``,
``bad_url``, ``insecure_url``, ``bad_args``, ``bad_env``, ``bad_headers``; ``bad_request``
for a body with unknown keys), an unknown or unusable scope (``unknown_scope``,
``no_scope``, ``scope_file_malformed``, ``scope_file_unreadable``).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from kirocrew_core.errors import BadInputError, ConflictError, KirocrewError
from kirocrew_core.locks import named_lock

from kirocrew_mcp.aliases import mcp_server_alias
from kirocrew_mcp.apply import (
    EFFECTIVE_KEY,
    LOCK_NAME,
    ApplyOutcome,
    Batch,
    Change,
    ChangeResult,
    audit_event,
    flush,
    name_problem,
    rebuild_result,
)
from kirocrew_mcp.scopes import KIND_CREW, all_scopes

if TYPE_CHECKING:
    from kirocrew_core.plugins import KirocrewPluginManager

AUDIT_ADD = "mcp_server_add"
ADDED = "added"
STUB = "disabled_stub"
MAX_COMMAND_CHARS = 1024
MAX_ARGS = 64
MAX_VALUE_CHARS = 4096
MAX_ENV = 64
MAX_HEADERS = 32
MAX_URL_CHARS = 2048
ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
#: RFC 9110 token characters.
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_KEYS = frozenset({"name", "command", "args", "env", "url", "headers", "scopes"})


class FieldError(BadInputError):
    """Bad input that one request field caused; ``field`` names it."""

    def __init__(self, message: str, *, code: str, field: str) -> None:
        super().__init__(message, code=code)
        self.field = field


class ServerExistsError(ConflictError):
    """The name is taken by a server some scope (or the rendered agent) already has."""

    code = "server_exists"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.field = "name"


class ScopeUnusableError(KirocrewError):
    """A scope file the add must write cannot be trusted (malformed or unreadable): nothing is written."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message, code=code, exit_code=2 if code == "scope_file_malformed" else 1)
        self.field = "scopes"


@dataclass(frozen=True)
class NewServer:
    """A checked request: the launch spec and the scopes that get it."""

    name: str
    spec: dict[str, Any]
    scopes: tuple[str, ...]

    @property
    def kirocrew(self) -> bool:
        return EFFECTIVE_KEY in self.scopes

    @property
    def shared(self) -> tuple[str, ...]:
        return tuple(s for s in self.scopes if s != EFFECTIVE_KEY)


def _text(value: Any, field: str, *, limit: int, what: str, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value.strip()):
        raise FieldError(f"{what} must be a non-empty string", code=f"bad_{field}", field=field)
    if len(value) > limit:
        raise FieldError(f"{what} is longer than {limit} characters", code=f"bad_{field}", field=field)
    if _CONTROL.search(value):
        raise FieldError(f"{what} may not hold control characters (newlines, tabs, NUL)", code=f"bad_{field}",
                         field=field)
    return value


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(value: Any) -> str:
    """An ``https`` URL with a host (``http`` only on this machine); raise :class:`FieldError` otherwise."""
    url = _text(value, "url", limit=MAX_URL_CHARS, what="the URL").strip()
    if any(ch.isspace() for ch in url):
        raise FieldError("the URL may not contain spaces", code="bad_url", field="url")
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as exc:
        raise FieldError(f"not a valid URL: {exc}", code="bad_url", field="url") from None
    if parts.scheme not in ("http", "https") or not host:
        raise FieldError("the URL must start with https:// and name a host", code="bad_url", field="url")
    if parts.username is not None or parts.password is not None:
        raise FieldError("put credentials in a header, not in the URL", code="bad_url", field="url")
    if parts.scheme == "http" and not _is_loopback(host):
        raise FieldError("plain http:// is allowed only for a server on this machine; use https://",
                         code="insecure_url", field="url")
    return url


def _string_map(value: Any, field: str, *, limit: int, key: re.Pattern[str], what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FieldError(f"{field} must map names to strings", code=f"bad_{field}", field=field)
    if len(value) > limit:
        raise FieldError(f"at most {limit} {field} entries", code=f"bad_{field}", field=field)
    out: dict[str, str] = {}
    for name, item in value.items():
        if not isinstance(name, str) or not key.fullmatch(name):
            shown = name[:40] if isinstance(name, str) else name
            raise FieldError(f"{shown!r} is not a valid {what} name", code=f"bad_{field}", field=field)
        out[name] = _text(item, field, limit=MAX_VALUE_CHARS, what=f"the value of {name}", empty=True)
    return out


def parse_new_server(payload: Any, scope_ids: list[str]) -> NewServer:
    """Check a request's shape and values (no file is read); raise :class:`FieldError` when it is wrong."""
    if not isinstance(payload, dict):
        raise FieldError("send a JSON object", code="bad_request", field="")
    extra = sorted(set(payload) - _KEYS)
    if extra:
        raise FieldError(f"unknown keys: {', '.join(map(repr, extra))}", code="bad_request", field="")
    name = payload.get("name")
    if not isinstance(name, str):
        raise FieldError("name must be a string", code="invalid_name", field="name")
    problem = name_problem(name)
    if problem is not None:
        raise FieldError(f"invalid name: {problem}", code="invalid_name", field="name")
    has_command, has_url = payload.get("command") is not None, payload.get("url") is not None
    if has_command == has_url:
        raise FieldError("give either a command (stdio) or a URL (http), not both or neither",
                         code="bad_command" if has_command else "bad_url", field="command" if has_command else "url")
    spec: dict[str, Any]
    if has_command:
        if payload.get("headers"):
            raise FieldError("headers go with a URL, not a command", code="bad_headers", field="headers")
        command = _text(payload["command"], "command", limit=MAX_COMMAND_CHARS, what="the command").strip()
        args = payload.get("args") or []
        if not isinstance(args, list) or len(args) > MAX_ARGS:
            raise FieldError(f"args must be a list of at most {MAX_ARGS} strings", code="bad_args", field="args")
        spec = {"command": command,
                "args": [_text(a, "args", limit=MAX_VALUE_CHARS, what="an argument", empty=True) for a in args]}
        env = _string_map(payload.get("env"), "env", limit=MAX_ENV, key=ENV_KEY, what="environment variable")
        if env:
            spec["env"] = env
    else:
        if payload.get("args") or payload.get("env"):
            field = "args" if payload.get("args") else "env"
            raise FieldError("args and env go with a command, not a URL", code=f"bad_{field}", field=field)
        spec = {"url": check_url(payload["url"])}
        headers = _string_map(payload.get("headers"), "headers", limit=MAX_HEADERS, key=HEADER_NAME, what="header")
        if headers:
            spec["headers"] = headers
    scopes = payload.get("scopes")
    if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
        raise FieldError("scopes must be a list of scope ids", code="bad_scopes", field="scopes")
    known = [EFFECTIVE_KEY, *scope_ids]
    unknown = sorted(set(scopes) - set(known))
    if unknown:
        raise FieldError(f"unknown scope {unknown[0]!r} (known: {', '.join(known)})", code="unknown_scope",
                         field="scopes")
    if not scopes:
        raise FieldError("choose at least one scope: who should see this server", code="no_scope", field="scopes")
    return NewServer(name, spec, tuple(s for s in known if s in scopes))


def _taken(batch: Batch, name: str) -> bool:
    if batch.agent_entries(name):
        return True
    return any(file.keys(name) for file in batch.files.values())


def add_server(payload: Any, *, pm: KirocrewPluginManager | None = None, actor: str = "owner") -> ApplyOutcome:
    """Declare a new server (see the module docstring), then rebuild once; raise on any refusal."""
    from kirocrew_core.plugins import get_plugin_manager

    from kirocrew_mcp import managed
    from kirocrew_mcp.cleanup import reserved_managed_names
    from kirocrew_mcp.render import remove_then_rebuild

    manager = pm if pm is not None else get_plugin_manager()
    scopes = all_scopes(manager)
    new = parse_new_server(payload, [s.id for s in scopes if s.kind != KIND_CREW])
    try:
        managed_names = set(managed.managed_servers(manager))
    except KirocrewError:
        managed_names = set()
    warnings: list[str] = []
    with named_lock(LOCK_NAME):
        batch = Batch(scopes, managed_names, reserved_managed_names(manager))
        if {new.name, mcp_server_alias(new.name)} & batch.reserved:
            raise FieldError(f"{new.name} is a kirocrew server name; choose another", code="managed_server",
                             field="name")
        if _taken(batch, new.name):
            raise ServerExistsError(f"a server named {new.name} already exists; choose another name")
        targets = [batch.files[sid] for sid in new.shared] + [batch.store]
        for file in targets:
            if not file.usable:
                raise ScopeUnusableError(f"the {file.scope.label} MCP scope cannot be used: {file.problem()}",
                                         code=file.code)
        result = ChangeResult(0, new.name)
        for sid in new.shared:
            batch.files[sid].edit()[new.name] = dict(new.spec)
            result.actions[sid] = ADDED
        if not new.shared:
            batch.store.edit()[new.name] = dict(new.spec)
            result.actions[EFFECTIVE_KEY] = ADDED
        elif not new.kirocrew:
            batch.store.edit()[new.name] = {"disabled": True}
            result.actions[EFFECTIVE_KEY] = STUB
        change = Change(0, new.name, {sid: True for sid in new.scopes})
        written = flush(batch, [(change, result)], warnings)
        rebuild: dict[str, Any] = {"ok": True, "ran": False}
        if written:
            rebuild = rebuild_result(remove_then_rebuild([], pm=manager))
        audit_event(AUDIT_ADD, actor, warnings, outcome="ok" if result.ok else "error", server=new.name,
                    actions=result.actions, transport="http" if "url" in new.spec else "stdio",
                    env_keys=sorted(new.spec.get("env", {})), header_names=sorted(new.spec.get("headers", {})),
                    code=result.code or None)
    return ApplyOutcome([result], rebuild, warnings)
