"""``kirocrew cron …``: the eight kirocrew-cron tools as shell commands, plus history, import, adopt, preview.

Each twin builds one tool's arguments and calls that tool on the host's ``kirocrew-cron``
server as a ``cli`` client (the host is started in the background if none runs), so the
command and the tool agree by construction: it prints the tool's text (``--json``: the tool's
JSON answer). The CLI acts as the person: it sees and changes every job, and the jobs it adds
belong to the person (no session sees them).

``KIROCREW_NO_HOST=1``: the same tool handlers run in this process against the store,
holding the store's owner lock for the command (the one-writer rule; a host starting
meanwhile waits for it). Nothing fires without a host, so ``trigger`` answers ``host_required``.

``history``, ``import``, ``adopt`` and ``preview`` are not tools: they go to the host's
``kirocrew-cron-admin`` server (:mod:`kirocrew_cron.admin`), which knows who calls (a session
reads only its own jobs' history; the other three are the person's) and is where jobs run.
Without a host they run the same handlers in process as the person (``adopt`` needs the host).

Registered lazily by :mod:`kirocrew_cron.plugin`; the store, the mcp SDK and the tools are
imported only inside a command that runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from kirocrew_cron.model import CATCH_UP_MAX_LIMIT, CATCH_UPS, HISTORY_PER_JOB

SERVER_NAME = "kirocrew-cron"


# -- calling a tool ---------------------------------------------------------------------------------

def call_tool(tool: str, arguments: dict[str, Any]) -> str:
    """One kirocrew-cron tool call, through the host or (``KIROCREW_NO_HOST=1``) in process; its text."""
    from kirocrew_core.host import twin

    return twin.call(SERVER_NAME, tool, arguments, lambda: _in_process(tool, arguments))


async def _in_process(tool: str, arguments: dict[str, Any]) -> tuple[str, str | None]:
    """The tool in this process, validated and answered as the hosted server would, the owner lock held."""
    from kirocrew_cron import store as store_module
    from kirocrew_cron.offline import OfflineCronHost
    from kirocrew_cron.server import call_as_person

    # Blocking while the lock is waited for is fine: this loop runs this one command.
    with store_module.owner_lock(), store_module.CronStore.open() as store:
        host = OfflineCronHost(store)
        return await call_as_person(lambda: host, tool, arguments)


def _echo(text: str) -> None:
    click.echo(text.rstrip("\n"))


def _echo_json(text: str) -> None:
    """A tool's JSON answer, indented for a person (still one JSON document for a script)."""
    try:
        click.echo(json.dumps(json.loads(text), indent=2, ensure_ascii=False))
    except ValueError:
        _echo(text)


# -- options shared by add and update ---------------------------------------------------------------

def _options(update: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The job options of ``add`` (and ``update``, where each one given changes that field only)."""
    options = [
        click.option("--every", type=click.IntRange(1), metavar="SECS", help="Run every SECS seconds (60 at least)."),
        click.option("--cron", "cron_expr", metavar="EXPR",
                     help="A 5-field cron expression (min hour day month weekday), in the job's time zone."),
        click.option("--at", type=float, metavar="TS", help="Run once at this Unix time; the job then removes itself."),
        click.option("--delay", type=float, metavar="SECS", help="Run once, SECS seconds from now."),
        click.option("--at-time", metavar="TEXT",
                     help="Run once at a time in words: '5pm', 'tomorrow 9:30am', 'in 2 hours', '2026-03-28 14:00'."),
        click.option("--timezone", metavar="ZONE", help="IANA zone for --cron and --skip-date (default: cron.timezone, "
                                                        "then UTC)" + ("; '' resets." if update else ".")),
        click.option("--skip-date", "skip_dates", multiple=True, metavar="YYYY-MM-DD",
                     help="A date (in the job's zone) it does not run; repeat for more"
                          + (" (replaces the list)." if update else ".")),
        click.option("--agent", metavar="NAME", help="The Kiro agent the run uses" + (
            " ('' resets to the default, kirocrew)." if update else " (default: kirocrew, the rendered agent).")),
        click.option("--model", metavar="MODEL", help="The model ('' or auto: the agent's own)."),
        click.option("--authority", metavar="NAME",
                     help="The execution authority of the run or command (default: unrestricted)."),
        click.option("--cwd", type=click.Path(file_okay=False, exists=True, resolve_path=True), metavar="DIR",
                     help="The directory the job works in" + ("." if update else " (default: the current one).")),
        click.option("--silent/--no-silent", default=None, help="Publish no notification after a run."),
        click.option("--fresh-session/--persistent-session", "fresh_session", default=None,
                     help="A new conversation each run, instead of one kept across runs (the default)."),
        click.option("--minimal-context/--full-context", "minimal_context", default=None,
                     help="A lean prompt: the previous result capped at 2000 characters."),
        click.option("--strict-schedule/--jitter", "strict_schedule", default=None,
                     help="Run exactly on schedule, without the spreading jitter of hourly and daily jobs."),
        click.option("--timeout", type=click.IntRange(0, 3600), metavar="SECS",
                     help="A command job's bound (0: 300 s)."),
        click.option("--timeout-secs", type=click.IntRange(1, 86400), metavar="SECS",
                     help="A run's whole budget (default 1800)."),
        click.option("--catch-up", type=click.Choice(CATCH_UPS),
                     help="Due runs missed while no host ran: skip them, run once (default), or run each."),
        click.option("--catch-up-max", type=click.IntRange(1, CATCH_UP_MAX_LIMIT), metavar="N",
                     help="With --catch-up all: at most N runs (default 10)."),
        click.option("--json", "as_json", is_flag=True, help="Print the job as JSON."),
    ]
    if update:
        options += [
            click.option("--name", help="A new name."),
            click.option("--message", help="A new prompt (an agent job)."),
            click.option("--command", help="A new command (a command job)."),
            click.option("--no-skip-dates", is_flag=True, help="Clear the skip dates."),
        ]
    else:
        options.append(click.option("--command", help="Run this shell command instead of an agent (no MESSAGE)."))

    def apply(function: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            function = option(function)
        return function

    return apply


_SCHEDULE_ARGS = ("every", "cron_expr", "at", "delay", "at_time")
_PLAIN_ARGS = ("timezone", "agent", "model", "authority", "timeout", "timeout_secs", "catch_up", "catch_up_max",
               "silent", "minimal_context", "strict_schedule", "name", "message", "command")


def _job_arguments(options: dict[str, Any]) -> dict[str, Any]:
    """The tool arguments of the options given (an option left out changes nothing)."""
    arguments = {name: options[name] for name in (*_SCHEDULE_ARGS, *_PLAIN_ARGS)
                 if options.get(name) is not None}
    if options.get("fresh_session") is not None:
        arguments["persistent_session"] = not options["fresh_session"]
    if options.get("skip_dates"):
        arguments["skip_dates"] = list(options["skip_dates"])
    if options.get("no_skip_dates"):
        arguments["skip_dates"] = []
    if options.get("cwd") is not None:
        arguments["cwd"] = str(options["cwd"])
    return arguments


def _call_showing(tool: str, arguments: dict[str, Any], as_json: bool) -> None:
    """Call ``tool`` and print its text, or with ``--json`` its JSON answer (the job as the tools show it)."""
    if as_json:
        _echo_json(call_tool(tool, {**arguments, "json": True}))
    else:
        _echo(call_tool(tool, arguments))


# -- the commands -----------------------------------------------------------------------------------

@click.group(name="cron")
def cron() -> None:
    """Scheduled Kiro work: add, list and manage cron jobs (twins of the kirocrew-cron tools).

    \b
    Examples:
      kirocrew cron add nightly-tests 'run the test suite and summarise failures' --cron '0 2 * * *'
      kirocrew cron add disk --command 'df -h /' --every 3600 --silent
      kirocrew cron add reminder 'remind me to stretch' --at-time 'in 30 minutes'
      kirocrew cron list --verbose
      kirocrew cron history 3f9a0b1c
    """


@cron.command(name="add")
@click.argument("name")
@click.argument("message", required=False)
@_options(update=False)
def add(name: str, message: str | None, as_json: bool, **options: Any) -> None:
    """Add a job: NAME and a MESSAGE for the agent (or --command), and one schedule option.

    The job is yours (the CLI's, no session sees it) and runs in --cwd (default: the current directory).
    """
    arguments = {"name": name, **_job_arguments(options)}
    if message is not None:
        arguments["message"] = message
    arguments.setdefault("cwd", os.getcwd())
    _call_showing("cron_add", arguments, as_json)


@cron.command(name="list")
@click.option("--verbose", "-v", is_flag=True, help="Every field, the full message, the last result and error.")
@click.option("--id", "ids", multiple=True, metavar="JOB", help="Only this job (repeat for more; shown verbose).")
@click.option("--json", "as_json", is_flag=True, help="The jobs as JSON.")
def list_jobs(verbose: bool, ids: tuple[str, ...], as_json: bool) -> None:
    """List every job (twin of cron_list)."""
    arguments: dict[str, Any] = {}
    if verbose:
        arguments["verbose"] = True
    if ids:
        arguments["ids"] = list(ids)
    if as_json:
        arguments["json"] = True
    text = call_tool("cron_list", arguments)
    (_echo_json if as_json else _echo)(text)


@cron.command(name="update")
@click.argument("job_id", metavar="JOB")
@_options(update=True)
def update(job_id: str, as_json: bool, **options: Any) -> None:
    """Change a job: only the options given change (twin of cron_update)."""
    _call_showing("cron_update", {"job_id": job_id, **_job_arguments(options)}, as_json)


def _simple(tool: str, help_text: str) -> None:
    """A command that takes JOB and calls ``tool`` with it."""

    @click.argument("job_id", metavar="JOB")
    @click.option("--json", "as_json", is_flag=True, help="The tool's answer as JSON.")
    def command(job_id: str, as_json: bool) -> None:
        _call_showing(tool, {"job_id": job_id}, as_json)

    command.__doc__ = help_text
    cron.command(name=tool.removeprefix("cron_"))(command)


_simple("cron_remove", "Remove a job and its history (twin of cron_remove).")
_simple("cron_pause", "Pause a job: it does not fire until resumed (twin of cron_pause).")
_simple("cron_resume", "Resume a paused or auto-paused job (twin of cron_resume).")
_simple("cron_trigger", "Run a job now, whatever its schedule (twin of cron_trigger; needs the host).")


@cron.command(name="remove-all")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def remove_all(yes: bool) -> None:
    """Remove every job (twin of cron_remove_all)."""
    if not yes:
        click.confirm("Remove every cron job and its history?", abort=True)
    _echo(call_tool("cron_remove_all", {}))


def call_admin(tool: str, arguments: dict[str, Any], *, write: bool = False) -> str:
    """One call of the host's ``kirocrew-cron-admin`` server (the commands that are not tools), or without a
    host (``KIROCREW_NO_HOST=1``) the same handler in process; its text, a refusal raised with its code."""
    from kirocrew_core.host import twin

    from kirocrew_cron import admin

    return twin.call(admin.ADMIN_SERVER, tool, arguments,
                     lambda: admin.call_in_process(tool, arguments, write=write))


@cron.command(name="history")
@click.argument("job_id", metavar="JOB")
@click.option("--limit", type=click.IntRange(1, HISTORY_PER_JOB), default=20, show_default=True,
              help="How many runs, newest first.")
@click.option("--json", "as_json", is_flag=True, help="The runs as JSON.")
def history(job_id: str, limit: int, as_json: bool) -> None:
    """A job's runs, newest first: when, why (scheduled, manual, catch-up), how it ended, and its conversation.

    A one-shot that ran and removed itself keeps its history: ask for it by its id.
    """
    document = json.loads(call_admin("cron_history", {"job_id": job_id, "limit": limit}))
    if as_json:
        click.echo(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        _echo(_history_text(document))


def _history_text(document: dict[str, Any]) -> str:
    from datetime import datetime

    def local(ts: float) -> str:
        return datetime.fromtimestamp(ts).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")

    name, job_id, runs = document["name"], document["job_id"], document["runs"]
    lines = [f"{len(runs)} run(s) of {name} ({job_id}), newest first:" if runs
             else f"{name} ({job_id}) has not run yet."]
    if document["removed_at"] is not None:
        lines.insert(0, f"{name} ({job_id}) ran once and removed itself at {local(document['removed_at'])}; "
                        "its history is kept.")
    for record in runs:
        took = "" if record["duration_ms"] is None else f" in {record['duration_ms'] / 1000:.1f}s"
        what = f"{record['missed']} due run(s) missed" if record["status"] == "missed" else record["status"] + took
        lines.append(f"  {local(record['started_at'])}  {record['trigger']:<9}  {what}")
        detail = record["error"] or record["summary"]
        if detail:
            lines.append(f"    {detail}")
        if record["conversation_id"]:
            lines.append(f"    conversation {record['conversation_id']}" +
                         (f", run {record['run_id']}" if record["run_id"] else ""))
    return "\n".join(lines)


@cron.command(name="adopt")
@click.argument("job_id", metavar="JOB")
@click.option("--session-of", "session_of", metavar="CONVERSATION",
              help="Give the job to this conversation's session (its authority narrows the job's).")
@click.option("--release", is_flag=True, help="Give the job back to you.")
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
def adopt(job_id: str, session_of: str | None, release: bool, as_json: bool) -> None:
    """Give a job to a conversation's session, or back to you (--release). Needs the host.

    The session then sees and changes it as one it made: it runs in that conversation's working
    directory, with the narrower of its own authority and the conversation's.
    """
    if (session_of is None) == (not release):
        raise click.UsageError("give exactly one of --session-of CONVERSATION and --release")
    arguments: dict[str, Any] = {"job_id": job_id, "json": as_json}
    if session_of is not None:
        arguments["session_of"] = session_of
    else:
        arguments["release"] = True
    (_echo_json if as_json else _echo)(call_admin("cron_adopt", arguments, write=True))


@cron.command(name="preview")
@click.argument("job_id", metavar="[JOB]", required=False)
@click.option("--command", help="Preview this shell command instead of a job's.")
@click.option("--authority", metavar="NAME", help="With --command: the authority it runs under (default unrestricted).")
@click.option("--cwd", type=click.Path(file_okay=False, exists=True, resolve_path=True), metavar="DIR",
              help="With --command: the directory it runs in (default: the current one).")
@click.option("--timeout", type=click.IntRange(0, 3600), metavar="SECS", help="With --command: its bound (0: 300 s).")
@click.option("--json", "as_json", is_flag=True, help="The report as JSON.")
def preview(job_id: str | None, command: str | None, authority: str | None, cwd: str | None, timeout: int | None,
            as_json: bool) -> None:
    """Run a command job (or --command) once, as a real run would, and print its result and the notification it
    would publish. Nothing is stored: no history, no last result, no notification."""
    if (job_id is None) == (command is None):
        raise click.UsageError("give a JOB or --command, one of the two")
    if job_id is not None and (authority, cwd, timeout) != (None, None, None):
        raise click.UsageError("--authority, --cwd and --timeout go with --command; a job runs with its own")
    arguments: dict[str, Any] = {"json": as_json}
    if job_id is not None:
        arguments["job_id"] = job_id
    else:
        arguments.update(command=command, cwd=cwd or os.getcwd())
        if authority is not None:
            arguments["authority"] = authority
        if timeout is not None:
            arguments["timeout"] = timeout
    (_echo_json if as_json else _echo)(call_admin("cron_preview", arguments))


@cron.command(name="import")
@click.argument("path", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="The report as JSON.")
def import_jobs(path: Path | None, as_json: bool) -> None:
    """Import the original's crons.json (default: the one in the crew home); the file is only read.

    Entries already imported are not added again; entries that cannot be imported are listed with why.
    """
    from kirocrew_core.host import twin

    from kirocrew_cron import admin, importer

    source = (path or importer.default_path()).absolute()

    async def in_process() -> tuple[str, None]:
        return admin.import_in_process(source, as_json), None

    text = twin.call(admin.ADMIN_SERVER, "cron_import", {"path": str(source), "json": as_json}, in_process)
    (_echo_json if as_json else _echo)(text)
