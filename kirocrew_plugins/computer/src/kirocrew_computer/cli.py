"""``kirocrew computer``: the owner's harness (apps, doctor, call) and the keystone switch.

``apps`` and ``call`` go through the same chokepoint as the MCP server, so
they are gated by the keystone and audited like any agent call. ``call`` has
no MCP twin on purpose: a tool that runs other tools would launder their gate
decisions. ``doctor`` is not gated, it only reports.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from kirocrew_core.errors import BadInputError


@click.group("computer")
def computer() -> None:
    """Computer use: the keystone, a doctor, and a harness for the computer-use tools."""


def _run(calls: list[tuple[str, Any]]) -> list[Any]:
    import asyncio

    from kirocrew_computer.chokepoint import Chokepoint

    chokepoint = Chokepoint()
    try:
        return asyncio.run(chokepoint.run_calls(calls))
    finally:
        chokepoint.close()


@computer.command("apps")
def apps() -> None:
    """List the apps computer use may act on (gated; the twin of computer_list_apps)."""
    (reply,) = _run([("computer_list_apps", {})])
    click.echo(reply.text)
    if not reply.ok:
        sys.exit(1)


def _parse_pairs(tool: str, pairs: tuple[str, ...]) -> dict[str, Any]:
    """``k=v`` words as arguments: JSON values, except where the tool's schema wants a string."""
    from kirocrew_computer.schemas import TOOLS_BY_NAME

    properties = TOOLS_BY_NAME[tool].input_schema["properties"] if tool in TOOLS_BY_NAME else {}
    args: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise BadInputError(f"arguments are key=value words, got {pair!r}", code="invalid_arguments")
        if properties.get(key, {}).get("type") == "string":
            args[key] = raw
            continue
        try:
            args[key] = json.loads(raw)
        except ValueError:
            args[key] = raw
    return args


def _parse_calls(text: str) -> list[tuple[str, Any]]:
    try:
        calls = json.loads(text)
    except ValueError as exc:
        raise BadInputError(f"--calls is not JSON: {exc}", code="invalid_arguments") from exc
    if not isinstance(calls, list) or not calls or len(calls) > 100:
        raise BadInputError("--calls must be a JSON list of 1 to 100 {\"tool\", \"args\"} objects",
                            code="invalid_arguments")
    out = []
    for item in calls:
        if not isinstance(item, dict) or not isinstance(item.get("tool"), str) or set(item) - {"tool", "args"}:
            raise BadInputError("each call is {\"tool\": name, \"args\": {…}}", code="invalid_arguments")
        out.append((item["tool"], item.get("args", {})))
    return out


@computer.command("call", context_settings={"ignore_unknown_options": True})
@click.argument("tool", required=False)
@click.argument("pairs", nargs=-1)
@click.option("--calls", "calls_json", help='Run a JSON list of {"tool": …, "args": {…}} in order, in one process.')
@click.option("--json", "as_json", is_flag=True, help="Print [{tool, text, code}, …].")
def call(tool: str | None, pairs: tuple[str, ...], calls_json: str | None, as_json: bool) -> None:
    """Run computer-use tools through the gated chokepoint (exit 1 if any call was refused).

    \b
      kirocrew computer call computer_get_state app=gedit
      kirocrew computer call --calls '[{"tool":"computer_get_state","args":{"app":"gedit"}},
                                       {"tool":"computer_click","args":{"app":"gedit","element_index":3}}]'
    """
    if tool is not None and calls_json is None:
        calls = [(tool, _parse_pairs(tool, pairs))]
    elif calls_json is not None and tool is None:
        calls = _parse_calls(calls_json)
    else:
        raise BadInputError("give a tool with key=value arguments, or --calls", code="invalid_arguments")
    replies = _run(calls)
    if as_json:
        click.echo(json.dumps([{"tool": r.tool, "text": r.text, "code": r.code} for r in replies], indent=2))
    else:
        for number, reply in enumerate(replies):
            if len(replies) > 1:
                click.echo(f"{'' if number == 0 else chr(10)}== {reply.tool} ==")
            click.echo(reply.text)
    if not all(reply.ok for reply in replies):
        sys.exit(1)


def doctor_report() -> dict[str, Any]:
    """Platform, keystone, display, accessibility bus and the chosen backend (never gated, never acts)."""
    from kirocrew_computer.chokepoint import choose_backend
    from kirocrew_computer.keystone import read_keystone

    backend, skipped = choose_backend()
    try:
        available, reason = backend.available()
        name = backend.name
    finally:
        backend.close()
    return {
        "platform": sys.platform,
        "keystone": read_keystone().as_dict(),
        "display": {"DISPLAY": os.environ.get("DISPLAY", ""), "WAYLAND_DISPLAY": os.environ.get("WAYLAND_DISPLAY", "")},
        "accessibility_bus": {"AT_SPI_BUS_ADDRESS": os.environ.get("AT_SPI_BUS_ADDRESS", ""),
                              "DBUS_SESSION_BUS_ADDRESS": bool(os.environ.get("DBUS_SESSION_BUS_ADDRESS"))},
        "backend": {"name": name, "available": available, "reason": reason, "skipped": skipped},
    }


@computer.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def doctor(as_json: bool) -> None:
    """Report what computer use would need here (not gated; touches no app)."""
    report = doctor_report()
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    keystone, backend = report["keystone"], report["backend"]
    click.echo(f"platform: {report['platform']}")
    click.echo(f"keystone: {'on' if keystone['enabled'] else 'off'} ({keystone['reason']})")
    if keystone["allowed_apps"]:
        click.echo(f"  allowed_apps: {', '.join(keystone['allowed_apps'])}")
    if keystone["extra_denied_apps"]:
        click.echo(f"  extra_denied_apps: {', '.join(keystone['extra_denied_apps'])}")
    display = report["display"]
    x11, wayland = display["DISPLAY"] or "(unset)", display["WAYLAND_DISPLAY"] or "(unset)"
    click.echo(f"display: DISPLAY={x11} WAYLAND_DISPLAY={wayland}")
    bus = report["accessibility_bus"]
    click.echo(f"accessibility bus: AT_SPI_BUS_ADDRESS={bus['AT_SPI_BUS_ADDRESS'] or '(unset)'}, "
               f"session bus {'set' if bus['DBUS_SESSION_BUS_ADDRESS'] else 'unset'}")
    click.echo(f"backend: {backend['name']} ({'available' if backend['available'] else 'unavailable'}: "
               f"{backend['reason'] or 'ok'})")
    for line in backend["skipped"]:
        click.echo(f"  skipped: {line}")


@computer.group("keystone")
def keystone() -> None:
    """Show or change the computer-use keystone (owner only; every change is audited)."""


def _show(state: Any) -> None:
    click.echo(json.dumps(state.as_dict(), indent=2))


@keystone.command("show")
def keystone_show() -> None:
    """Print the keystone as read (fail-closed: anything doubtful reads as off, with the reason)."""
    from kirocrew_computer.keystone import read_keystone

    _show(read_keystone())


@keystone.command("enable")
def keystone_enable() -> None:
    """Turn computer use on for agents (their next tools/list shows the tools)."""
    from kirocrew_computer.keystone import set_enabled

    _show(set_enabled(True))


@keystone.command("disable")
def keystone_disable() -> None:
    """Turn computer use off; every further call is refused."""
    from kirocrew_computer.keystone import set_enabled

    _show(set_enabled(False))


@keystone.command("allow")
@click.argument("app")
def keystone_allow(app: str) -> None:
    """Add APP to allowed_apps (a non-empty list narrows computer use to those apps)."""
    from kirocrew_computer.keystone import allow_app

    _show(allow_app(app))


@keystone.command("deny")
@click.argument("app")
def keystone_deny(app: str) -> None:
    """Add APP to extra_denied_apps."""
    from kirocrew_computer.keystone import deny_app

    _show(deny_app(app))
