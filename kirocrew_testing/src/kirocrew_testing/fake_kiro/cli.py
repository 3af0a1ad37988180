"""``fake-kiro-cli``: the command line of kiro-cli 2.x, as far as kirocrew uses it.

``--version`` / ``-V`` / ``version``, ``whoami [--format json]``,
``chat --list-models [--format json]``, ``chat --resume-id ID`` (its checks, no interactive chat)
and ``acp [...]``; anything else is a
usage error (exit 2), as clap reports it. With ``KIRO_FAKE_LAUNCHER`` set the
process behaves like the real ``kiro-cli`` launcher: it checks sign-in, then
forks a ``kiro-cli-chat`` child that inherits stdio and its process group,
and waits. Like the real one it does not forward SIGTERM, so a client that
signals only the launcher leaves the child running; tearing down the process
group is what cleans up.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys

from kirocrew_testing.fake_kiro import catalog, switches

PROG = "kiro-cli"
NOT_LOGGED_IN = "You are not logged in, please log in with kiro-cli login"
USAGE = f"Usage: {PROG} [OPTIONS] [COMMAND]"
HELP = f"""Kiro CLI (fake-kiro-cli imitating kiro-cli {switches.IMITATED_VERSION})

{USAGE}

Commands:
  acp      Run an ACP agent on stdio
  chat     Chat (only --list-models and --resume-id are imitated)
  whoami   Show the signed-in identity
  version  Show the version

Options:
  -V, --version  Print version
  -h, --help     Print help
"""
SUBCOMMANDS = ("acp", "chat", "whoami", "version", "help")


def _usage_error(message: str) -> int:
    print(f"error: {message}\n\n{USAGE}\n\nFor more information, try '--help'.", file=sys.stderr)
    return 2


def _parser(name: str) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog=f"{PROG} {name}", add_help=True)


def _format_json(document: object, fmt: str) -> str:
    return json.dumps(document, indent=2 if fmt == "json-pretty" else None)


def whoami(argv: list[str]) -> int:
    parser = _parser("whoami")
    parser.add_argument("-f", "--format", choices=("plain", "json", "json-pretty"), default="plain")
    args = parser.parse_args(argv)
    if switches.flag(switches.LOGGED_OUT):
        print("Not logged in", file=sys.stderr)
        return 1
    if os.environ.get("KIRO_API_KEY"):
        identity = {"accountType": "ApiKey", "region": "us-east-1"}
    else:
        identity = {"accountType": "BuilderId", "email": "fake-user@example.com", "region": "us-east-1",
                    "startUrl": "https://view.awsapps.com/start"}
    if args.format == "plain":
        print(f"Logged in with {identity['accountType']}")
        if "email" in identity:
            print(f"Email: {identity['email']}")
    else:
        print(_format_json(identity, args.format))
    return 0


def chat(argv: list[str]) -> int:
    parser = _parser("chat")
    parser.add_argument("--list-models", action="store_true")
    parser.add_argument("-f", "--format", choices=("plain", "json", "json-pretty"), default="plain")
    parser.add_argument("--no-interactive", action="store_true")
    parser.add_argument("--agent")
    parser.add_argument("--model")
    parser.add_argument("--resume-id", metavar="ID")
    args = parser.parse_args(argv)
    if args.resume_id is not None:
        return resume(args.resume_id)
    if not args.list_models:
        print("fake-kiro-cli: interactive chat is not imitated (use `acp`)", file=sys.stderr)
        return 2
    models = catalog.models()
    if args.format == "plain":
        default = catalog.default_model_id()
        for model in models:
            print(f"{'*' if model.model_id == default else ' '} {model.model_id}  {model.description}")
        return 0
    rows = [m.list_models_row() for m in models]
    if os.environ.get(switches.MODELS_FORMAT, "").strip().lower() == "flat":
        document: object = rows  # older builds: a bare array
    else:
        document = {"models": rows, "default_model": catalog.default_model_id()}
    print(_format_json(document, args.format))
    return 0


def acp_options(argv: list[str]) -> object:
    from kirocrew_testing.fake_kiro.agent import Options

    parser = _parser("acp")
    parser.add_argument("--agent")
    parser.add_argument("--model")
    trust = parser.add_mutually_exclusive_group()
    trust.add_argument("-a", "--trust-all-tools", action="store_true")
    trust.add_argument("--trust-tools", metavar="TOOLS")
    parser.add_argument("--effort", choices=catalog.EFFORTS)
    parser.add_argument("--agent-engine", choices=("v3", "v2", "v1"), default="v2")
    args = parser.parse_args(argv)
    tools = tuple(t.strip() for t in (args.trust_tools or "").split(",") if t.strip())
    return Options(agent=args.agent, model=args.model, trust_all_tools=args.trust_all_tools,
                   trust_tools=tools, effort=args.effort, v3=args.agent_engine == "v3")


def acp(argv: list[str]) -> int:
    import asyncio

    from kirocrew_testing.fake_kiro.agent import serve

    options = acp_options(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="fake-kiro-cli[%(process)d] %(levelname)s %(name)s: %(message)s")
    return asyncio.run(serve(options))  # type: ignore[arg-type]


def resume(session_id: str) -> int:
    """``chat --resume-id ID``: kiro's checks (the session exists, no live process holds it), then one line.

    The interactive chat itself is not imitated: it prints ``resumed <id> in <cwd>: <title>``
    (the cwd it runs in) and exits 0; a refusal goes to stderr with exit 1.
    """
    from kirocrew_testing.fake_kiro import sessions

    if not sessions.is_safe_id(session_id) or not sessions.exists(files := sessions.files_for(session_id)):
        print(f"error: Session not found: {session_id}", file=sys.stderr)
        return 1
    try:
        sessions.acquire_lock(files, os.getpid())
    except (sessions.LockHeld, sessions.LockUnreadable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        title = sessions.read_state(files).get("title", "")
        print(f"resumed {session_id} in {os.getcwd()}: {title}")
    finally:
        sessions.release_lock(files, os.getpid())
    return 0


def _name_process(name: str) -> None:
    """Show as ``name`` in ``/proc/<pid>/comm`` (Linux), as the real child binary would."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def launch_chat_child(argv: list[str]) -> int:
    """The launcher: sign-in check, then fork ``kiro-cli-chat`` in our group and wait for it."""
    if switches.flag(switches.LOGGED_OUT):
        print(NOT_LOGGED_IN, file=sys.stderr)
        return 1
    env = {**os.environ, switches.ROLE: switches.CHAT_ROLE}
    # Same process group and inherited stdio on purpose: this is the real launcher's shape.
    child = subprocess.Popen([sys.executable, "-m", "kirocrew_testing.fake_kiro", *argv], env=env)
    while True:
        try:
            return child.wait()
        except KeyboardInterrupt:
            continue  # the child got the same SIGINT; wait for it to finish


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if switches.is_chat_child():
        _name_process(switches.CHAT_ROLE)
    if not args:
        return _usage_error("a subcommand is required (interactive chat is not imitated)")
    first = args[0]
    if first in ("--version", "-V", "version"):
        print(f"{PROG} {switches.version()}")
        return 0
    if first in ("-h", "--help", "help"):
        print(HELP, end="")
        return 0
    if first.startswith("-"):
        return _usage_error(f"unexpected argument '{first}' found")
    if first not in SUBCOMMANDS:
        return _usage_error(f"unrecognized subcommand '{first}'")
    if first == "whoami":
        return whoami(args[1:])
    if first == "chat" and ("--list-models" in args or "--resume-id" in args):
        return chat(args[1:])
    if switches.flag(switches.LAUNCHER) and not switches.is_chat_child():
        return launch_chat_child(args)
    if first == "chat":
        return chat(args[1:])
    return acp(args[1:])


if __name__ == "__main__":
    raise SystemExit(main())
