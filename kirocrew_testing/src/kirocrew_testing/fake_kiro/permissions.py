"""Whether a tool call runs, is refused, or asks: kiro-cli 2.x's check of an agent's ``toolsSettings``.

The order follows kiro-cli (reference: permission-policy-anchors §4, amazon-q-developer-cli's
built-in-tools docs and its 1.x code):

1. ``--trust-all-tools`` runs everything, deny lists included (1.x checked the flag before any setting;
   2.x's order is unrecorded, and a fake that refused here would promise a protection kiro may not give).
2. **Deny lists first**: ``deniedCommands`` (regexes, each wrapped as ``\\A<regex>\\z`` textually, so
   ``a|b`` means "starts with a or ends with b", as kiro's wrapping does; an invalid one denies every
   command) and ``deniedPaths``. A denied call is refused without asking.
3. A tool the session trusts (``allowedTools``, ``--trust-tools``, an earlier "Always", an MCP server's
   ``autoApprove``) runs: per kiro's docs a tool in ``allowedTools`` overrides its allow-lists. Its
   deny lists still apply (step 2), as they did in kiro 1.x's code.
4. Allow-lists: ``allowedCommands`` (same wrapping, matched against the whole command line, so
   ``git add .*`` also allows ``git add x; rm y``: kiro 2.x's known weakness), read-only commands
   under ``autoAllowReadonly``, ``allowedPaths``.
5. Otherwise ask, or, for the shell under ``denyByDefault``, refuse.

Path globs are gitignore-style: ``*`` and ``?`` stay within one path segment, ``**`` spans any number;
a pattern without a slash matches at any depth below the session cwd, one with a slash is anchored
there (or at ``/`` when absolute; ``~`` is the home directory); a pattern matching a directory matches
everything under it. Paths are compared lexically (``..`` folded, symlinks not followed).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kirocrew_testing.fake_kiro.agents_dirs import PathSettings, ShellSettings

# What ``autoAllowReadonly`` lets run unprompted: the first word of every pipeline segment is one of these
# (kiro 1.x's list without ``find``, whose ``-exec``/``-delete`` write, plus ``wc``), or ``git`` with one of
# READONLY_GIT as its subcommand.
READONLY_COMMANDS = ("cat", "echo", "grep", "head", "ls", "pwd", "tail", "wc", "which")
READONLY_GIT = ("diff", "log", "show", "status")
# A command containing any of these is never read-only: substitution, redirection, chaining (kiro 1.x's list).
_UNSAFE = ("<(", "$(", "`", ">", "&&", "||", "&", ";", "${", "\n", "\r", "IFS")

Outcome = Literal["allow", "ask", "deny"]


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    #: For a denial: the message the failed tool call carries, naming the setting.
    reason: str = ""


ALLOW = Verdict("allow")
ASK = Verdict("ask")


def trusted_or_ask(tool_allowed: bool) -> Verdict:
    """The verdict for a tool without settings the fake acts on (``!tool``, ``!mcp``, ``!fetch``)."""
    return ALLOW if tool_allowed else ASK


def _anchored(pattern: str) -> re.Pattern[str]:
    return re.compile(rf"\A{pattern}\Z")  # Python's \Z is Rust's \z: the very end


def _matches_command(pattern: str, command: str) -> bool:
    try:
        return _anchored(pattern).search(command) is not None
    except re.error:
        return False  # an invalid allow regex allows nothing


def shell_verdict(command: str, settings: ShellSettings, *, tool_allowed: bool) -> Verdict:
    key = settings.key
    for pattern in settings.denied_commands:
        try:
            denied = _anchored(pattern).search(command) is not None
        except re.error as exc:
            return Verdict("deny", f"Denied by toolsSettings.{key}.deniedCommands: {pattern!r} is not a valid "
                                   f"regex ({exc}), so every command is denied")
        if denied:
            return Verdict("deny", f"Denied by toolsSettings.{key}.deniedCommands: the command matches {pattern!r}")
    if tool_allowed or any(_matches_command(p, command) for p in settings.allowed_commands):
        return ALLOW
    if settings.auto_allow_readonly and is_readonly(command):
        return ALLOW
    if settings.deny_by_default:
        return Verdict("deny", f"Denied by toolsSettings.{key}.denyByDefault: the command matches no "
                               "allowedCommands")
    return ASK


def is_readonly(command: str) -> bool:
    """Is every segment of this pipeline a command from the read-only list, with nothing that writes?"""
    if any(token in command for token in _UNSAFE):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    segments: list[list[str]] = [[]]
    for word in words:
        if word == "|":
            segments.append([])
        elif "|" in word:
            return False  # ``a|b`` unspaced: not split by shlex, so not judged
        else:
            segments[-1].append(word)
    return all(_readonly_segment(segment) for segment in segments)


def _readonly_segment(words: list[str]) -> bool:
    if not words:
        return False
    if words[0] == "git":
        # ``git diff --output=FILE`` writes a file.
        return len(words) > 1 and words[1] in READONLY_GIT and not any(w.startswith("--output") for w in words)
    return words[0] in READONLY_COMMANDS


def path_verdict(path: Path, settings: PathSettings, cwd: Path, *, tool_allowed: bool) -> Verdict:
    for pattern in settings.denied_paths:
        if path_matches(pattern, path, cwd):
            return Verdict("deny", f"Denied by toolsSettings.{settings.key}.deniedPaths: {path} matches {pattern!r}")
    if tool_allowed or any(path_matches(p, path, cwd) for p in settings.allowed_paths):
        return ALLOW
    return ASK


def path_matches(pattern: str, path: Path, cwd: Path) -> bool:
    """Does gitignore-style ``pattern`` (relative ones against ``cwd``) cover ``path`` or a directory above it?"""
    glob = os.path.expanduser(pattern).rstrip("/")
    if not glob:
        return False
    if glob.startswith("./"):
        glob = glob[2:]
    if glob.startswith("/"):
        prefix = ""
    else:
        prefix = re.escape(os.path.normpath(cwd)).rstrip("/") + "/"
        if "/" not in glob:
            prefix += "(?:.*/)?"  # no slash: at any depth, like a .gitignore line
    regex = rf"\A{prefix}{_glob_body(glob)}(?:/.*)?\Z"
    return re.search(regex, os.path.normpath(path)) is not None


def _glob_body(glob: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        elif glob[i] == "[" and "]" in glob[i + 2:]:
            end = glob.index("]", i + 2)
            body = glob[i + 1:end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return "".join(out)


# -- the trust options a permission request offers (``_meta.trustOptions``) -----------------------


def shell_trust_options(command: str) -> list[dict[str, Any]]:
    """Trust the base command (the first word) with any arguments, as kiro-cli offers it."""
    base = command.split()[0] if command.split() else command
    return [{"label": "Base command", "display": f"{base} *", "setting_key": "allowedCommands",
             "patterns": [f"{re.escape(base)}( .*)?"]}]


def write_trust_options(path: Path) -> list[dict[str, Any]]:
    return [{"label": f"Trust writes to {path.parent}", "display": f"{path.parent}/**",
             "setting_key": "runtime_write_paths", "patterns": [f"{path.parent}/**"]}]


def read_trust_options(path: Path) -> list[dict[str, Any]]:
    """The write option's shape for reads; the key ``runtime_read_paths`` is the fake's own (unrecorded)."""
    return [{"label": f"Trust reads in {path.parent}", "display": f"{path.parent}/**",
             "setting_key": "runtime_read_paths", "patterns": [f"{path.parent}/**"]}]
