"""``config.toml`` in the crew home: a registry of typed, documented keys.

The file belongs to the user, so it is read and rewritten with tomlkit, which
keeps comments, ordering and formatting through ``kirocrew config set``. Every
key is declared up front (:class:`ConfigKey`), which gives one place for its
type, default, bounds and help text, and lets a typo in the file be reported
instead of silently ignored.

A dotted name is a TOML table plus a key: ``gateway.port`` is ``port`` in the
``[gateway]`` table (``gateway.port = 7317`` at the top level is the same key).

Plugins may add keys with :func:`register_key`, called at import time of the
module their entry point names (``register_key(ConfigKey("myplugin.depth",
int, 3, "How deep to look."))``). The ``kirocrew config`` commands load the
plugins before reading the file, so those keys are known there; elsewhere (a
``kirocrew <plugin command>`` imports only its own plugin) a key nobody declared
yet loads the plugins once before it is called unknown (:func:`_declare_plugin_keys`).
A key whose plugin is uninstalled becomes an unknown key and is reported as such.

Some tables hold named entries the owner defines rather than fixed keys:
``[crews.NAME]`` is one crew binding (:class:`ConfigTable`). Each entry's name
must be a plain name, its fields are declared like keys (type, check, doc), and
a field nobody declared is refused; :func:`set_entry` and :func:`remove_entry`
edit one entry the way ``config set`` edits a key.

Errors: bad TOML is ``config_malformed``, an unknown key or a value of the
wrong type in the file is ``config_invalid`` (both exit 2 and name the file);
an unknown key on the command line is ``unknown_config_key``, a bad value there
``invalid_config_value``. A failed write leaves the file exactly as it was.
"""

from __future__ import annotations

import copy
import json
import re
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import tomlkit
from tomlkit.exceptions import ParseError, TOMLKitError
from tomlkit.items import Comment, InlineTable, Table

from kirocrew_core import audit, home
from kirocrew_core.errors import BadInputError, KirocrewError, MalformedFileError, UnreadableFileError
from kirocrew_core.jsonfile import write_bytes_atomic
from kirocrew_core.locks import named_lock
from kirocrew_core.coretools.policy import AGENT_NAME
from kirocrew_core.tool_patterns import pattern_problem

CONFIG_LOCK = "config"
# config.toml is a few hundred bytes; anything this big is not one we wrote.
MAX_CONFIG_BYTES = 1024 * 1024

_KINDS = ("int", "float", "bool", "str", "list[str]")
_NAME_PART = re.compile(r"^[a-z0-9][a-z0-9_-]*$")

Check = Callable[[Any], "str | None"]


def _kind_of(declared: type | str | types.GenericAlias) -> str:
    if isinstance(declared, str):
        kind = declared.replace(" ", "")
    elif isinstance(declared, types.GenericAlias):
        kind = str(declared).replace(" ", "")
    else:
        kind = getattr(declared, "__name__", repr(declared))
    if kind not in _KINDS:
        raise ValueError(f"unsupported config type {declared!r}; use one of {', '.join(_KINDS)}")
    return kind


@dataclass(frozen=True)
class ConfigKey:
    """One documented key of ``config.toml``.

    ``type`` is ``int``, ``float``, ``bool``, ``str`` or ``"list[str]"``
    (``list[str]`` works too). ``check`` returns a problem sentence for a
    well-typed value that is still out of bounds, or ``None`` when it is fine.
    ``reloads_sessions`` says that kiro-cli sessions load the value when they start
    (it changes the rendered agent): ``kirocrew config set`` then offers the session
    restart the dashboard's Apply & Restart does.
    """

    name: str
    type: type | str | types.GenericAlias
    default: Any
    doc: str
    check: Check | None = None
    reloads_sessions: bool = False

    def __post_init__(self) -> None:
        parts = self.name.split(".")
        if len(parts) < 2 or not all(_NAME_PART.match(part) for part in parts):
            raise ValueError(f"config key {self.name!r} must be dotted lowercase words: table.key")
        kind = _kind_of(self.type)
        problem = _type_problem(kind, self.default) or (self.check(self.default) if self.check else None)
        if problem:
            raise ValueError(f"default of config key {self.name!r} is invalid: {problem}")
        if not self.doc.strip():
            raise ValueError(f"config key {self.name!r} needs a doc string")

    @property
    def kind(self) -> str:
        """The normalized type name: ``int``, ``float``, ``bool``, ``str`` or ``list[str]``."""
        return _kind_of(self.type)

    def problem_with(self, value: Any) -> str | None:
        """Why ``value`` cannot be this key's value, or ``None`` when it can."""
        return _type_problem(self.kind, value) or (self.check(value) if self.check else None)


def _type_problem(kind: str, value: Any) -> str | None:
    # bool is an int subclass in Python; TOML keeps them apart, and so do we.
    ok = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "str": isinstance(value, str),
        "list[str]": isinstance(value, list) and all(isinstance(item, str) for item in value),
    }[kind]
    if ok:
        return None
    wanted = {
        "int": "an integer",
        "float": "a number",
        "bool": "true or false",
        "str": "a string",
        "list[str]": "a list of strings",
    }[kind]
    return f"expected {wanted}, got {_literal(value)}"


def int_range(low: int, high: int) -> Check:
    """A ``check`` for an integer key bounded to ``low..high`` inclusive."""

    def check(value: Any) -> str | None:
        if low <= value <= high:
            return None
        return f"must be between {low} and {high}, got {value}"

    return check


def _check_ceiling(value: Any) -> str | None:
    for entry in value:
        problem = pattern_problem(entry)
        if problem:
            return problem
    return None


def _check_host(value: Any) -> str | None:
    if not value.strip() or any(ch.isspace() for ch in value):
        return f"must be a host name or address, got {_literal(value)}"
    return None


def _check_absolute_paths(value: Any) -> str | None:
    for entry in value:
        if not Path(entry).expanduser().is_absolute():
            return f"must be absolute paths (or ~/...), got {_literal(entry)}"
    return None


_REGISTRY: dict[str, ConfigKey] = {}
_TABLES: dict[str, ConfigTable] = {}
_plugins_declared = False


def _declare_plugin_keys() -> bool:
    """Load every plugin once, so each declares its keys; whether that was new (the caller then looks again).

    A plugin command imports only its own plugin, so a key another plugin declares is not known yet
    when that command reads the file; the full load pays only for a file with such a key.
    """
    global _plugins_declared
    if _plugins_declared:
        return False
    _plugins_declared = True
    from kirocrew_core.plugins import get_plugin_manager

    get_plugin_manager()
    return True


def register_key(key: ConfigKey) -> ConfigKey:
    """Declare a key; the same declaration twice is fine, a conflicting one is an error.

    Call it at import time of your plugin module so the key is known before
    anything reads the file.
    """
    existing = _REGISTRY.get(key.name)
    if existing is not None and existing != key:
        raise ValueError(f"config key {key.name!r} is already declared differently")
    if key.name.split(".")[0] in _TABLES:
        raise ValueError(f"config key {key.name!r} is inside the table of named entries [{key.name.split('.')[0]}]")
    _REGISTRY[key.name] = key
    return key


def registered_keys() -> list[ConfigKey]:
    """Every declared key, sorted by name."""
    return [_REGISTRY[name] for name in sorted(_REGISTRY)]


def lookup_key(name: str) -> ConfigKey:
    """The declared key ``name``; :class:`BadInputError` ``unknown_config_key`` lists the valid ones."""
    key = _REGISTRY.get(name)
    if key is None and _declare_plugin_keys():
        return lookup_key(name)
    if key is None:
        raise BadInputError(
            f"unknown config key {name!r}; valid keys: {', '.join(sorted(_REGISTRY))}",
            code="unknown_config_key",
        )
    return key


register_key(
    ConfigKey(
        "dashboard.mcp_probe_timeout_secs",
        int,
        15,
        "Seconds an MCP probe (initialize + tools/list) may take before it is reported as timed out.",
        int_range(1, 600),
    )
)
register_key(
    ConfigKey(
        "governance.ceiling",
        "list[str]",
        [],
        "MCP servers never auto-approved, as @server or @server/tool (* globs in the server part); "
        "naming a server at any granularity sends all its calls through the approval gate.",
        _check_ceiling,
        reloads_sessions=True,  # the render withholds the grants it names from the agent file
    )
)


def _check_switch(value: Any) -> str | None:
    if value in ("allow", "deny"):
        return None
    return f'must be "allow" or "deny", got {_literal(value)}'


# Capability switches for what a crew session (a model, not the owner) may do; see governance.capability_allowed.
register_key(
    ConfigKey(
        "governance.memory_writes",
        str,
        "allow",
        'Whether crew sessions may save or remove durable lessons (learn_add, learn_remove): "allow" or "deny". '
        "The owner's own `kirocrew learn` commands are not gated.",
        _check_switch,
    )
)
register_key(
    ConfigKey(
        "governance.messaging",
        str,
        "allow",
        'Whether crew sessions may publish to the notification center and send their owner messages and files '
        '(send_notification, send_message, file_send): "allow" or "deny".',
        _check_switch,
    )
)
register_key(
    ConfigKey(
        "governance.cron",
        str,
        "allow",
        'Whether crew sessions may schedule and change their own cron jobs (cron_add, cron_update, cron_resume, '
        'cron_trigger), and whether the jobs they made may fire: "allow" or "deny". The owner\'s own '
        "`kirocrew cron` commands and jobs are not gated.",
        _check_switch,
    )
)
register_key(
    ConfigKey(
        "governance.hooks",
        str,
        "allow",
        'Whether crew sessions may register inbound webhooks (register_hook) and whether deliveries to them are '
        'accepted: "allow" or "deny". The owner\'s `kirocrew hooks` commands and the Hooks page are not gated.',
        _check_switch,
    )
)
register_key(
    ConfigKey(
        "gateway.port",
        int,
        7317,
        "TCP port the gateway listens on; 0 picks a free port.",
        int_range(0, 65535),
    )
)
register_key(
    ConfigKey(
        "gateway.host",
        str,
        "127.0.0.1",
        "Address the gateway binds; keep it on loopback unless you know why not.",
        _check_host,
    )
)

register_key(
    ConfigKey(
        "host.idle_secs",
        int,
        900,
        "Seconds a host started on demand by a relay keeps running with no MCP client, run, mint or "
        "dashboard use before it exits (KIROCREW_HOST_IDLE_SECS overrides); a foreground serve never idles out.",
        int_range(1, 7 * 24 * 3600),
    )
)



def _check_optional_directory(value: Any) -> str | None:
    if value and not Path(value).expanduser().is_absolute():
        return f'must be an absolute path (or ~/...), or "" for none, got {_literal(value)}'
    return None


register_key(
    ConfigKey(
        "artifacts.deploy_dir",
        str,
        "",
        "The local web root deploy_artifact's built-in destination publishes into, once the owner confirms "
        '(<dir>/<site_id>/index.<ext>); "" (the default) means no local deploys.',
        _check_optional_directory,
    )
)

# Read by kirocrew-connections' Disconnect. Declared here rather than by that plugin's
# module because registering a key imports this module, which ``kirocrew --help`` must not pay for.
register_key(
    ConfigKey(
        "connections.project_roots",
        "list[str]",
        [],
        "Project directories whose .kiro/agents a connection Disconnect also checks for an agent "
        "sharing the grant (absolute paths or ~/...), besides the workspaces of conversations.",
        _check_absolute_paths,
    )
)

register_key(
    ConfigKey(
        "skills.extra_paths",
        "list[str]",
        [],
        "More folders of Agent Skills (absolute paths or ~/...) skill_search reads, after the project's and "
        "the crew's skills and before kiro-cli's own folders.",
        _check_absolute_paths,
    )
)


def _check_registry_url(value: Any) -> str | None:
    if value and not re.match(r"^https?://[^\s/]+(/\S*)?$", value):
        return f'must be an http(s) URL, or "" for no registry, got {_literal(value)}'
    return None


register_key(
    ConfigKey(
        "skills.registry_url",
        str,
        "",
        'The skills registry skill_discover and skill_fetch search (its API base URL); "" (the default) means '
        "no registry: both tools refuse with registry_unconfigured.",
        _check_registry_url,
    )
)
register_key(
    ConfigKey(
        "skills.registry_allow_private",
        bool,
        False,
        "Whether the skills registry may be at a private, loopback or link-local address (refused by default, so "
        "a registry answer cannot steer a fetch into the local network).",
    )
)

# --- tables of named entries ---------------------------------------------------

# An entry's name is a TOML key the owner typed and a name tools and pages echo: no dots, slashes or spaces.
ENTRY_NAME = AGENT_NAME
MODEL_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]{0,127}$")
AUTHORITY_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
TRIGGERS_MAX, TRIGGER_MAX_CHARS = 50, 200
PATH_MAX_CHARS = 4096


@dataclass(frozen=True)
class EntryField:
    """One field of a :class:`ConfigTable`'s entries: its type (as :class:`ConfigKey`'s), doc and check.

    A field is optional: an entry that leaves it out gets no value, and its reader decides what that means.
    """

    name: str
    type: type | str | types.GenericAlias
    doc: str
    check: Check | None = None

    @property
    def kind(self) -> str:
        return _kind_of(self.type)

    def problem_with(self, value: Any) -> str | None:
        return _type_problem(self.kind, value) or (self.check(value) if self.check else None)


@dataclass(frozen=True)
class ConfigTable:
    """A table of entries the owner names, ``[<name>.<entry>]``, each with the declared fields.

    ``label`` names one entry in messages and error codes (``unknown_<label>``, ``<label>_exists``).
    """

    name: str
    label: str
    doc: str
    fields: tuple[EntryField, ...]
    max_entries: int = 100

    def field(self, name: str) -> EntryField | None:
        return next((f for f in self.fields if f.name == name), None)

    def name_problem(self, entry: str) -> str | None:
        if ENTRY_NAME.match(entry):
            return None
        return (f"{self.label} name {_literal(entry)} must be 1-64 letters, digits, _ or -, starting and ending "
                "with a letter or digit")

    def entry_problem(self, entry: str, value: Any) -> str | None:
        """Why ``value`` cannot be the entry ``entry``, naming the field; ``None`` when it can."""
        problem = self.name_problem(entry)
        if problem:
            return problem
        if not isinstance(value, dict):
            return f"a {self.label} must be a table ([{self.name}.{entry}]), got {_literal(value)}"
        for key, field_value in value.items():
            spec = self.field(key)
            if spec is None:
                return (f"{key}: unknown {self.label} field; valid fields: "
                        f"{', '.join(f.name for f in self.fields)}")
            problem = spec.problem_with(field_value)
            if problem:
                return f"{key}: {problem}"
        return None


def _matches(pattern: re.Pattern[str], what: str) -> Check:
    def check(value: Any) -> str | None:
        return None if pattern.match(value) else f"must be {what}, got {_literal(value)}"

    return check


def _check_path(value: Any) -> str | None:
    if not value or len(value) > PATH_MAX_CHARS or "\x00" in value or not Path(value).expanduser().is_absolute():
        return f"must be an absolute path (or ~/...), got {_literal(value[:200])}"
    return None


def _check_triggers(value: Any) -> str | None:
    if len(value) > TRIGGERS_MAX:
        return f"at most {TRIGGERS_MAX} triggers, got {len(value)}"
    for trigger in value:
        if not trigger.strip() or len(trigger) > TRIGGER_MAX_CHARS or any(ord(ch) < 32 or ch == "\x7f"
                                                                         for ch in trigger):
            return (f"each trigger must be a word or phrase of 1-{TRIGGER_MAX_CHARS} characters on one line, "
                    f"got {_literal(trigger[:200])}")
    return None


def register_table(table: ConfigTable) -> ConfigTable:
    """Declare a table of named entries (at import time, like :func:`register_key`)."""
    existing = _TABLES.get(table.name)
    if existing is not None and existing != table:
        raise ValueError(f"config table {table.name!r} is already declared differently")
    if any(name == table.name or name.startswith(table.name + ".") for name in _REGISTRY):
        raise ValueError(f"config table {table.name!r} clashes with a declared key")
    _TABLES[table.name] = table
    return table


def lookup_table(name: str) -> ConfigTable:
    """The declared table ``name``; :class:`BadInputError` ``unknown_config_key`` when there is none."""
    table = _TABLES.get(name)
    if table is None:
        raise BadInputError(f"unknown config table {name!r}", code="unknown_config_key")
    return table


CREWS = register_table(
    ConfigTable(
        "crews",
        "crew",
        "Named crews: what a sub-agent spawned with spawn_run(crew=NAME) runs on, and the words that route a "
        "task to it (route_crew).",
        (
            EntryField("kiro_agent", str, "The Kiro agent the crew runs (default: the spawning session's).",
                       _matches(AGENT_NAME, "an agent name (letters, digits, _ and -)")),
            EntryField("model", str, "The model id (default: the spawning session's).",
                       _matches(MODEL_NAME, "a model id (letters, digits, ., _ and -)")),
            EntryField("workspace", str, "The working directory, an absolute path or ~/... (default: the "
                       "spawning session's workspace); spawn_run checks it as it checks cwd.", _check_path),
            EntryField("authority", str, "The execution authority (read_only, workspace_write, unrestricted; "
                       "default: the spawning session's); never more than the spawning session has.",
                       _matches(AUTHORITY_NAME, "an authority name (lowercase letters, digits and _)")),
            EntryField("triggers", "list[str]", "Words or phrases that route a task to this crew (route_crew); "
                       "a crew without triggers is selected only by name.", _check_triggers),
        ),
    )
)


# Message channels (kirocrew_core.messages.settings reads them). Declared here rather than by the messages
# plugin's module for the reason connections.project_roots is: registering imports this module.
CHANNEL_KINDS = ("email", "webhook")
CHANNEL_SECURITIES = ("starttls", "ssl", "plain")
DEFAULT_CHANNEL_TIMEOUT_SECS = 10
CHANNEL_TIMEOUT_MAX_SECS = 120
_HOST_NAME = re.compile(r"^[A-Za-z0-9.-]{1,253}$|^\[?[0-9A-Fa-f:.]{2,45}\]?$")
_ADDRESS = re.compile(r"^[^\s@<>,;\"]{1,64}@[A-Za-z0-9.-]{1,253}$")


def _one_of(values: tuple[str, ...]) -> Any:
    def check(value: Any) -> str | None:
        return None if value in values else f"must be one of {', '.join(values)}, got {value!r}"

    return check


def _mail_host(value: Any) -> str | None:
    return None if _HOST_NAME.match(value) else f"must be a host name or address, got {value[:100]!r}"


def _address(value: Any) -> str | None:
    return None if _ADDRESS.match(value) else f"must be one e-mail address, got {value[:100]!r}"


def _addresses(value: Any) -> str | None:
    if not 1 <= len(value) <= 20:
        return "must list 1 to 20 addresses"
    return next(filter(None, map(_address, value)), None)


CHANNELS = register_table(
    ConfigTable(
        "channels",
        "channel",
        "Message channels send_message and file_send may deliver to besides the owner's feed: kind = \"email\" "
        "(SMTP) or \"webhook\" (a JSON POST Slack's and Teams' incoming webhooks accept). Their secrets (the "
        "webhook URL, the SMTP password) are set with `kirocrew messages secret NAME`, never here.",
        (
            EntryField("kind", str, "email or webhook.", _one_of(CHANNEL_KINDS)),
            EntryField("smtp_host", str, "email: the SMTP server.", _mail_host),
            EntryField("smtp_port", int, "email: its port (default 587 for starttls, 465 for ssl, 25 for plain).",
                       int_range(1, 65535)),
            EntryField("security", str, "email: starttls (default), ssl, or plain (only for a server on this "
                       "machine; the password is never sent over plain).", _one_of(CHANNEL_SECURITIES)),
            EntryField("username", str, "email: the login, when the server wants one (its password is the "
                       "channel's secret)."),
            EntryField("from_addr", str, "email: the From address.", _address),
            EntryField("to", "list[str]", "email: the recipients (1-20).", _addresses),
            EntryField("timeout_secs", int, f"How long one delivery may take, 1-{CHANNEL_TIMEOUT_MAX_SECS} seconds "
                       f"(default {DEFAULT_CHANNEL_TIMEOUT_SECS}); past it the message falls back to the feed.",
                       int_range(1, CHANNEL_TIMEOUT_MAX_SECS)),
        ),
        max_entries=20,
    )
)


def _check_channel_name(value: Any) -> str | None:
    if value == "" or ENTRY_NAME.match(value):
        return None
    return f'must be a channel name (letters, digits, _ and -) or "" for none, got {value[:100]!r}'


register_key(
    ConfigKey(
        "messages.default_channel",
        str,
        "",
        'The channel (a [channels.NAME] table) send_message delivers to when a call names none; "" (the default) '
        "means the owner's feed only.",
        _check_channel_name,
    )
)


# --- reading ----------------------------------------------------------------


class Config:
    """The validated contents of ``config.toml``; :meth:`get` falls back to the default."""

    def __init__(self, path: Path, values: dict[str, Any],
                 tables: dict[str, dict[str, dict[str, Any]]] | None = None) -> None:
        self.path = path
        self._values = values
        self._tables = tables or {}

    def get(self, name: str) -> Any:
        """The value of ``name`` (a copy, safe to mutate), or its default when unset."""
        key = lookup_key(name)
        return copy.deepcopy(self._values.get(name, key.default))

    def is_set(self, name: str) -> bool:
        """True when the file sets ``name`` explicitly."""
        lookup_key(name)
        return name in self._values

    def entries(self, table: str) -> dict[str, dict[str, Any]]:
        """The named entries of ``table`` (a copy), in file order: entry name → its fields as set."""
        lookup_table(table)
        return copy.deepcopy(self._tables.get(table, {}))

    def __repr__(self) -> str:
        return f"Config({str(self.path)!r}, {self._values!r}, {self._tables!r})"


class ConfigEntry(NamedTuple):
    """One row of :func:`list_values`."""

    key: str
    value: Any
    default: Any
    is_set: bool
    doc: str


def _config_path(path: str | Path | None) -> Path:
    return Path(path) if path is not None else home.config_file()


def _read_text(path: Path) -> str | None:
    """The file's text, ``None`` when absent; unreadable or undecodable is an error."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise UnreadableFileError(f"{path}: is a directory") from None
    except OSError as exc:
        raise UnreadableFileError(f"{path}: {exc.strerror or exc}") from exc
    if len(raw) > MAX_CONFIG_BYTES:
        raise MalformedFileError(path, f"larger than {MAX_CONFIG_BYTES} bytes", code="config_malformed")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedFileError(path, f"not UTF-8: {exc.reason}", code="config_malformed") from exc


def _parse(path: Path, text: str) -> tomlkit.TOMLDocument:
    try:
        return tomlkit.parse(text)
    except ParseError as exc:
        detail = str(exc)
        suffix = f" at line {exc.line} col {exc.col}"
        if detail.endswith(suffix):
            detail = detail[: -len(suffix)]
        raise MalformedFileError(
            path, f"{detail} (column {exc.col})", line=exc.line, code="config_malformed"
        ) from exc
    except (TOMLKitError, ValueError, RecursionError) as exc:
        raise MalformedFileError(path, f"not valid TOML: {exc}", code="config_malformed") from exc


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in table.items():
        dotted = f"{prefix}{name}"
        if isinstance(value, dict) and not _REGISTRY.get(dotted):
            out.update(_flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


class _Contents(NamedTuple):
    values: dict[str, Any]
    tables: dict[str, dict[str, dict[str, Any]]]


def _validated(path: Path, document: tomlkit.TOMLDocument, *, skip: str | None = None) -> _Contents:
    """The file's values as plain Python, keyed by dotted name, and its tables' entries; raise ``config_invalid``.

    ``skip`` is a key (or a table entry, ``crews.NAME``) left unchecked: the one being changed.
    """
    data = document.unwrap()
    tables: dict[str, dict[str, dict[str, Any]]] = {}
    for name, table in _TABLES.items():
        if name not in data:
            continue
        entries = data.pop(name)
        if not isinstance(entries, dict):
            raise MalformedFileError(path, f"{name}: must be a table of {table.label}s ([{name}.NAME])",
                                     code="config_invalid")
        if len(entries) > table.max_entries:
            raise MalformedFileError(path, f"{name}: at most {table.max_entries} {table.label}s, got {len(entries)}",
                                     code="config_invalid")
        for entry, value in entries.items():
            problem = None if f"{name}.{entry}" == skip else table.entry_problem(entry, value)
            if problem:
                raise MalformedFileError(path, f"{name}.{entry}: {problem}", code="config_invalid")
        tables[name] = entries
    values = _flatten(data)
    for name, value in values.items():
        if name == skip:
            continue
        key = _REGISTRY.get(name)
        if key is None and _declare_plugin_keys():
            return _validated(path, document, skip=skip)
        if key is None:
            raise MalformedFileError(
                path,
                f"unknown key {name!r}; valid keys: {', '.join(sorted(_REGISTRY))}",
                code="config_invalid",
            )
        problem = key.problem_with(value)
        if problem:
            raise MalformedFileError(path, f"{name}: {problem}", code="config_invalid")
    return _Contents(values, tables)


def load_config(path: str | Path | None = None) -> Config:
    """Read and validate ``config.toml`` (default: the crew home's); absent means all defaults.

    Raises :class:`MalformedFileError` (``config_malformed`` with the line for
    bad TOML, ``config_invalid`` for an unknown key or a wrong value) or
    :class:`UnreadableFileError`; the file is never touched.
    """
    target = _config_path(path)
    text = _read_text(target)
    if text is None:
        return Config(target, {})
    contents = _validated(target, _parse(target, text))
    return Config(target, contents.values, contents.tables)


def get_value(name: str, path: str | Path | None = None) -> Any:
    """Shorthand for ``load_config(path).get(name)``."""
    lookup_key(name)
    return load_config(path).get(name)


def list_values(path: str | Path | None = None) -> list[ConfigEntry]:
    """Every declared key with its effective value, default, whether it is set, and its doc."""
    config = load_config(path)
    return [
        ConfigEntry(key.name, config.get(key.name), copy.deepcopy(key.default), config.is_set(key.name), key.doc)
        for key in registered_keys()
    ]


# --- writing ----------------------------------------------------------------


def _literal(value: Any) -> str:
    """``value`` as a TOML literal (which for our types is also JSON)."""
    return json.dumps(value, ensure_ascii=False)


def format_value(value: Any) -> str:
    """How ``kirocrew config get`` prints a value: a TOML/JSON literal."""
    return _literal(value)


def _parse_toml_value(raw: str) -> Any:
    try:
        return tomlkit.parse(f"v = {raw}\n").unwrap()["v"]
    except (TOMLKitError, ValueError, RecursionError) as exc:
        raise ValueError(f"not a TOML value: {raw}") from exc


def parse_raw(key: ConfigKey, raw: str) -> Any:
    """Turn a command-line string into ``key``'s type, then validate it.

    ``int``/``float`` as written; ``bool`` is ``true``/``false``; ``list[str]``
    is a TOML inline array (``["@a", "@b"]``) or comma-separated (``@a,@b``,
    empty for none); ``str`` is taken verbatim unless it is a quoted TOML
    string, so ``set "$(kirocrew config get K)"`` round-trips.
    Raises :class:`BadInputError` ``invalid_config_value``.
    """
    text = raw.strip()
    try:
        if key.kind == "int":
            value: Any = int(text, 10)
        elif key.kind == "float":
            value = float(text)
        elif key.kind == "bool":
            if text.lower() not in ("true", "false"):
                raise ValueError(f"expected true or false, got {raw!r}")
            value = text.lower() == "true"
        elif key.kind == "list[str]":
            if text.startswith("["):
                value = _parse_toml_value(text)
            else:
                value = [part.strip() for part in text.split(",") if part.strip()]
        elif text.startswith('"'):
            value = _parse_toml_value(text)
        else:
            value = raw
    except ValueError as exc:
        if key.kind in ("int", "float"):
            message = f"expected {'an integer' if key.kind == 'int' else 'a number'}, got {raw!r}"
        else:
            message = str(exc)
        raise BadInputError(f"{key.name}: {message}", code="invalid_config_value") from exc
    problem = key.problem_with(value)
    if problem:
        raise BadInputError(f"{key.name}: {problem}", code="invalid_config_value")
    return value


def _load_document(path: Path, *, skip: str) -> tomlkit.TOMLDocument:
    text = _read_text(path)
    document = tomlkit.document() if text is None else _parse(path, text)
    # The key being changed may be the broken one: setting or unsetting it is the fix.
    _validated(path, document, skip=skip)
    return document


def _write(path: Path, document: tomlkit.TOMLDocument, *, default_path: bool) -> None:
    data = document.as_string()
    _validated(path, _parse(path, data))  # never write a file we could not read back
    if default_path:
        home.ensure_crew_home()
    write_bytes_atomic(path, data.encode("utf-8"))


def _audit_change(event: str, name: str, value: Any) -> None:
    """Config changes (the governance ceiling above all) are security events; log, never block."""
    try:
        audit.record(event, actor="owner", key=name, value=value)
    except (KirocrewError, OSError) as exc:
        warnings.warn(f"config change not recorded in the security event log: {exc}", stacklevel=3)


def set_value(name: str, raw: str, path: str | Path | None = None) -> Any:
    """Parse ``raw`` for key ``name``, validate it, and write it into the file; return the value.

    Comments and formatting elsewhere in the file are kept. A malformed or
    invalid file is reported and left byte-identical.
    """
    key = lookup_key(name)
    value = parse_raw(key, raw)
    target = _config_path(path)
    with named_lock(CONFIG_LOCK):
        document = _load_document(target, skip=name)
        *tables, leaf = name.split(".")
        container: Any = document
        for part in tables:
            if part not in container:
                container[part] = tomlkit.table()
            container = container[part]
        container[leaf] = value
        _write(target, document, default_path=path is None)
    _audit_change("config.set", name, value)
    return value


def _is_bare(table: Any) -> bool:
    """True for a table with no keys and no comments left (safe to drop with its header)."""
    body = table.value.body
    has_keys = any(item_key is not None for item_key, _ in body)
    has_comments = any(isinstance(item, Comment) for _, item in body)
    return not has_keys and not has_comments and not table.trivia.comment


def unset_value(name: str, path: str | Path | None = None) -> bool:
    """Remove ``name`` from the file so its default applies; return whether it was set.

    When nothing is set the file is not rewritten. A table left with neither
    keys nor comments is removed with it.
    """
    lookup_key(name)
    target = _config_path(path)
    with named_lock(CONFIG_LOCK):
        document = _load_document(target, skip=name)
        *tables, leaf = name.split(".")
        chain: list[Any] = [document]
        for part in tables:
            if part not in chain[-1]:
                return False
            chain.append(chain[-1][part])
        if leaf not in chain[-1]:
            return False
        del chain[-1][leaf]
        for depth in range(len(tables), 0, -1):
            table = chain[depth]
            if isinstance(table, Table) and _is_bare(table):
                del chain[depth - 1][tables[depth - 1]]
            else:
                break
        _write(target, document, default_path=path is None)
    _audit_change("config.unset", name, None)
    return True


def set_entry(table_name: str, entry: str, fields: dict[str, Any], path: str | Path | None = None, *,
              replace: bool = False) -> dict[str, Any]:
    """Write the entry ``[<table>.<entry>]`` with ``fields`` (unset ones left out); return what was written.

    Refused before anything is read or written: a bad name or field (``invalid_config_value``), an
    unknown field, an entry that exists without ``replace`` (``<label>_exists``), a full table. Comments
    and formatting elsewhere in the file are kept, as :func:`set_value` keeps them.
    """
    table = lookup_table(table_name)
    values = {name: value for name, value in fields.items() if value is not None}
    problem = table.name_problem(entry)
    if problem is None:
        problem = table.entry_problem(entry, values)
        problem = problem and f"{table_name}.{entry}: {problem}"
    if problem:
        raise BadInputError(problem, code="invalid_config_value")
    target = _config_path(path)
    with named_lock(CONFIG_LOCK):
        document = _load_document(target, skip=f"{table_name}.{entry}")
        if table_name not in document:
            document[table_name] = tomlkit.table(is_super_table=True)  # no bare [crews] header
        entries: Any = document[table_name]
        if entry in entries and not replace:
            raise BadInputError(f"{table.label} {entry!r} already exists; remove it first, or replace it",
                                code=f"{table.label}_exists")
        if entry not in entries and len(entries) >= table.max_entries:
            raise BadInputError(f"at most {table.max_entries} {table.label}s", code="invalid_config_value")
        # An owner who wrote the table inline (crews = {a = {...}}) gets the new entry inline too.
        written = tomlkit.inline_table() if isinstance(entries, InlineTable) else tomlkit.table()
        for spec in table.fields:  # the declared order, whatever order the caller passed
            if spec.name in values:
                written[spec.name] = values[spec.name]
        entries[entry] = written
        _write(target, document, default_path=path is None)
    _audit_change(f"config.{table.label}_set", f"{table_name}.{entry}", values)
    return values


def remove_entry(table_name: str, entry: str, path: str | Path | None = None) -> dict[str, Any]:
    """Remove the entry ``[<table>.<entry>]``; return its fields. ``unknown_<label>`` names those that exist.

    A table left empty is removed with it (unless comments remain in it).
    """
    table = lookup_table(table_name)
    target = _config_path(path)
    with named_lock(CONFIG_LOCK):
        document = _load_document(target, skip=f"{table_name}.{entry}")
        entries: Any = document.get(table_name)
        if entries is None or entry not in entries:
            known = sorted(entries) if entries is not None else []
            raise BadInputError(f"unknown {table.label} {entry!r}; {table.label}s: {', '.join(known) or 'none'}",
                                code=f"unknown_{table.label}")
        removed = entries[entry]
        gone = removed.unwrap() if hasattr(removed, "unwrap") else removed
        del entries[entry]
        if isinstance(entries, Table) and _is_bare(entries):
            del document[table_name]
        _write(target, document, default_path=path is None)
    _audit_change(f"config.{table.label}_remove", f"{table_name}.{entry}", None)
    return dict(gone) if isinstance(gone, dict) else {}
