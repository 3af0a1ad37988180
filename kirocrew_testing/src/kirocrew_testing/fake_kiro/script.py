"""The scripted prompt language: what a test writes in a prompt to make the fake act.

A prompt is read line by line. A line starting with ``!`` is a directive; any
other line is plain text, echoed back as ``agent_message_chunk`` (consecutive
plain lines form one chunk). ``!!`` at the start of a line escapes a literal
``!``. A prompt whose first non-blank line starts with ``/`` is a slash command
instead (``/mcp``, ``/tools``, ``/model ID``, ...), as in kiro-cli.

Directives (``TEXT`` may use ``\\n``, ``\\t`` and ``\\\\`` escapes, and is taken verbatim
after the one space that follows the directive, trailing whitespace included)::

    !say TEXT                 agent_message_chunk
    !think TEXT               agent_thought_chunk
    !plan A; B; C             an ACP ``plan`` update (kiro 2.14 never sends one; see !todo)
    !todo A; B; C             a ``todo_list`` tool call whose rawOutput carries the items
    !tool NAME [JSON]         a tool call that asks permission unless trusted
    !write PATH TEXT          write PATH (relative to the session cwd) with a diff tool call
    !shell COMMAND            run COMMAND with ``sh -c`` in the session cwd, with permission
    !read PATH                a ``read`` tool call (rawInput ``{"operations": [{"mode": "Line", "path": ABS}]}``,
                              PATH relative to the session cwd); with permission, the file's text is the result
    !fetch URL                a ``web_fetch`` tool call (rawInput ``{"url": URL}``); with permission, GETs the URL
                              (http://127.0.0.1 or localhost only, anything else fails the call: no network)
                              and returns its status and body
    !mcp SERVER TOOL [JSON]   call TOOL on a connected MCP server, with permission
    !result                   reply ``result: <text>`` and a newline: the text the turn's last ``!mcp`` call
                              got back (an error result's ``error[code]: ...`` included), as a model reading
                              a tool's answer would (``result: none`` before any)
    !sleep SECONDS            pause the turn
    !recall                   reply with the session's earlier user prompts, ``recall: A | B``
                              (the context a resumed or continued session really carries)
    !settings                 reply ``settings: model=<id> mode=<agent> effort=<effort or none>``,
                              what the session really runs on at this moment
    !context                  reply ``context:`` and what the session was told at start: its agent's
                              ``file://`` resources and ``agentSpawn`` hook output (see context.py)
    !subagent TASK            write a sub-agent's session as kiro does (flat ``parent_session_id`` and
                              ``session_created_reason: "subagent"``, or the V3 parent's ``sub-executions/``)
                              and reply ``subagent: <its id>``
    !hang                     wait until ``session/cancel`` (stopReason ``cancelled``)
    !error CODE [MESSAGE]     fail the prompt with that JSON-RPC error
    !refuse                   content-filtered ``_kiro.dev/metadata``, then a bare -32603
    !exit [CODE]              the process exits at once (default 1), lock left behind
    !notify METHOD [JSON]     send the agent→client notification METHOD (as on the wire,
                              e.g. ``_kiro.dev/x/y``) with JSON params, verbatim

Every tool directive but ``!todo`` asks ``session/request_permission`` unless the session trusts
the call; ``!shell``, ``!write`` and ``!read`` also obey the agent's ``toolsSettings`` (permissions.py).
A call refused (rejected by the client, or denied by a setting) does nothing and fails; the turn goes on.

An unknown directive fails the prompt with -32602, so a typo in a test shows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

DIRECTIVES = ("say", "think", "plan", "todo", "tool", "write", "shell", "read", "fetch", "mcp", "result", "sleep",
              "recall", "settings", "context", "subagent", "hang", "error", "refuse", "exit", "notify")
# Directives whose argument is text a test compares byte for byte: never stripped.
VERBATIM = ("say", "think", "write")


class ScriptError(ValueError):
    """A directive that cannot be run as written."""


@dataclass(frozen=True)
class Step:
    """One thing the turn does. ``kind`` is a directive name or ``"text"``."""

    kind: str
    text: str = ""
    name: str = ""
    items: tuple[str, ...] = ()
    data: Any = None
    number: float = 0.0
    fields: dict[str, Any] = field(default_factory=dict)


def unescape(text: str) -> str:
    out = []
    chars = iter(text)
    for ch in chars:
        if ch != "\\":
            out.append(ch)
            continue
        nxt = next(chars, "")
        out.append({"n": "\n", "t": "\t", "\\": "\\"}.get(nxt, "\\" + nxt))
    return "".join(out)


def _json_arg(text: str, what: str) -> Any:
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScriptError(f"{what}: arguments are not JSON: {exc.msg}") from exc
    if not isinstance(value, dict):
        raise ScriptError(f"{what}: arguments must be a JSON object")
    return value


def _items(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(";") if part.strip())


def _directive(word: str, rest: str) -> Step:
    if word in ("say", "think"):
        return Step(word, text=unescape(rest))
    if word == "subagent":
        if not rest:
            raise ScriptError("!subagent needs a task")
        return Step(word, text=unescape(rest))
    if word in ("plan", "todo"):
        items = _items(rest)
        if not items:
            raise ScriptError(f"!{word} needs at least one item")
        return Step(word, items=items)
    if word == "tool":
        name, _, args = rest.partition(" ")
        if not name:
            raise ScriptError("!tool needs a tool name")
        return Step("tool", name=name, data=_json_arg(args, f"!tool {name}"))
    if word == "write":
        path, _, text = rest.lstrip().partition(" ")
        if not path:
            raise ScriptError("!write needs a path")
        return Step("write", name=path, text=unescape(text))
    if word == "shell":
        if not rest:
            raise ScriptError("!shell needs a command")
        return Step("shell", text=rest)
    if word == "read":
        if not rest:
            raise ScriptError("!read needs a path")
        return Step("read", name=rest)
    if word == "fetch":
        if not rest or len(rest.split()) != 1:
            raise ScriptError("!fetch needs one URL")
        return Step("fetch", text=rest)
    if word == "mcp":
        server, _, more = rest.partition(" ")
        tool, _, args = more.strip().partition(" ")
        if not server or not tool:
            raise ScriptError("!mcp needs SERVER TOOL [JSON]")
        return Step("mcp", name=tool, text=server, data=_json_arg(args, f"!mcp {server} {tool}"))
    if word == "sleep":
        try:
            seconds = float(rest)
        except ValueError as exc:
            raise ScriptError(f"!sleep needs a number of seconds, got {rest!r}") from exc
        return Step("sleep", number=max(0.0, seconds))
    if word == "error":
        code_text, _, message = rest.partition(" ")
        try:
            code = int(code_text)
        except ValueError as exc:
            raise ScriptError(f"!error needs an integer code, got {code_text!r}") from exc
        return Step("error", number=code, text=message.strip() or "Error")
    if word == "notify":
        method, _, params = rest.partition(" ")
        if not method:
            raise ScriptError("!notify needs a method")
        return Step("notify", name=method, data=_json_arg(params, f"!notify {method}"))
    if word == "exit":
        try:
            code = int(rest) if rest else 1
        except ValueError as exc:
            raise ScriptError(f"!exit needs an integer code, got {rest!r}") from exc
        return Step("exit", number=code)
    if rest:
        raise ScriptError(f"!{word} takes no arguments")
    return Step(word)  # hang, refuse, recall, result, settings, context


def parse(text: str) -> list[Step]:
    """Cut a prompt into steps; raise :class:`ScriptError` on a malformed directive."""
    steps: list[Step] = []
    plain: list[str] = []

    def flush() -> None:
        if plain:
            steps.append(Step("text", text="\n".join(plain)))
            plain.clear()

    for line in text.splitlines():
        if line.startswith("!!"):
            plain.append(line[1:])
            continue
        if not line.startswith("!"):
            plain.append(line)
            continue
        word, _, rest = line[1:].partition(" ")
        if word not in DIRECTIVES:
            raise ScriptError(f"unknown directive !{word} (known: {', '.join(DIRECTIVES)})")
        flush()
        steps.append(_directive(word, rest if word in VERBATIM else rest.strip()))
    flush()
    while steps and steps[-1].kind == "text" and not steps[-1].text.strip():
        steps.pop()
    return steps


def slash_command(text: str) -> tuple[str, str] | None:
    """``("mcp", "")`` for a prompt like ``/mcp``; None when the prompt is not a slash command."""
    stripped = text.strip()
    if not stripped.startswith("/") or stripped.startswith("//"):
        return None
    first = stripped.splitlines()[0][1:]
    name, _, args = first.partition(" ")
    return (name, args.strip()) if name else None
