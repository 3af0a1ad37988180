"""Origin overrides: send requests meant for one origin to another (a mirror, or a test fixture).

``--override-origin ORIGIN=URL`` of the connections launch gates (``kirocrew
connections l0``/``l1``) and of ``kirocrew serve`` is parsed here, so the three
read one syntax. The gates only redirect their own HTTP requests; ``serve``
also makes the mapping the process's :func:`active` one, which the connections
plugin applies to every provider URL it acts on (the MCP entry a Connect
installs, the mint, Test, Disconnect, the grant it stats). That lets the whole
Connect flow run against a loopback OAuth fixture while the registry itself
keeps refusing non-https providers.

``serve`` accepts overrides only for development: the gateway must bind
loopback and every target must be http(s) on a loopback host, so a mapping can
never point a real user's consent at another machine. The mapping lives in
this process only (never in the environment or a file), so a host a relay
starts in the background never inherits one.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from kirocrew_core.errors import BadInputError

#: The stable codes of a refused ``--override-origin`` (``serve`` exits 2 with them).
CODE_INVALID = "override_origin_invalid"
CODE_NOT_LOOPBACK = "override_origin_not_loopback"
CODE_REMOTE_GATEWAY = "override_origin_remote_gateway"
CODE_BACKGROUND = "override_origin_background"


def origin_of(url: str) -> str | None:
    """``scheme://host[:port]`` of an origin-only URL (no path beyond ``/``, query, fragment or userinfo)."""
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 - ValueError on a malformed port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        return None
    if parts.query or parts.fragment or "@" in parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc.lower()}"


def is_loopback_origin(origin: str) -> bool:
    """Whether ``origin``'s host is ``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    host = urlsplit(origin).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class OriginOverrides:
    """Where requests for an origin really go; empty in a real run."""

    mapping: Mapping[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.mapping)

    def apply(self, url: str) -> str:
        """``url`` with its origin replaced by the mapped one; unchanged when nothing maps it."""
        parts = urlsplit(url)
        origin = f"{parts.scheme.lower()}://{parts.netloc.lower()}"
        target = self.mapping.get(origin)
        if target is None:
            return url
        return target + url[len(origin):]

    def as_dict(self) -> dict[str, str]:
        return dict(self.mapping)


def parse_overrides(values: Iterable[str]) -> OriginOverrides:
    """``ORIGIN=URL`` pairs of two http(s) origins; :class:`BadInputError` ``override_origin_invalid`` otherwise."""
    mapping: dict[str, str] = {}
    for value in values:
        source, sep, target = value.partition("=")
        src, dst = origin_of(source), origin_of(target)
        if not sep or src is None or dst is None:
            raise BadInputError(f"expected ORIGIN=URL with two http(s) origins, got {value!r}", code=CODE_INVALID)
        mapping[src] = dst
    return OriginOverrides(mapping)


def require_development(overrides: OriginOverrides, *, gateway_loopback: bool, background: bool) -> None:
    """Refuse (exit 2) overrides a gateway must not run with: off loopback, to a non-loopback target,
    or in a background host (only a person starting ``serve`` for development may ask for them)."""
    if not overrides:
        return
    if background:
        raise BadInputError("--override-origin is for a development gateway started by hand, not a "
                            "background host", code=CODE_BACKGROUND)
    if not gateway_loopback:
        raise BadInputError("--override-origin is refused unless the gateway listens on a loopback address",
                            code=CODE_REMOTE_GATEWAY)
    for source, target in overrides.mapping.items():
        if not is_loopback_origin(target):
            raise BadInputError(f"--override-origin {source}={target}: the target must be http(s) on a "
                                "loopback host (127.0.0.1, ::1 or localhost)", code=CODE_NOT_LOOPBACK)


def announcement(overrides: OriginOverrides) -> list[str]:
    """The lines ``serve`` writes to stderr at start, one per mapping."""
    return [f"kirocrew: DEVELOPMENT: --override-origin: requests for {source} go to {target}"
            for source, target in sorted(overrides.mapping.items())]


_active = OriginOverrides()


def activate(overrides: OriginOverrides) -> None:
    """Make ``overrides`` this process's mapping (``serve`` calls it once, before the gateway starts)."""
    global _active
    _active = overrides


def active() -> OriginOverrides:
    """This process's mapping: empty unless ``kirocrew serve --override-origin`` set one."""
    return _active
