"""App manifests: the file an app ships to say which MCP servers and agents it brings.

An installed app is a folder ``<crew home>/apps/<app>/`` holding ``manifest.json``
(and any agent templates it names). Installed under the crew home, not registered
by path, because the crew home is owner-only and a manifest decides which
commands kiro-cli starts: a path elsewhere could be edited by whoever owns that
folder, or vanish with a removable disk.

A manifest is checked whole before anything is written: a JSON schema
(:data:`MANIFEST_SCHEMA`; unknown fields refused at every level), then what a
schema cannot say (URLs, a ``{port}`` URL without a backend, agent paths, each
agent template rendered dry). Every refusal is a :class:`BadInputError` with a
stable code (``app_name_invalid``, ``app_not_found``, ``app_manifest_malformed``,
``app_manifest_too_large``, ``app_manifest_invalid``) or, for a file that cannot
be read, ``app_manifest_unreadable``. Messages name fields, never values: a
server's ``env`` or ``headers`` may hold a credential.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from kirocrew_core import home
from kirocrew_core.errors import BadInputError, KirocrewError, UnreadableFileError
from kirocrew_core.jsonfile import ReadState, read_json

from kirocrew_mcp.apps import NAME_PATTERN, PORT_PLACEHOLDER, app_agent_target, render_app_agent

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

    from kirocrew_core.plugins import KirocrewPluginManager

MANIFEST_NAME = "manifest.json"
#: A manifest or a template is a few KiB; anything bigger is not one.
MAX_MANIFEST_BYTES = 64 * 1024
MANIFEST_VERSION = 1

_NAME = re.compile(NAME_PATTERN)
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
_STRINGS = {"type": "array", "maxItems": 256, "items": {"type": "string", "maxLength": 4096}}
_STRING_MAP = {"type": "object", "maxProperties": 64,
               "additionalProperties": {"type": "string", "maxLength": 8192}}

MANIFEST_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "kirocrew app manifest",
    "type": "object",
    "additionalProperties": False,
    "required": ["manifestVersion", "name"],
    "properties": {
        "manifestVersion": {"const": MANIFEST_VERSION},
        "name": {"type": "string", "pattern": NAME_PATTERN},
        "description": {"type": "string", "maxLength": 1000},
        "mcpServers": {
            "type": "object",
            "maxProperties": 32,
            "propertyNames": {"pattern": NAME_PATTERN},
            "additionalProperties": {"$ref": "#/$defs/server"},
        },
        "backend": {
            "type": "object",
            "additionalProperties": False,
            "minProperties": 1,
            "maxProperties": 1,
            "properties": {
                "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                "portFile": {"type": "string", "minLength": 1, "maxLength": 4096},
            },
        },
        "agents": {"type": "array", "maxItems": 16, "items": {"$ref": "#/$defs/agent"}},
    },
    "$defs": {
        "server": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "command": {"type": "string", "minLength": 1, "maxLength": 4096},
                "args": _STRINGS,
                "env": _STRING_MAP,
                "url": {"type": "string", "minLength": 1, "maxLength": 4096},
                "headers": _STRING_MAP,
                "timeout": {"type": "integer", "minimum": 1},
                "disabled": {"type": "boolean"},
                "autoApprove": _STRINGS,
                "disabledTools": _STRINGS,
            },
            "oneOf": [
                {"required": ["command"], "not": {"anyOf": [{"required": ["url"]}, {"required": ["headers"]}]}},
                {"required": ["url"], "not": {"anyOf": [{"required": ["command"]}, {"required": ["args"]},
                                                        {"required": ["env"]}]}},
            ],
        },
        "agent": {
            "type": "object",
            "additionalProperties": False,
            "required": ["path", "template"],
            "properties": {
                "path": {"type": "string", "minLength": 1, "maxLength": 4096},
                "template": {"oneOf": [
                    {"type": "object", "maxProperties": 64},
                    {"type": "string", "minLength": 1, "maxLength": 1024},
                ]},
            },
        },
    },
}


@dataclass(frozen=True)
class AppBackend:
    """How the app backend's live port is found: a fixed ``port``, or the ``port_file`` it writes when it listens."""

    port: int | None = None
    port_file: Path | None = None


@dataclass(frozen=True)
class AppAgent:
    """One agent file the app ships: rendered from ``template`` and written at ``path``."""

    path: Path
    template: dict[str, Any]


@dataclass(frozen=True)
class AppManifest:
    """A checked manifest: everything enable needs, nothing left to validate."""

    name: str
    path: Path
    description: str
    servers: dict[str, dict[str, Any]]
    backend: AppBackend | None
    agents: tuple[AppAgent, ...]

    def backend_host(self) -> str | None:
        """The loopback host of the first ``{port}`` URL (where the backend is looked for), or None."""
        for spec in self.servers.values():
            url = spec.get("url")
            if isinstance(url, str) and PORT_PLACEHOLDER in url:
                return urlsplit(url.replace(PORT_PLACEHOLDER, "1")).hostname
        return None

    def tool_policy(self) -> list[str]:
        """Every agent template's ``managedToolPolicy.exclude``, in order, once each (for the gateway)."""
        refs: list[str] = []
        for agent in self.agents:
            policy = agent.template.get("managedToolPolicy")
            for ref in policy.get("exclude", []) if isinstance(policy, dict) else []:
                if ref not in refs:
                    refs.append(ref)
        return refs


def check_app_name(name: object) -> str:
    """``name`` if it can name an app (a folder and a key prefix); ``app_name_invalid`` otherwise."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise BadInputError(
            f"{name!r} is not an app name: 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit",
            code="app_name_invalid",
        )
    return name


def app_dir(name: str) -> Path:
    """The folder of the installed app ``name``."""
    return home.apps_dir() / check_app_name(name)


def manifest_file(name: str) -> Path:
    return app_dir(name) / MANIFEST_NAME


def installed_app_names() -> list[str]:
    """Names of the folders under ``<crew home>/apps`` that can name an app, sorted (whether or not valid)."""
    try:
        entries = list(os.scandir(home.apps_dir()))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise UnreadableFileError(f"{home.apps_dir()}: {exc.strerror or exc}", code="app_manifest_unreadable") from None
    return sorted(e.name for e in entries if _NAME.match(e.name) and e.is_dir(follow_symlinks=True))


def _invalid(manifest: Path, detail: str) -> BadInputError:
    return BadInputError(f"{manifest}: {detail}", code="app_manifest_invalid")


def _where(parts: Any) -> str:
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts).lstrip(".")
    return path or "the manifest"


def _describe(error: ValidationError) -> str:
    """One schema error in words that name fields and limits, never the values (which may be secrets)."""
    where, kind, limit = _where(error.absolute_path), error.validator, error.validator_value
    if kind == "additionalProperties" and isinstance(error.instance, dict):
        known = set(error.schema.get("properties", {})) if isinstance(error.schema, dict) else set()
        extra = sorted(str(k) for k in error.instance if k not in known)
        return f"{where}: unknown field(s) {', '.join(repr(k[:64]) for k in extra[:5])}"
    if kind == "required":
        return f"{where}: {error.message}"
    if kind == "type":
        return f"{where}: must be of type {limit}"
    if kind == "const":
        return f"{where}: must be {limit!r}"
    if kind == "pattern" and error.absolute_path and error.absolute_path[-1] == "name":
        return f"{where}: not an app name (1-64 letters, digits, '_', '.' or '-', starting with a letter or digit)"
    if kind == "propertyNames" or (kind == "pattern" and error.relative_schema_path
                                   and "propertyNames" in error.relative_schema_path):
        return f"{where}: the name {str(error.instance)[:64]!r} is not allowed (1-64 letters, digits, '_', '.' or '-')"
    if where == "backend" and kind in ("maxProperties", "minProperties"):
        return "backend: give exactly one of port or portFile"
    if kind == "maxProperties":
        return f"{where}: more than {limit} entries"
    if kind == "maxItems":
        return f"{where}: more than {limit} items"
    if kind == "maxLength":
        return f"{where}: longer than {limit} characters"
    if kind in ("minProperties", "minLength"):
        return f"{where}: must not be empty"
    if kind in ("minimum", "maximum"):
        return f"{where}: out of range"
    if kind == "oneOf" and error.absolute_path and len(error.absolute_path) == 2 \
            and error.absolute_path[0] == "mcpServers":
        return f"{where}: needs either command (with args, env) or url (with headers), not both"
    return f"{where}: not a valid value ({kind})"


def _schema_errors(document: Any) -> list[str]:
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(MANIFEST_SCHEMA)
    errors = sorted(validator.iter_errors(document), key=lambda e: (list(map(str, e.absolute_path)), e.validator))
    return [_describe(e) for e in errors]


def _user_path(manifest: Path, field: str, text: str) -> Path:
    """An absolute path or one under the user's home (``~/``); a relative path would depend on the cwd."""
    if text.startswith("~/"):
        return home.user_home() / text[2:]
    if os.path.isabs(text) and "\0" not in text:
        return Path(text)
    raise _invalid(manifest, f"{field}: must be an absolute path or start with ~/")


def _check_url(manifest: Path, server: str, url: str, has_backend: bool) -> None:
    from kirocrew_mcp.add import check_url

    where = f"mcpServers.{server}.url"
    try:
        check_url(url.replace(PORT_PLACEHOLDER, "1"))
    except KirocrewError as exc:
        raise _invalid(manifest, f"{where}: {exc.message}") from None
    if PORT_PLACEHOLDER not in url:
        return
    raw = urlsplit(url)
    if url.count(PORT_PLACEHOLDER) != 1 or raw.scheme != "http" or raw.hostname not in _LOOPBACK_HOSTS \
            or not raw.netloc.endswith(f":{PORT_PLACEHOLDER}"):
        raise _invalid(manifest, f"{where}: {PORT_PLACEHOLDER} may stand only for the port of an http:// URL on "
                                 "127.0.0.1, localhost or [::1] (the app backend on this machine)")
    if not has_backend:
        raise _invalid(manifest, f"{where}: uses {PORT_PLACEHOLDER}, so the manifest needs a backend "
                                 "(port or portFile) to find it")


def _template(manifest: Path, index: int, value: Any) -> dict[str, Any]:
    """An inline template, or the JSON file it names inside the app's folder (never outside it)."""
    if isinstance(value, dict):
        return value
    where = f"agents[{index}].template"
    folder = manifest.parent.resolve()
    if os.path.isabs(value) or ".." in Path(value).parts:
        raise _invalid(manifest, f"{where}: must name a file inside the app's folder")
    target = (folder / value).resolve()
    if not target.is_relative_to(folder):
        raise _invalid(manifest, f"{where}: must name a file inside the app's folder")
    read = read_json(target, max_bytes=MAX_MANIFEST_BYTES)
    if read.state is ReadState.UNREADABLE:
        raise UnreadableFileError(f"{target}: {read.error}", code="app_manifest_unreadable")
    if read.state is not ReadState.DOCUMENT or not isinstance(read.document, dict):
        detail = read.error or ("absent" if read.state is ReadState.ABSENT else "not a JSON object")
        raise _invalid(manifest, f"{where}: {value}: {detail}")
    return read.document


def parse_manifest(document: Any, path: Path, *, pm: KirocrewPluginManager | None = None) -> AppManifest:
    """Check a parsed manifest whole (see the module docstring); raises and changes nothing."""
    errors = _schema_errors(document)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise _invalid(path, errors[0] + more)
    name = document["name"]
    if name != path.parent.name:
        raise _invalid(path, f"name {name!r} differs from the app's folder {path.parent.name!r}")
    raw_backend = document.get("backend")
    backend = None
    if raw_backend is not None:
        port_file = raw_backend.get("portFile")
        backend = AppBackend(raw_backend.get("port"),
                             _user_path(path, "backend.portFile", port_file) if port_file else None)
    servers = {server: dict(spec) for server, spec in document.get("mcpServers", {}).items()}
    for server, spec in servers.items():
        if "url" in spec:
            _check_url(path, server, spec["url"], backend is not None)
    agents: list[AppAgent] = []
    for index, raw in enumerate(document.get("agents", [])):
        try:
            target = app_agent_target(_user_path(path, f"agents[{index}].path", raw["path"]))
        except BadInputError as exc:
            raise _invalid(path, f"agents[{index}].path: {exc.message}") from None
        if any(agent.path == target for agent in agents):
            raise _invalid(path, f"agents[{index}].path: {target} is named twice")
        template = _template(path, index, raw["template"])
        try:
            render_app_agent(template, app=name, managed_servers={}, pm=pm)  # dry: validates, writes nothing
        except BadInputError as exc:
            raise _invalid(path, f"agents[{index}].template: {exc.message}") from None
        agents.append(AppAgent(target, template))
    return AppManifest(name, path, document.get("description", ""), servers, backend, tuple(agents))


def load_manifest(name: str, *, pm: KirocrewPluginManager | None = None) -> AppManifest:
    """The checked manifest of the installed app ``name`` (``app_not_found`` when there is none)."""
    path = manifest_file(name)
    read = read_json(path, max_bytes=MAX_MANIFEST_BYTES)
    if read.state is ReadState.ABSENT:
        raise BadInputError(f"no app named {name!r}: {path} does not exist (see `kirocrew apps list`)",
                            code="app_not_found")
    if read.state is ReadState.UNREADABLE:
        raise UnreadableFileError(f"{path}: {read.error}", code="app_manifest_unreadable")
    if read.state is ReadState.MALFORMED and read.error.startswith("larger than"):
        raise BadInputError(f"{path}: larger than {MAX_MANIFEST_BYTES} bytes", code="app_manifest_too_large")
    if read.state is not ReadState.DOCUMENT:
        where = f"{path}:{read.line}" if read.line else str(path)
        raise BadInputError(f"{where}: not a JSON manifest ({read.error or 'empty'})", code="app_manifest_malformed")
    return parse_manifest(read.document, path, pm=pm)
