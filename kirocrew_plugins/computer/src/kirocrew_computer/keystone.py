"""The keystone: ``<crew home>/computer_use.json``, the single on/off boundary of computer use.

``{"enabled": false, "allowed_apps": [], "extra_denied_apps": []}``. Reads fail
closed: absent, malformed, unreadable, or ``enabled`` anything but exactly
``true`` means disabled, and the reason says which. Only the owner writes it
(``kirocrew computer keystone`` and the owner-only ``PUT /api/computer-use/config``);
every write is atomic and audited. The MCP server never writes it, so an agent
cannot turn itself on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kirocrew_core import audit, home
from kirocrew_core.errors import BadInputError, KirocrewError
from kirocrew_core.jsonfile import ReadState, read_json, write_json_atomic

FILE_NAME = "computer_use.json"
MAX_APPS = 256
MAX_APP_CHARS = 256
KEYS = ("enabled", "allowed_apps", "extra_denied_apps")


def keystone_file() -> Path:
    return home.crew_home() / FILE_NAME


@dataclass(frozen=True)
class Keystone:
    """The keystone as read; ``enabled`` False always comes with a ``reason``."""

    enabled: bool
    allowed_apps: tuple[str, ...] = ()
    extra_denied_apps: tuple[str, ...] = ()
    reason: str = ""
    file_state: str = "absent"
    document: dict[str, Any] = field(default_factory=dict, compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "allowed_apps": list(self.allowed_apps),
                "extra_denied_apps": list(self.extra_denied_apps), "reason": self.reason,
                "file_state": self.file_state, "path": str(keystone_file())}


def _app_list(value: Any, key: str) -> tuple[str, ...]:
    """A validated app list; raises BadInputError naming the problem."""
    if not isinstance(value, list):
        raise BadInputError(f"{key} must be a list of app names", code="keystone_invalid")
    if len(value) > MAX_APPS:
        raise BadInputError(f"{key} holds more than {MAX_APPS} apps", code="keystone_invalid")
    for item in value:
        if not isinstance(item, str) or not item.strip() or len(item) > MAX_APP_CHARS:
            raise BadInputError(f"{key} entries must be non-empty strings of at most {MAX_APP_CHARS} characters",
                                code="keystone_invalid")
    return tuple(dict.fromkeys(item.strip() for item in value))


def parse_document(document: Any) -> dict[str, Any]:
    """A normalised keystone document, or BadInputError (``keystone_invalid``); used by reads and writes."""
    if not isinstance(document, dict):
        raise BadInputError("the keystone must be a JSON object", code="keystone_invalid")
    unknown = sorted(str(key) for key in document if key not in KEYS)
    if unknown:
        raise BadInputError(f"unknown keystone key(s): {', '.join(unknown)}", code="keystone_invalid")
    enabled = document.get("enabled", False)
    if not isinstance(enabled, bool):
        raise BadInputError("enabled must be true or false", code="keystone_invalid")
    return {"enabled": enabled,
            "allowed_apps": list(_app_list(document.get("allowed_apps", []), "allowed_apps")),
            "extra_denied_apps": list(_app_list(document.get("extra_denied_apps", []), "extra_denied_apps"))}


def read_keystone() -> Keystone:
    """The keystone now; never raises, and anything doubtful is ``enabled=False`` with the reason."""
    path = keystone_file()
    read = read_json(path, max_bytes=256 * 1024)
    if read.state in (ReadState.ABSENT, ReadState.EMPTY):
        return Keystone(False, reason=f"computer use is off ({path} is {read.state.value}; the owner enables it "
                                      "with `kirocrew computer keystone enable`)", file_state=read.state.value)
    if read.state is not ReadState.DOCUMENT:
        where = f"{path}:{read.line}" if read.line else str(path)
        return Keystone(False, reason=f"computer use is off: {where} is {read.state.value}: {read.error}",
                        file_state=read.state.value)
    try:
        doc = parse_document(read.document)
    except BadInputError as exc:
        return Keystone(False, reason=f"computer use is off: {path}: {exc.message}", file_state="invalid")
    if read.document.get("enabled") is not True:
        return Keystone(False, tuple(doc["allowed_apps"]), tuple(doc["extra_denied_apps"]),
                        reason="computer use is off (enabled is not true)", file_state="document", document=doc)
    return Keystone(True, tuple(doc["allowed_apps"]), tuple(doc["extra_denied_apps"]),
                    reason="computer use is on", file_state="document", document=doc)


def _current_for_update() -> dict[str, Any]:
    """The stored document for a read-modify-write; a file we cannot judge is reported, never overwritten."""
    path = keystone_file()
    read = read_json(path, max_bytes=256 * 1024)
    if read.state in (ReadState.ABSENT, ReadState.EMPTY):
        return {"enabled": False, "allowed_apps": [], "extra_denied_apps": []}
    if read.state is not ReadState.DOCUMENT:
        raise KirocrewError(f"{path} is {read.state.value} ({read.error}); fix or remove it, then retry",
                            code="keystone_unusable")
    try:
        return parse_document(read.document)
    except BadInputError as exc:
        raise KirocrewError(f"{path}: {exc.message}; fix or remove it, then retry", code="keystone_unusable") from exc


def write_keystone(document: Any, *, action: str, actor: str = "owner") -> Keystone:
    """Replace the keystone with ``document`` (validated), atomically, and audit it. Owner paths only."""
    doc = parse_document(document)
    home.ensure_crew_home()
    write_json_atomic(keystone_file(), doc, mode=0o600)
    audit.record("computer_use.keystone", actor=actor, outcome="ok", action=action, enabled=doc["enabled"],
                 allowed_apps=doc["allowed_apps"], extra_denied_apps=doc["extra_denied_apps"])
    return read_keystone()


def _app_name(app: str) -> str:
    if not isinstance(app, str) or not app.strip() or len(app) > MAX_APP_CHARS:
        raise BadInputError(f"an app name is a non-empty string of at most {MAX_APP_CHARS} characters",
                            code="keystone_invalid")
    return app.strip()


def set_enabled(enabled: bool, *, actor: str = "owner") -> Keystone:
    doc = _current_for_update()
    doc["enabled"] = bool(enabled)
    return write_keystone(doc, action="enable" if enabled else "disable", actor=actor)


def allow_app(app: str, *, actor: str = "owner") -> Keystone:
    """Add ``app`` to ``allowed_apps`` (a non-empty list narrows computer use to the listed apps)."""
    name, doc = _app_name(app), _current_for_update()
    if name not in doc["allowed_apps"]:
        doc["allowed_apps"].append(name)
    return write_keystone(doc, action="allow", actor=actor)


def deny_app(app: str, *, actor: str = "owner") -> Keystone:
    """Add ``app`` to ``extra_denied_apps`` (refused on top of the built-in refusals)."""
    name, doc = _app_name(app), _current_for_update()
    if name not in doc["extra_denied_apps"]:
        doc["extra_denied_apps"].append(name)
    return write_keystone(doc, action="deny", actor=actor)
