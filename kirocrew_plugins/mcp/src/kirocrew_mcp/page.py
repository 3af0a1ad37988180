"""The dashboard's MCP servers page (``/mcp``): the spec's Integrations page.

Rendered on the server from :func:`kirocrew_mcp.api.listing`, the function
``GET /api/mcp`` answers with, so the page and its JSON twin cannot disagree.
Its one script, ``static/mcp.js``, stages badge and tool clicks, then writes
only through the owner-authenticated routes: ``POST /api/mcp/apply``,
``/api/mcp/probe``, ``/api/mcp/servers``, ``/api/mcp/cleanup`` and ``/api/sessions/restart``. After
a write it re-reads this page and swaps the table in, so there is one renderer.
Starlette is imported inside functions.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kirocrew_mcp.hookspecs import ServerManager

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from kirocrew_core.plugins import KirocrewPluginManager

log = logging.getLogger(__name__)

PACKAGE = "kirocrew_mcp"
#: Why a row cannot be edited here, by the ``managedBy`` value the page gives it.
MANAGED_BY_KIROCREW = "kirocrew"
#: A server another plugin says it manages (``mcp_server_managers()``).
MANAGED_ELSEWHERE = "plugin"

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


def server_managers(pm: KirocrewPluginManager, rows: list[dict[str, Any]]) -> dict[str, ServerManager]:
    """``{server name: ServerManager}`` from every ``mcp_server_managers()`` implementation (first one wins)."""
    from kirocrew_core.plugins import call_hook

    def problem(value: Any) -> str | None:
        if value is None:
            return None
        if not (isinstance(value, Mapping) and all(
                isinstance(k, str) and isinstance(v, ServerManager) for k, v in value.items())):
            return f"returned {type(value).__name__}, not a mapping of server names to ServerManager"
        pages = [v.page for v in value.values() if v.page is not None]
        if not all(page.startswith("/") and not page.startswith("//") for page in pages):
            return f"named a page that is not a dashboard path: {pages!r}"
        return None

    # A failed answer is logged by plugin name (on_error="skip") and marks nothing.
    call = call_hook(pm, "mcp_server_managers", on_error="skip", check=problem, servers=rows)
    names = {row["name"] for row in rows}
    managers: dict[str, ServerManager] = {}
    for result in call.contributions:
        for name, manager in result.value.items():
            if name in names:
                managers.setdefault(name, manager)
    return managers


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


def page_rows(listing: dict[str, Any], managers: Mapping[str, ServerManager]) -> list[dict[str, Any]]:
    """The listing's rows with what the template needs beside the JSON: status, last probed, managed by."""
    out = []
    for row in listing["servers"]:
        view = dict(row)
        view["statusView"] = status_view(row)
        view["probedView"] = probed_at_view(row.get("probedAt"))
        manager = managers.get(row["name"])
        view["managedPage"] = None
        if row.get("managed"):
            view["managedBy"], view["managedLabel"] = MANAGED_BY_KIROCREW, "Managed by kirocrew"
        elif manager is not None:
            view["managedBy"], view["managedLabel"] = MANAGED_ELSEWHERE, f"Managed by {manager.label}"
            view["managedPage"] = manager.page
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
    managers = server_managers(pm, found["servers"])
    scopes = [{**s, "shown_path": home_relative(s["path"])} for s in found["scopes"]]
    shared = [s for s in scopes if s["kind"] != KIND_CREW]
    crew = next(s for s in scopes if s["kind"] == KIND_CREW)
    return render_page(request, f"{PACKAGE}/mcp.html", title="MCP servers", rows=page_rows(found, managers),
                       scopes=scopes, shared_scopes=shared, crew_scope=crew,
                       problems=[{**p, "shown_path": home_relative(p["path"])} for p in found["problems"]],
                       stale=[{**s, "shown_path": home_relative(s["path"])} for s in found["staleManaged"]],
                       probing=found["backgroundProbe"]["inFlight"],
                       limits={"name": 128, "command": add.MAX_COMMAND_CHARS, "url": add.MAX_URL_CHARS,
                               "args": add.MAX_ARGS, "env": add.MAX_ENV, "headers": add.MAX_HEADERS})

