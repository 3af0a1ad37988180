"""The dashboard's Computer use page (``/computer``) and the read-only JSON it shows.

The page is rendered on the server from the same functions as its JSON twins
(``GET /api/computer-use/doctor``, ``GET /api/computer-use/calls``): the doctor
report of ``kirocrew computer doctor`` and the newest computer-use records of
the security event log, already redacted by the audit. Its one script,
``static/computer.js``, saves the keystone through ``PUT /api/computer-use/config``.
Starlette is imported inside functions.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

PACKAGE = "kirocrew_computer"
#: How many of the log's newest records are scanned for computer-use ones.
SCAN_RECORDS = 2000
#: How many computer-use records the page and ``/api/computer-use/calls`` show at most.
MAX_CALLS = 50
EVENT_PREFIX = "computer_use."


def recent_calls(limit: int = MAX_CALLS) -> list[dict[str, Any]]:
    """The newest computer-use records of the security event log, newest first (as logged, so redacted)."""
    from kirocrew_core import audit

    records = [r for r in audit.tail(SCAN_RECORDS) if str(r.get("event", "")).startswith(EVENT_PREFIX)]
    return list(reversed(records))[:limit]


def doctor_findings(report: dict[str, Any]) -> list[dict[str, str]]:
    """``kirocrew computer doctor``'s report as rows of ``{name, status, summary}`` (status ok/warn/fail)."""
    keystone, backend = report["keystone"], report["backend"]
    display, bus = report["display"], report["accessibility_bus"]
    x11, wayland = display["DISPLAY"] or "(unset)", display["WAYLAND_DISPLAY"] or "(unset)"
    rows = [
        {"name": "Platform", "status": "ok" if report["platform"].startswith("linux") else "warn",
         "summary": report["platform"]},
        {"name": "Keystone", "status": "ok" if keystone["enabled"] else "warn", "summary": keystone["reason"]},
        {"name": "Display", "status": "ok" if display["DISPLAY"] else "fail",
         "summary": f"DISPLAY={x11} WAYLAND_DISPLAY={wayland}"},
        {"name": "Accessibility bus", "status": "ok" if bus["DBUS_SESSION_BUS_ADDRESS"] else "warn",
         "summary": f"AT_SPI_BUS_ADDRESS={bus['AT_SPI_BUS_ADDRESS'] or '(unset)'}, "
                    f"session bus {'set' if bus['DBUS_SESSION_BUS_ADDRESS'] else 'unset'}"},
        {"name": "Backend", "status": "ok" if backend["available"] else "fail",
         "summary": f"{backend['name']} ({'available' if backend['available'] else 'unavailable'}: "
                    f"{backend['reason'] or 'ok'})"},
    ]
    rows += [{"name": "Skipped backend", "status": "warn", "summary": line} for line in backend["skipped"]]
    return rows



async def doctor(request: Request) -> Response:
    """``GET /api/computer-use/doctor``: the doctor report, as ``kirocrew computer doctor --json`` prints it."""
    from starlette.responses import JSONResponse

    from kirocrew_computer.cli import doctor_report

    return JSONResponse(await asyncio.to_thread(doctor_report))


async def calls(request: Request) -> Response:
    """``GET /api/computer-use/calls``: ``{"calls": [...]}``, the newest computer-use audit records first."""
    from starlette.responses import JSONResponse

    return JSONResponse({"calls": await asyncio.to_thread(recent_calls)})


async def computer_page(request: Request) -> Response:
    """``GET /computer``: the keystone switch and app lists, the doctor's findings and the recent audited calls."""
    from kirocrew_core.gateway.shell import home_relative, render_page

    from kirocrew_computer.cli import doctor_report
    from kirocrew_computer.keystone import MAX_APP_CHARS, MAX_APPS

    report = await asyncio.to_thread(doctor_report)
    return render_page(request, f"{PACKAGE}/computer.html", title="Computer use", keystone=report["keystone"],
                       findings=doctor_findings(report), keystone_path=home_relative(report["keystone"]["path"]),
                       calls=await asyncio.to_thread(recent_calls),
                       max_apps=MAX_APPS, max_app_chars=MAX_APP_CHARS, max_calls=MAX_CALLS)
