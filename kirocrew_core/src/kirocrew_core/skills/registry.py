"""``skill_discover`` and ``skill_fetch``: find skills in a registry over HTTP; never install.

The registry is the ``skills.registry_url`` config key (none by default). Its API:

* ``GET {base}/api/search?q=QUERY&limit=N`` → ``{"skills": [{"id": "owner/repo/skill", "name",
  "description"?, "installs"?, "source"?}]}`` (the search shape of the public skills.sh registry);
* ``GET {base}/api/skills/{owner}/{repo}/{skill}`` → ``{"id", "name"?, "files": [{"path",
  "content"}]}``: the skill's files, ``SKILL.md`` among them (kirocrew's own shape).

Every request is SSRF-safe: the host is resolved once, every address is checked (private,
loopback, link-local and other non-public ranges are refused unless
``skills.registry_allow_private``), and the connection goes to the checked address, so a second
resolution cannot steer it elsewhere. Redirects are not followed; a body over :data:`MAX_BODY_BYTES`
is cut off while streaming. The query is redacted before it leaves. Installing is the owner's
(:mod:`.install`): no tool here writes anything.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from kirocrew_core.contributions import CoreMcpTool
from kirocrew_core.errors import KirocrewError

if TYPE_CHECKING:
    from kirocrew_core.coretools.contract import ToolCall

MAX_BODY_BYTES = 1024 * 1024
#: ``skill_fetch`` shows the instruction file up to this many bytes, and then lists the other files.
INSTRUCTIONS_CAP = 32 * 1024
TIMEOUT_SECS = 10.0
DISCOVER_DEFAULT, DISCOVER_MAX = 10, 50
#: ``owner/repo/skill``: each part a plain name, so an id can never climb out of the API path.
_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}"
SKILL_ID = re.compile(rf"^{_PART}/{_PART}/{_PART}$")

DISCOVER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1, "maxLength": 500, "description": "What the skill should do."},
        "limit": {"type": "integer", "minimum": 1, "maximum": DISCOVER_MAX, "default": DISCOVER_DEFAULT},
        "provider": {"type": "string", "enum": ["registry"], "default": "registry",
                     "description": "The configured registry (skills.registry_url); the only provider."},
    },
    "required": ["query"],
    "additionalProperties": False,
}
FETCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "minLength": 5, "maxLength": 302,
               "description": "The skill's id as skill_discover gave it: owner/repo/skill."},
        "provider": {"type": "string", "enum": ["registry"], "default": "registry"},
    },
    "required": ["id"],
    "additionalProperties": False,
}


class RegistryError(KirocrewError):
    """A registry request that failed; ``code`` is the stable refusal code."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message, code=code)


@dataclass(frozen=True)
class RegistrySkill:
    id: str
    name: str
    description: str
    installs: int | None


@dataclass(frozen=True)
class SkillFile:
    path: str
    content: str


def registry_url() -> str:
    from kirocrew_core.config import get_value

    url = str(get_value("skills.registry_url"))
    if not url:
        raise RegistryError("no skills registry is configured (set skills.registry_url)", "registry_unconfigured")
    return url.rstrip("/")


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def checked_address(host: str, port: int, allow_private: bool) -> str:
    """The address to connect to: every address ``host`` resolves to must be public (or private is allowed)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise RegistryError(f"the registry host {host} does not resolve", "registry_unreachable") from exc
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise RegistryError(f"the registry host {host} does not resolve", "registry_unreachable")
    if not allow_private:
        blocked = [a for a in addresses if not _public(a)]
        if blocked:
            raise RegistryError(f"the registry host {host} resolves to a private or local address ({blocked[0]}); "
                                "set skills.registry_allow_private to allow it", "address_refused")
    return addresses[0]


def get_json(url: str, *, allow_private: bool | None = None) -> Any:
    """GET ``url`` at its checked address, streaming at most :data:`MAX_BODY_BYTES`, and parse the JSON."""
    import httpx

    if allow_private is None:
        from kirocrew_core.config import get_value

        allow_private = bool(get_value("skills.registry_allow_private"))
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RegistryError("the registry URL must be http(s)", "registry_unconfigured")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    address = checked_address(parts.hostname, port, allow_private)
    netloc = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
    target = parts._replace(netloc=netloc).geturl()
    headers = {"Host": parts.netloc.rsplit("@", 1)[-1], "Accept": "application/json"}
    extensions = {"sni_hostname": parts.hostname} if parts.scheme == "https" else {}
    body = bytearray()
    try:
        with httpx.Client(timeout=TIMEOUT_SECS, follow_redirects=False, trust_env=False) as client, \
                client.stream("GET", target, headers=headers, extensions=extensions) as response:
            if response.status_code != 200:
                raise RegistryError(f"the registry answered HTTP {response.status_code}",
                                    "not_found" if response.status_code == 404 else "registry_error")
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_BODY_BYTES:
                    raise RegistryError(f"the registry's answer is over {MAX_BODY_BYTES} bytes", "over_capacity")
    except httpx.HTTPError as exc:
        raise RegistryError(f"the registry cannot be reached ({type(exc).__name__})", "registry_unreachable") from exc
    try:
        return json.loads(body)
    except ValueError as exc:
        raise RegistryError("the registry's answer is not JSON", "registry_error") from exc


def search(query: str, limit: int) -> list[RegistrySkill]:
    """Skills matching ``query`` (already redacted: :func:`discover_text` redacts before anything is sent)."""
    from urllib.parse import urlencode

    data = get_json(f"{registry_url()}/api/search?{urlencode({'q': query, 'limit': limit})}")
    entries = data.get("skills") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise RegistryError("the registry's answer has no skills list", "registry_error")
    found = []
    for entry in entries[:limit]:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str) or not SKILL_ID.match(entry["id"]):
            continue
        installs = entry.get("installs")
        found.append(RegistrySkill(entry["id"], _one_line(entry.get("name") or entry["id"].rsplit("/", 1)[1]),
                                   _one_line(entry.get("description") or ""),
                                   installs if isinstance(installs, int) else None))
    return found


def _one_line(value: object, limit: int = 200) -> str:
    """A registry's text as one line of at most ``limit`` characters: it may not forge lines of the result."""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[:limit] + "…"


def fetch(skill_id: str) -> list[SkillFile]:
    """The skill's files as the registry gives them; paths are checked, never trusted."""
    if not SKILL_ID.match(skill_id):
        raise RegistryError("id must be owner/repo/skill", "invalid_arguments")
    data = get_json(f"{registry_url()}/api/skills/{quote(skill_id, safe='/')}")
    entries = data.get("files") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise RegistryError("the registry's answer has no files list", "registry_error")
    files = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
            raise RegistryError("the registry gave a file without text content", "registry_error")
        path = entry.get("path")
        if not isinstance(path, str) or not safe_relative(path):
            raise RegistryError(f"the registry gave an unsafe file path {str(path)[:80]!r}", "registry_error")
        files.append(SkillFile(path, entry["content"]))
    if not any(f.path == "SKILL.md" for f in files):
        raise RegistryError("the skill has no SKILL.md", "registry_error")
    return files


def safe_relative(path: str) -> bool:
    """A plain relative path: no root, no ``..``, no empty or hidden-control parts, no backslash."""
    parts = path.split("/")
    return (0 < len(path) <= 255 and "\\" not in path and "\x00" not in path
            and all(p and p not in (".", "..") for p in parts) and len(parts) <= 8)


def discover_text(query: str, limit: int) -> str:
    from kirocrew_core.redaction import redact_secrets

    query = redact_secrets(query)
    found = search(query, limit)
    shown = query if len(query) <= 80 else query[:80] + "…"
    lines = [f"Registry skills matching '{shown}' ({len(found)}) — NOT installed."]
    for skill in found:
        installs = f" · {skill.installs} installs" if skill.installs is not None else ""
        lines.append(f"- `{skill.id}` {skill.name}{installs}" + (f": {skill.description}" if skill.description else ""))
    if found:
        lines.append("Read one with skill_fetch(id). Only the owner installs (kirocrew skills install ID).")
    return "\n".join(lines)


def fetch_text(skill_id: str) -> str:
    from kirocrew_core.redaction import redact_secrets

    files = fetch(skill_id)
    instructions = next(f for f in files if f.path == "SKILL.md").content
    data = instructions.encode("utf-8")
    cut = len(data) > INSTRUCTIONS_CAP
    if cut:
        instructions = data[:INSTRUCTIONS_CAP].decode("utf-8", "ignore") + "\n…[cut at 32 KiB]"
    others = [f"- {f.path} ({len(f.content.encode('utf-8'))} bytes)" for f in files if f.path != "SKILL.md"]
    text = f"Skill {skill_id} from the registry — NOT installed (only the owner installs).\n\n{instructions.rstrip()}"
    if others:
        text += "\n\nOther files:\n" + "\n".join(others)
    return redact_secrets(text)


def _refusal(exc: RegistryError) -> Exception:
    from kirocrew_core.coretools.contract import ToolRefused

    return ToolRefused(str(exc), code=exc.code)


async def skill_discover(args: dict[str, Any], call: ToolCall) -> str:
    call.acting_session("searches the skills registry")
    try:
        return await asyncio.to_thread(discover_text, str(args["query"]), int(args.get("limit", DISCOVER_DEFAULT)))
    except RegistryError as exc:
        raise _refusal(exc) from exc


async def skill_fetch(args: dict[str, Any], call: ToolCall) -> str:
    call.acting_session("reads a skill from the registry")
    try:
        return await asyncio.to_thread(fetch_text, str(args["id"]))
    except RegistryError as exc:
        raise _refusal(exc) from exc


def registry_tools() -> list[CoreMcpTool]:
    return [
        CoreMcpTool("skill_discover", "Search the configured skills registry for skills to suggest to the owner "
                    "(nothing is installed; the query is redacted before it is sent).",
                    DISCOVER_SCHEMA, skill_discover, read_only=True, identity="lenient"),
        CoreMcpTool("skill_fetch", "Read a registry skill's SKILL.md (up to 32 KiB) and the list of its other files, "
                    "so the owner can decide to install it; nothing is installed.",
                    FETCH_SCHEMA, skill_fetch, read_only=True, identity="lenient"),
    ]
