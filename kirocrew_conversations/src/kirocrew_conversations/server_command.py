"""``kirocrew mcp-conversations``: the Conversations MCP server on stdio.

Bare, it is a relay to the host (:mod:`kirocrew_core.relay`), which runs the one orchestrator
every client shares (:mod:`kirocrew_conversations.hosted`). The ``kirocrew`` launcher takes that
path before click is even imported; this command only sees the bare form when it is reached
through the full CLI (``python -m kirocrew_core.cli``). ``--standalone`` is the in-process server
of before the host: it owns the state directory itself, so a second one fails at startup.

Registered lazily by :mod:`kirocrew_conversations.plugin`, so ``kirocrew --help`` never imports
this module; the service and the mcp SDK are imported only when the server actually starts.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import click
from kirocrew_core.errors import BadInputError, KirocrewError

from kirocrew_conversations import limits
from kirocrew_conversations.plugin import SERVER_COMMAND

_POSITIVE_SECS = click.FloatRange(min=0, min_open=True)


@click.command(SERVER_COMMAND)
@click.option("--standalone", is_flag=True,
              help="Serve in this process instead of relaying to the host: this process owns the state "
                   "directory (a second standalone server on it fails at startup) and its runs end with it. "
                   "For environments where no background process may run. The options below need it.")
@click.option("--max-workers", type=click.IntRange(limits.WORKERS_MIN, limits.WORKERS_MAX), default=None,
              help=f"Conversations that may hold a kiro-cli worker at once ({limits.WORKERS_MIN}-"
                   f"{limits.WORKERS_MAX}; default KIRO_CONVERSATIONS_MAX_WORKERS, else "
                   f"{limits.WORKERS_DEFAULT}). Others queue FIFO.")
@click.option("--state-dir", type=click.Path(file_okay=False, dir_okay=True, path_type=Path), default=None,
              help="State directory (default KIRO_CONVERSATIONS_STATE_DIR, else "
                   "~/.local/state/kiro-conversations-mcp). One server per directory.")
@click.option("--run-deadline-secs", type=_POSITIVE_SECS, default=None,
              help=f"For tests: a run's execution deadline (default {limits.RUN_DEADLINE_SECONDS} s).")
@click.option("--attention-deadline-secs", type=_POSITIVE_SECS, default=None,
              help="How long a permission request may wait for an answer before it is answered cancelled and "
                   f"its run ends needs_attention_expired (default {limits.ATTENTION_DEADLINE_SECONDS} s).")
@click.option("--idle-close-secs", type=_POSITIVE_SECS, default=None,
              help=f"For tests: how long an idle worker stays open (default {limits.IDLE_WORKER_SECONDS} s).")
@click.option("--wait-call-secs", type=_POSITIVE_SECS, default=None,
              help="For tests: how long one kiro_wait/kiro_delegate call blocks when the client sent no "
                   "progress token (default 50 s).")
@click.option("--progress-interval-secs", type=_POSITIVE_SECS, default=None,
              help="For tests: seconds between progress notifications while a wait runs (default 10 s).")
def mcp_conversations(standalone: bool, max_workers: int | None, state_dir: Path | None,
                      run_deadline_secs: float | None, attention_deadline_secs: float | None,
                      idle_close_secs: float | None, wait_call_secs: float | None,
                      progress_interval_secs: float | None) -> None:
    """Serve the Kiro Conversations MCP on stdin/stdout.

    A stdio MCP server, meant to be launched by an MCP client (Claude Code, Kiro, an IDE), not
    typed at a terminal. It runs Kiro agents in durable conversations: spawn, delegate, wait,
    follow up, cancel, and read results that survive restarts.

    Without options it relays to the kirocrew host (started in the background if none runs),
    where one orchestrator serves every client; the host reads KIRO_CONVERSATIONS_* and
    KIRO_CLI_PATH from its environment, inherited from the command that started it. With
    --standalone it serves in this process instead; stdin EOF or SIGTERM stops it, and its
    unfinished runs become interrupted.

    \b
    An MCP client's entry for it:
      {"command": "kirocrew", "args": ["mcp-conversations"]}
    """
    overrides = {
        key: value
        for key, value in {
            "max_workers": max_workers,
            "state_dir": state_dir.expanduser() if state_dir is not None else None,
            "run_deadline_secs": run_deadline_secs,
            "attention_deadline_secs": attention_deadline_secs,
            "idle_close_secs": idle_close_secs,
            "wait_call_secs": wait_call_secs,
            "progress_interval_secs": progress_interval_secs,
        }.items()
        if value is not None
    }
    if not standalone:
        if overrides:
            given = ", ".join(f"--{name.replace('_', '-')}" for name in overrides)
            raise BadInputError(
                f"{given} only apply with --standalone: the host serves every client with the settings of its "
                "own environment (KIRO_CONVERSATIONS_*, inherited from the command that started it); set them "
                "there, or run `kirocrew mcp-conversations --standalone ...` to serve in this process",
                code="standalone_only")
        _relay()
        return
    _serve_standalone(overrides)


def _relay() -> None:
    """Bare ``mcp-conversations`` reached through click: the same relay the launcher runs."""
    from kirocrew_core import relay

    status = relay.run(SERVER_COMMAND)
    if status == relay.NOT_HOSTED:  # the launcher came here for that very reason: do not loop
        raise KirocrewError("the running kirocrew host serves no kirocrew-conversations (its conversations plugin "
                            "is not loaded there); stop it with `kirocrew host stop` and retry, or run "
                            "`kirocrew mcp-conversations --standalone`", code="unknown_server")
    sys.exit(status)


def _serve_standalone(overrides: dict[str, Any]) -> None:
    import asyncio

    from kirocrew_core.sdk_models import prepare as prepare_sdk_models

    prepare_sdk_models()

    from kirocrew_conversations.server import serve_stdio
    from kirocrew_conversations.service import ServiceConfig

    config = ServiceConfig.from_env(**overrides)
    # stdout is the MCP wire: diagnostics (and the SDK's own logging) go to stderr, which
    # MCP clients keep as the server's log.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="kirocrew mcp-conversations: %(levelname)s: %(name)s: %(message)s")
    if sys.stdin.isatty():
        click.echo("kirocrew mcp-conversations --standalone speaks MCP on stdin/stdout and is meant to be launched "
                   "by an MCP client; press Ctrl-D to stop.", err=True)
    asyncio.run(serve_stdio(config))
