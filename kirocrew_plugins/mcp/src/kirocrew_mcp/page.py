"""The dashboard's MCP servers page (``/mcp``): the spec's Integrations page.

Rendered on the server from :func:`kirocrew_mcp.api.listing`, the function
``GET /api/mcp`` answers with, so the page and its JSON twin cannot disagree.
Its one script, ``static/mcp.js``, stages badge and tool clicks, then writes
only through the owner-authenticated routes: ``POST /api/mcp/apply``,
``/api/mcp/probe``, ``/api/mcp/servers`` and ``/api/sessions/restart``. After
a write it re-reads this page and swaps the table in, so there is one renderer.
Starlette is imported inside functions.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from kirocrew_core.plugins import KirocrewPluginManager

log = logging.getLogger(__name__)

PACKAGE = "kirocrew_mcp"
#: Why a row cannot be edited here, by the ``managedBy`` value the page gives it.
MANAGED_BY_KIROCREW = "kirocrew"
MANAGED_BY_CONNECTIONS = "connections"

DECLARED_HINT = ("Tool list read from the package's declaration; the server was not spawned to verify it "
                 "starts.")


def status_view(row: dict[str, Any]) -> dict[str, str]:
    """The status cell of a row: ``label``, ``tone`` (ok/warn/fail/muted) and a ``hint`` sentence (maybe empty).

    ``needs_auth`` has three readings (reference §1.5): sign-in required, signed
    in (a grant exists but nothing proves it still works) and not verified;
    only explicit booleans count.
    """
    status = row.get("status")
    name = str(row.get("name", ""))
    if status == "ok" and row.get("probeMode") == "declared":
        return {"label": "Declared", "tone": "warn", "hint": DECLARED_HINT}
    if status == "needs_auth":
        if row.get("authChallenge") is True and row.get("authGrantPresent") is False:
            return {"label": "Sign-in required", "tone": "warn",
                    "hint": "The server asks for an OAuth sign-in. Start a new kiro-cli session and send any "
                            "message to sign in, then use the Probe MCP servers button; this row will then "
                            "read Signed in."}
        if row.get("authChallenge") is True and row.get("authGrantPresent") is True:
            return {"label": "Signed in", "tone": "muted",
                    "hint": "A sign-in for this server is stored; the dashboard cannot confirm it is still "
                            "valid until a session uses it."}
        return {"label": "Not verified", "tone": "warn",
                "hint": f"{name} needs a sign-in that Kiro CLI keeps; the dashboard cannot see the "
                        "authorization, so it cannot say whether it is done."}
    labels = {"ok": ("Online", "ok"), "error": ("Failed", "fail"), "outdated": ("Outdated", "warn"),
              "disabled": ("Off", "muted"), "probing": ("Probing…", "muted")}
    label, tone = labels.get(str(status), ("Unknown", "warn"))
    hint = ""
    if status == "outdated":
        hint = "The last probe is older than 30 minutes; probe again for a fresh result."
    elif status == "unknown":
        hint = "Not probed yet."
    return {"label": label, "tone": tone, "hint": hint}


def probed_at_view(probed_at: float | None, now: dt.datetime | None = None) -> dict[str, str] | None:
    """``{"iso", "short", "full"}`` for the Last probed line (time only when it is today), or None."""
    if probed_at is None:
        return None
    when = dt.datetime.fromtimestamp(probed_at).astimezone()
    today = (now or dt.datetime.now().astimezone()).date()
    short = when.strftime("%H:%M") if when.date() == today else when.strftime("%Y-%m-%d %H:%M")
    return {"iso": when.isoformat(timespec="seconds"), "short": short,
            "full": when.strftime("%Y-%m-%d %H:%M:%S %Z")}


def connection_servers(pm: KirocrewPluginManager) -> dict[str, str]:
    """``"<slug>\\0<endpoint>"`` -> provider name for what kirocrew-connections manages, ``{}`` without it.

    A row is the provider's when its name is the provider's slug and its URL
    is the registry's ``mcp_url`` (reference §1.8). kirocrew-connections is
    optional: when it is not loaded in this gateway no row is its.
    """
    if pm.get_plugin("connections") is None:
        return {}
    try:
        from kirocrew_connections.disconnect import normalized_endpoint
        from kirocrew_connections.registry import load_registry

        providers = load_registry(pm).visible()
    except Exception as exc:  # noqa: BLE001 - a broken registry must not take the MCP page down
        log.warning("MCP page: could not read the connections registry: %s", exc)
        return {}
    return {f"{p.slug}\x00{normalized_endpoint(p.mcp_url)}": p.name for p in providers}


def _connection_owner(row: dict[str, Any], owners: dict[str, str]) -> str | None:
    if not owners or not isinstance(row.get("url"), str):
        return None
    from kirocrew_connections.disconnect import normalized_endpoint

    return owners.get(f"{row['name']}\x00{normalized_endpoint(row['url'])}")


def launch_line(row: dict[str, Any]) -> tuple[str, str]:
    """What starts the server, short (the command's file name and its args, or the URL) and in full."""
    from pathlib import PurePath

    if isinstance(row.get("url"), str):
        return row["url"], row["url"]
    command = row.get("command") or ""
    if not command:
        return "—", ""
    args = [str(a) for a in row.get("args", [])]
    return " ".join([PurePath(command).name, *args]), " ".join([command, *args])


def page_rows(listing: dict[str, Any], owners: dict[str, str]) -> list[dict[str, Any]]:
    """The listing's rows with what the template needs beside the JSON: status, last probed, managed by."""
    out = []
    for row in listing["servers"]:
        view = dict(row)
        view["statusView"] = status_view(row)
        view["probedView"] = probed_at_view(row.get("probedAt"))
        provider = _connection_owner(row, owners)
        if row.get("managed"):
            view["managedBy"], view["managedLabel"] = MANAGED_BY_KIROCREW, "Managed by kirocrew"
        elif provider is not None:
            view["managedBy"], view["managedLabel"] = MANAGED_BY_CONNECTIONS, "Managed by Connections"
            view["provider"] = provider
        else:
            view["managedBy"], view["managedLabel"] = "", ""
        view["launch"], view["launchFull"] = launch_line(row)
        out.append(view)
    return out


async def mcp_page(request: Request) -> Response:
    """``GET /mcp``: every server with its scope badges, status, tools and actions; problems; the add form."""
    from kirocrew_core.gateway.shell import home_relative, render_page

    from kirocrew_mcp import add
    from kirocrew_mcp.api import listing
    from kirocrew_mcp.scopes import KIND_CREW

    found = await listing(request)
    pm = request.app.state.kirocrew.pm
    owners = connection_servers(pm)
    scopes = [{**s, "shown_path": home_relative(s["path"])} for s in found["scopes"]]
    shared = [s for s in scopes if s["kind"] != KIND_CREW]
    crew = next(s for s in scopes if s["kind"] == KIND_CREW)
    return render_page(request, f"{PACKAGE}/mcp.html", title="MCP servers", rows=page_rows(found, owners),
                       scopes=scopes, shared_scopes=shared, crew_scope=crew,
                       problems=[{**p, "shown_path": home_relative(p["path"])} for p in found["problems"]],
                       probing=found["backgroundProbe"]["inFlight"],
                       connections_page=pm.get_plugin("connections") is not None,
                       limits={"name": 128, "command": add.MAX_COMMAND_CHARS, "url": add.MAX_URL_CHARS,
                               "args": add.MAX_ARGS, "env": add.MAX_ENV, "headers": add.MAX_HEADERS})

