"""The policy: decide a tool call, and say which tools may keep a blanket auto-approve.

A decision looks at every subject of the call (:mod:`.calls`): for each, every rule whose
scope (authority, agent, workspace), tool and input match is collected from the built-in,
owner and project tiers, and the strictest decision wins (deny > ask > allow; among rules of
the same decision, the first in precedence order — built-in, then the owner's file order,
then the project's — is the one named). A subject no rule matches takes the first default
that matches it. The call's decision is the strictest of its subjects'. Three floors on top:

- a subject the parser could not reduce (``$CMD x``, a parse error) is never allowed without
  asking, whatever rule or default allowed it;
- an input that is not known before the call runs makes a matching ``deny`` an ``ask`` (the
  rule may or may not apply) and never satisfies an ``allow``; so do options between a command
  and the subcommand a deny or ask rule names (``git -C . push`` for ``git push``);
- an ``allow`` from a rule that names command prefixes becomes ``ask`` when the command is
  run with variables that change what runs (``LD_PRELOAD=…``, ``PATH=…``, ``GIT_…``) or with
  an option that runs other programs (``git -c``/``--upload-pack``, ``rg --pre``,
  ``find -exec``, ``tar --to-command``, ``rsync -e``, ``sed``'s ``e`` command …): the owner
  allowed the command, not whatever it can be made to run.

:meth:`Policy.may_auto_approve` answers the render: a reference (``read``, ``@srv``,
``@srv/tool``) keeps a blanket grant in ``allowedTools``/``autoApprove``/``--trust-tools``
only when the policy allows it **whatever its input**, under every authority, so every call a
rule could refuse reaches the gate.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Any

from kirocrew_core.gate.calls import SHELL_TOOLS, Context, Subject, ToolCall, subjects
from kirocrew_core.gate.paths import (
    MAYBE,
    NO,
    YES,
    Match,
    anchored_globs,
    domain_match,
    path_match,
    roots,
    start_directory,
)
from kirocrew_core.gate.protections import (
    AUTHORITY_DEFAULTS,
    UNKNOWN_AUTHORITY_DEFAULT,
    default_rules,
    protection_rules,
)
from kirocrew_core.gate.rules import SEVERITY, Decision, Rule, tool_names

if TYPE_CHECKING:
    from kirocrew_core.plugins import KirocrewPluginManager

# Variables that change which program runs, or what it loads: an allow by command prefix does not cover them.
_RISKY_VARIABLES = re.compile(
    r"^(LD_\w+|DYLD_\w+|PATH|BASH_ENV|ENV|IFS|PS4|PROMPT_COMMAND|SHELLOPTS|BASHOPTS|GIT_\w+|PYTHON\w*|NODE_OPTIONS|"
    r"NODE_PATH|PERL5\w*|PERLLIB|RUBY\w*|JAVA_TOOL_OPTIONS|_JAVA_OPTIONS|LESSOPEN|LESSCLOSE|EDITOR|VISUAL|PAGER|"
    r"GIT_SSH_COMMAND|SSH_ASKPASS|SUDO_ASKPASS)$")
# Options that make a command run another program (long options match their unambiguous prefixes too).
_EXEC_OPTIONS: dict[str, tuple[str, ...]] = {
    "git": ("-c", "--config-env", "--upload-pack", "--receive-pack", "--exec-path", "--exec"),
    "rg": ("--pre", "--pre-glob"),
    "find": ("-exec", "-execdir", "-ok", "-okdir"),
    "tar": ("--to-command", "--checkpoint-action", "--use-compress-program", "-I", "--info-script",
            "--new-volume-script", "-F"),
    "rsync": ("-e", "--rsh", "--rsync-path"),
    "ssh": ("-o", "-F"),
    "zip": ("-TT", "--unzip-command"),
}
# sed commands that run a command or touch a file (e, w, W, r, R, after any address), and the s flags e and w.
_SED_ADDRESS = r"(\d+(~\d+)?|\$|/[^/\n]*/[IM]*|\\\S+?)"
_SED_EXEC = re.compile(rf"(^|[;{{}}\n])\s*({_SED_ADDRESS}\s*(,\s*({_SED_ADDRESS}|[+~]\d+))?)?\s*!?\s*[eEwWrR](\s|;|$)"
                       r"|/[gpiImM0-9]*[ew][gpiImM0-9]*(\s|;|$)")
_AWK_EXEC = re.compile(r"\bsystem\s*\(|\|\s*getline|print[^;]*[|>]")

DEFAULT_CEILING_ID = "default:ceiling"


@dataclass(frozen=True)
class Part:
    """How one subject of a call was decided."""

    label: str
    decision: Decision
    rule: str
    note: str = ""


@dataclass(frozen=True)
class Verdict:
    """A decision on a call: what, by which rule, why, and a fingerprint of the input (never the input)."""

    decision: Decision
    rule: Rule
    reason: str
    subject: str
    tool: str
    fingerprint: str
    parts: tuple[Part, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"decision": self.decision, "rule": self.rule.as_dict(), "reason": self.reason,
                "subject": self.subject, "tool": self.tool, "fingerprint": self.fingerprint,
                "parts": [{"label": p.label, "decision": p.decision, "rule": p.rule, "note": p.note}
                          for p in self.parts]}


@dataclass
class Policy:
    """The rules in force. Build it with :func:`kirocrew_core.gate.policy_file.current_policy`.

    ``owner_rules`` come from ``policy.toml`` in file order; ``defaults`` are its ``[defaults]``
    (per authority); ``problems`` says what could not be used (shown by the CLI, the page and the
    doctor); ``ceiling`` is the governance ceiling (None: it could not be assembled, so its
    default asks for every call of an MCP server). ``project_rules`` (workspace → rules) are
    read by the caller for the workspace of a call and passed to :meth:`decide`.
    """

    owner_rules: list[Rule] = field(default_factory=list)
    defaults: dict[str, Decision] = field(default_factory=lambda: dict(AUTHORITY_DEFAULTS))
    ceiling: list[str] | None = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    builtin_rules: list[Rule] = field(default_factory=list)
    source: str = ""
    _default_cache: list[Rule] | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def build(cls, owner_rules: Sequence[Rule] = (), defaults: dict[str, Decision] | None = None, *,
              problems: Sequence[str] = (), pm: KirocrewPluginManager | None = None, source: str = "") -> Policy:
        """A policy with the built-in protections and the governance ceiling of this process."""
        from kirocrew_core.governance import ceiling_patterns

        builtin, protection_problems = protection_rules(pm)
        try:
            ceiling: list[str] | None = ceiling_patterns(pm)
        except Exception:  # noqa: BLE001 - a ceiling that cannot be assembled asks for every MCP call
            ceiling = None
        merged = dict(AUTHORITY_DEFAULTS)
        merged.update(defaults or {})
        return cls(list(owner_rules), merged, ceiling, [*problems, *protection_problems], builtin, source)

    # -- the rules in precedence order -----------------------------------------------------------

    def rules(self, project_rules: Sequence[Rule] = ()) -> list[Rule]:
        """Built-in, owner and project rules, in precedence order (defaults excluded)."""
        return [*self.builtin_rules, *self.owner_rules, *project_rules]

    def default_rules(self, project_defaults: Mapping[str, Decision] | None = None) -> list[Rule]:
        """The defaults in the order they are tried (the ceiling first); a project's count where stricter."""
        if not project_defaults:
            if self._default_cache is None:
                self._default_cache = self._defaults_with({})
            return list(self._default_cache)
        return self._defaults_with(project_defaults)

    def _defaults_with(self, project_defaults: Mapping[str, Decision]) -> list[Rule]:
        merged = dict(self.defaults)
        for authority, decision in project_defaults.items():
            if SEVERITY[decision] > SEVERITY[merged.get(authority, UNKNOWN_AUTHORITY_DEFAULT)]:
                merged[authority] = decision
        ceiling = _ceiling_rule(self.ceiling)
        return [*([ceiling] if ceiling else []), *default_rules(merged)]

    # -- deciding ----------------------------------------------------------------------------------

    def decide(self, call: ToolCall, ctx: Context, project_rules: Sequence[Rule] = (),
               project_defaults: Mapping[str, Decision] | None = None) -> Verdict:
        """The decision on ``call`` where ``ctx`` says it runs (see the module docstring).

        ``project_rules`` and ``project_defaults`` are what :func:`~.policy_file.project_rules` reads
        for the call's workspace: a project default counts only where it is stricter than the owner's.
        """
        if not ctx.home:
            from kirocrew_core import home

            ctx = Context(ctx.authority, ctx.agent, ctx.workspace, str(home.user_home()))
        index = _index_of(self.builtin_rules, self.owner_rules)
        scope = _Scope(ctx)
        project = [r for r in project_rules if scope.admits(r)]
        defaults = [r for r in self.default_rules(project_defaults) if scope.admits(r)]
        parts: list[tuple[Part, Rule, Subject]] = []
        for subject in subjects(call, ctx):
            # The index only narrows: every rule it leaves out could not match this subject's tool or command.
            rules = [r for r in index.candidates(subject, scope) if scope.admits(r)]
            outcome = self._subject(subject, scope, [*rules, *project], defaults)
            if outcome is not None:
                parts.append((outcome[0], outcome[1], subject))
        if not parts:  # only restrict-only subjects, none restricted: cannot happen for a real call
            rule = defaults[-1] if defaults else _fallback(ctx.authority)
            parts.append((Part(call.ref, rule.decision, rule.id), rule, Subject(call.name, call.server, "call",
                                                                                call.ref)))
        worst = max(parts, key=lambda item: SEVERITY[item[0].decision])
        part, rule, subject = next(item for item in parts if item[0].decision == worst[0].decision)
        return Verdict(part.decision, rule, _reason(part, rule, subject), part.label, call.ref, call.fingerprint(),
                       tuple(p for p, _, _ in parts))

    def _subject(self, subject: Subject, scope: _Scope, rules: list[Rule],
                 defaults: list[Rule]) -> tuple[Part, Rule] | None:
        ctx = scope.ctx
        found: list[tuple[Decision, Rule, str]] = []
        for rule in rules:
            if subject.restrict_only and rule.decision == "allow":
                continue
            if not _tool_matches(rule, subject):
                continue
            match = _input_match(rule, subject, scope)
            if match is NO:
                continue
            if match is MAYBE:
                if rule.decision == "allow":
                    continue
                found.append(("ask", rule, "the input is not known before the call runs" if rule.decision == "deny"
                              else ""))
            else:
                found.append((rule.decision, rule, ""))
        if found:
            decision, rule, note = max(found, key=lambda item: SEVERITY[item[0]])
            decision, rule, note = next(item for item in found if item[0] == decision)
        elif subject.restrict_only:
            return None
        else:
            rule = next((r for r in defaults if _tool_matches(r, subject)), _fallback(ctx.authority))
            decision, note = rule.decision, ""
        if decision == "allow" and subject.unknown:
            decision, note = "ask", subject.unknown
        elif decision == "allow" and rule.tier != "default" and rule.commands and subject.command is not None:
            risky = _risky(subject.command)
            if risky:
                decision, note = "ask", risky
        return Part(subject.label, decision, rule.id, note), rule

    # -- blanket grants ----------------------------------------------------------------------------

    def may_auto_approve(self, ref: str, authorities: Sequence[str] = ()) -> bool:
        """Whether ``ref`` may keep a blanket auto-approve: allowed whatever the input, under every authority.

        ``authorities`` are the ones sessions may run under (default: every one the policy has a
        default for). False for the shell (a line the parser cannot reduce always asks), for
        anything a ``deny``/``ask`` rule could match (input and scope ignored: any overlap
        counts), for anything the governance ceiling names, and when an authority would not
        allow it by an unconditional rule or by default.
        """
        target = _ref(ref)
        if target is None:
            return False
        server, tool = target
        if server is None and tool in SHELL_TOOLS:
            return False
        if self.ceiling is None or (server is not None and _ceiling_names(self.ceiling, server)):
            return False
        if self.problems and any("protected_paths" in p for p in self.problems):
            return False
        for rule in self.rules():
            if rule.decision != "allow" and any(_overlaps(pattern, server, tool) for pattern in rule.tools):
                return False
        for authority in authorities or tuple(self.defaults):
            if not self._allowed_everywhere(server, tool, authority):
                return False
        return True

    def _allowed_everywhere(self, server: str | None, tool: str | None, authority: str) -> bool:
        for rule in [*self.owner_rules, *default_rules(self.defaults)]:
            if rule.decision != "allow" or rule.has_input or rule.workspace is not None:
                continue
            if rule.authority not in (None, authority) or rule.agent not in (None, "kirocrew"):
                continue
            if any(_covers(pattern, server, tool) for pattern in rule.tools):
                return True
        return False

    def trusted_tools(self, candidates: Sequence[str], authority: str) -> tuple[str, ...]:
        """The ``candidates`` a sandbox may pass to ``--trust-tools``: those allowed whatever their input."""
        return tuple(ref for ref in candidates if self.may_auto_approve(ref, (authority,)))


def _fallback(authority: str) -> Rule:
    decision = AUTHORITY_DEFAULTS.get(authority, UNKNOWN_AUTHORITY_DEFAULT)
    return Rule(f"default:{authority}", decision, "*", authority=authority, tier="default", source="built-in",
                reason=f"the {authority} authority's default when no rule matches")


def _ceiling_rule(ceiling: list[str] | None) -> Rule | None:
    if ceiling is None:
        return Rule(DEFAULT_CEILING_ID, "ask", "@*", tier="default", source="built-in",
                    reason="the governance ceiling could not be assembled, so every MCP call asks")
    if not ceiling:
        return None
    return Rule(DEFAULT_CEILING_ID, "ask", ceiling[0], tier="default", source="built-in",
                reason="the governance ceiling sends this server's calls through the approval gate",
                also_tools=tuple(ceiling[1:]))


def _ceiling_names(ceiling: list[str], server: str) -> bool:
    from kirocrew_core.governance import governs

    return governs(ceiling, f"@{server}")


class _Scope:
    """Whether a rule's authority, agent and workspace admit the call's context (the workspace resolved once)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._workspace: str | None = None
        self._roots: tuple[tuple[str, ...], tuple[str, ...]] | None = None

    @property
    def roots(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The workspace's and the home's forms path globs are anchored at, resolved once per decision."""
        if self._roots is None:
            self._roots = roots(self.ctx.workspace, self.ctx.home)
        return self._roots

    def admits(self, rule: Rule) -> bool:
        ctx = self.ctx
        if rule.authority is not None and rule.authority != ctx.authority:
            return False
        if rule.agent is not None and not fnmatchcase(ctx.agent or "", rule.agent):
            return False
        if rule.workspace is not None:
            if self._workspace is None:
                self._workspace = os.path.realpath(ctx.workspace) if ctx.workspace else ""
            workspace = self._workspace
            root = os.path.realpath(rule.workspace)
            if not workspace or not (workspace == root or workspace.startswith(root.rstrip("/") + "/")):
                return False
        return True


_GLOB_CHARS = frozenset("*?[")

# The indexes of the policies in use, by the identity of their rule lists: built on a policy's first decision
# (it is read once per file signature and decides many calls), and shared by a copy with other defaults
# (``dataclasses.replace(policy, defaults=…)``). The lists are never changed once a policy is built.
_indexes: list[tuple[list[Rule], list[Rule], _RuleIndex]] = []
_indexes_lock = threading.Lock()
_INDEXES_KEPT = 8


def _index_of(builtin: list[Rule], owner: list[Rule]) -> _RuleIndex:
    with _indexes_lock:
        for kept_builtin, kept_owner, index in _indexes:
            if kept_builtin is builtin and kept_owner is owner:
                return index
    index = _RuleIndex([*builtin, *owner])
    with _indexes_lock:
        _indexes.append((builtin, owner, index))
        del _indexes[:-_INDEXES_KEPT]
    return index


class _RuleIndex:
    """The built-in and owner rules by what a subject must have for them to match, kept in precedence order.

    A rule is a candidate for a subject when its tool may name the subject's (a built-in name and
    an ``@server`` are looked up; a glob such as ``*``, ``@builtin``, ``fs_*``, ``@git-*`` always
    may) and its input may match the subject's: a command rule by the command's first word, a
    path rule by the directories its globs start with, a domain rule by the host or a suffix of
    it; an input not known keeps every rule of its kind. The candidates are then matched exactly,
    so the index changes no decision, only how many rules are tried (500 rules: a handful).
    """

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = list(rules)
        self.by_tool: dict[str, list[int]] = {}
        self.by_server: dict[str, list[int]] = {}
        self.any_tool: list[int] = []
        self.by_first_word: dict[str, set[int]] = {}
        self.by_two_words: dict[tuple[str, str], set[int]] = {}
        self.any_first_word: set[int] = set()
        self.by_domain: dict[str, set[int]] = {}  # "example.com", and ".example.com" for "*.example.com"
        self.any_domain: set[int] = set()
        self.path_rules = [p for p, rule in enumerate(self.rules) if rule.paths]
        self.command_rules = {p for p, rule in enumerate(self.rules) if rule.commands}
        self.domain_rules = {p for p, rule in enumerate(self.rules) if rule.domains}
        self.no_input = {p for p, rule in enumerate(self.rules) if not rule.has_input}
        self._tool_cache: dict[tuple[str | None, str], tuple[frozenset[int], frozenset[int]]] = {}
        self._by_directory: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[dict[str, set[int]], set[int]]] = {}
        for position, rule in enumerate(self.rules):
            for pattern in dict.fromkeys(rule.tools):
                if pattern.startswith("@") and pattern != "@builtin":
                    server = pattern[1:].partition("/")[0]
                    if _GLOB_CHARS.isdisjoint(server):
                        self.by_server.setdefault(server.casefold(), []).append(position)
                        continue
                elif _GLOB_CHARS.isdisjoint(pattern) and pattern not in ("*", "@builtin"):
                    self.by_tool.setdefault(pattern, []).append(position)
                    continue
                self.any_tool.append(position)
            for prefix in rule.commands:
                words = prefix.split()
                if not _GLOB_CHARS.isdisjoint(words[0]):
                    self.any_first_word.add(position)
                elif rule.decision == "allow" and len(words) > 1 and _GLOB_CHARS.isdisjoint(words[1]):
                    # An allow needs its second word right after the first (a deny or ask may look past options).
                    self.by_two_words.setdefault((words[0], words[1]), set()).add(position)
                else:
                    self.by_first_word.setdefault(words[0], set()).add(position)
            for domain in rule.domains:
                if domain == "*":
                    self.any_domain.add(position)
                else:
                    self.by_domain.setdefault(domain[1:] if domain.startswith("*.") else domain, set()).add(position)

    def candidates(self, subject: Subject, scope: _Scope) -> list[Rule]:
        """The rules that may match ``subject``, in precedence order."""
        tools, plain = self._for_tool(subject.server, subject.tool)
        kind = subject.kind
        if kind == "command":
            command = subject.command
            first = command.argv[0].value if command is not None and command.argv else None
            if first is None:  # a part not reduced, or a name not known: every command rule may match
                named = self.command_rules
            else:
                names = {first, os.path.basename(first)}
                second = command.argv[1].value if len(command.argv) > 1 else None
                named = {p for name in names for p in self.by_first_word.get(name, ())}
                named.update(self.any_first_word)
                if second is not None:
                    named.update(p for name in names for p in self.by_two_words.get((name, second), ()))
        elif kind == "domain":
            host = subject.host
            if host is None:
                named = self.domain_rules
            else:
                named = {*self.by_domain.get(host, ()), *self.any_domain}
                for dot in (i for i, c in enumerate(host) if c == "."):
                    named.update(self.by_domain.get(host[dot:], ()))
        elif kind == "path":
            value = subject.path
            if value is None or not value.known or subject.reaches:
                named = set(self.path_rules)
            else:
                named = self._under(value.literal or "", scope) | self._under(value.resolved or "", scope)
        else:
            named = set()
        picked = {p for p in named if p in tools}
        picked.update(plain)
        return [self.rules[p] for p in sorted(picked)]

    def _for_tool(self, server: str | None, tool: str) -> tuple[frozenset[int], frozenset[int]]:
        """The rules whose tool may name ``tool`` (of ``server``), and those of them without input."""
        key = (server.casefold() if server is not None else None, tool if server is None else "")
        cached = self._tool_cache.get(key)
        if cached is None:
            if server is None:
                found = {p for name in tool_names(tool) for p in self.by_tool.get(name, ())}
            else:
                found = set(self.by_server.get(key[0] or "", ()))
            found.update(self.any_tool)
            cached = (frozenset(found), frozenset(found & self.no_input))
            if len(self._tool_cache) >= 1024:
                self._tool_cache.clear()
            self._tool_cache[key] = cached
        return cached

    def _under(self, path: str, scope: _Scope) -> set[int]:
        """The path rules with a glob that starts at ``path`` or a directory above it (or anywhere: ``/**``)."""
        by_directory, anywhere = self._directories(scope.roots)
        found = set(anywhere)
        current = path
        while current:
            found.update(by_directory.get(current, ()))
            current = current[:current.rfind("/")]
        return found

    def _directories(self, at: tuple[tuple[str, ...], tuple[str, ...]]) -> tuple[dict[str, set[int]], set[int]]:
        """Path rules by the directory each of their anchored globs starts in (per workspace and home)."""
        cached = self._by_directory.get(at)
        if cached is not None:
            return cached
        by_directory: dict[str, set[int]] = {}
        anywhere: set[int] = set()
        for position in self.path_rules:
            for glob, _, _ in anchored_globs(self.rules[position].paths, "", "", at):
                directory = start_directory(glob)
                (anywhere if not directory else by_directory.setdefault(directory, set())).add(position)
        if len(self._by_directory) >= 64:
            self._by_directory.clear()
        self._by_directory[at] = (by_directory, anywhere)
        return by_directory, anywhere


def _tool_matches(rule: Rule, subject: Subject) -> bool:
    if rule.id == DEFAULT_CEILING_ID:  # the ceiling governs a whole server, whatever tool a pattern names
        if subject.server is None:
            return False
        return rule.tool == "@*" or _ceiling_names(list(rule.tools), subject.server)
    return any(_pattern_matches(pattern, subject.server, subject.tool) for pattern in rule.tools)


def _pattern_matches(pattern: str, server: str | None, tool: str) -> bool:
    if pattern == "*" or (server is None and pattern == tool):
        return True
    if pattern == "@builtin":
        return server is None
    if pattern.startswith("@"):
        srv, _, name = pattern[1:].partition("/")
        return server is not None and fnmatchcase(server.casefold(), srv.casefold()) and (
            not name or fnmatchcase(tool, name))
    return server is None and any(fnmatchcase(name, pattern) for name in tool_names(tool))


def _input_match(rule: Rule, subject: Subject, scope: _Scope) -> Match:
    ctx = scope.ctx
    if not rule.has_input:
        return YES
    for_allow = rule.decision == "allow"
    if rule.commands:
        if subject.kind != "command":
            return NO
        if subject.command is None:
            return MAYBE
        found = NO
        for prefix in rule.commands:
            match = _prefix_match(prefix, subject.command, for_allow)
            if match is YES:
                return YES
            if match is MAYBE:
                found = MAYBE
        return found
    if rule.paths:
        if subject.path is None:
            return NO
        match = path_match(rule.paths, subject.path, workspace=ctx.workspace, home=ctx.home, for_allow=for_allow,
                           at=scope.roots)
        if match is NO and not for_allow and subject.reaches and subject.path.known:
            tops = {subject.path.literal or "", subject.path.resolved or ""} - {""}
            if any(_search_reaches(rule.paths, top, scope) is YES for top in tops):
                # A search below reads what the rule names; a change below may or may not touch it.
                return MAYBE if subject.tool == "write" else YES
        return match
    if subject.kind != "domain":
        return NO
    return domain_match(rule.domains, subject.host)


def _search_reaches(patterns: tuple[str, ...], root: str, scope: _Scope) -> Match:
    """A search rooted at ``root`` reaches a protected path below it (``grep -r x ~/.kiro`` reads the token)."""
    prefix = root.rstrip("/") + "/"
    for absolute, _, _ in anchored_globs(patterns, scope.ctx.workspace, scope.ctx.home, scope.roots):
        fixed = re.split(r"[*?\[]", absolute, maxsplit=1)[0]
        if fixed.startswith(prefix) or absolute.startswith("/**"):
            return YES
    return NO


def _prefix_match(prefix: str, command: Any, for_allow: bool) -> Match:
    words = prefix.split()
    argv = command.argv
    if len(argv) < len(words):
        return MAYBE if command.open_tail and not for_allow else NO
    result = YES
    for index, pattern in enumerate(words):
        value = argv[index].value
        if value is None:
            result = MAYBE
            continue
        if index == 0 and "/" in value and "/" not in pattern:
            # A path to a program: a deny or ask names it by its basename; an allow covers only the bare name,
            # so a program of that name in some other folder is not allowed by it.
            if for_allow:
                return NO
            value = os.path.basename(value)
        if not fnmatchcase(value, pattern):
            return NO if for_allow or index == 0 else _past_options(words, argv)
    return result


def _past_options(words: list[str], argv: tuple[Any, ...]) -> Match:
    """For a deny or ask: MAYBE when ``words`` follow the command's name once options are skipped.

    ``git -C . push`` runs ``git push``: options (and the word after each, which may be its value)
    before a subcommand must not dodge a rule about the subcommand. Which option takes a value is
    not known, so this is MAYBE (the rule may apply), never YES.
    """
    index, after_option = 1, False
    for word in argv[1:]:
        value = word.value
        if value is not None and fnmatchcase(value, words[index]):
            index += 1
            after_option = False
            if index == len(words):
                return MAYBE
        elif value is None or value.startswith("-"):
            after_option = value is not None
        elif after_option:
            after_option = False  # the option's value
        else:
            return NO
    return NO


def _risky(command: Any) -> str:
    """Why an allow by command prefix does not cover ``command`` (empty when it does)."""
    risky = [name for name in command.assignments if _RISKY_VARIABLES.match(name)]
    if risky:
        return f"it is run with {', '.join(risky)} set, which changes what runs"
    name = command.name or ""
    words = [w.value or "" for w in command.argv[1:]]
    for option in _EXEC_OPTIONS.get(name, ()):
        for word in words:
            flag = word.partition("=")[0]
            if flag == option or (option.startswith("--") and flag.startswith("--") and len(flag) > 3
                                  and option.startswith(flag)) or (
                    not option.startswith("--") and len(option) == 2 and flag.startswith(option) and
                    not flag.startswith("--")):
                return f"{name} {option} runs other programs"
    if name in ("sed", "gsed") and any(_SED_EXEC.search(w) for w in words if not w.startswith("-")):
        return "a sed script that runs commands or reads or writes files"
    if name in ("awk", "gawk", "mawk", "nawk") and any(_AWK_EXEC.search(w) for w in words):
        return "an awk program that runs commands or writes files"
    if command.open_tail:
        return f"{command.via or 'a wrapper'} adds arguments not known before it runs"
    return ""


def _reason(part: Part, rule: Rule, subject: Subject) -> str:
    """What the owner and the model are told: which rule decided, about what, and why."""
    why = rule.reason or "no reason given"
    if part.decision == "deny":
        return f"kirocrew policy rule {rule.id} ({rule.describe()}) refused `{subject.label}`: {why}"
    if part.note and part.decision == "ask" and rule.decision == "allow":
        return f"`{subject.label}` needs the owner's decision: {part.note}"
    if part.note:
        return f"rule {rule.id} ({rule.describe()}) may apply to `{subject.label}` ({part.note}): the owner decides"
    if part.decision == "ask":
        return f"rule {rule.id} ({rule.describe()}) asks the owner about `{subject.label}`: {why}"
    return f"rule {rule.id} ({rule.describe()}) allows `{subject.label}`"


# -- references ------------------------------------------------------------------------------------


def _ref(ref: str) -> tuple[str | None, str | None] | None:
    """``(server, tool)``: ``@srv`` → (srv, None), ``@srv/t`` → (srv, t), ``read`` → (None, read)."""
    from kirocrew_core.gate.rules import canonical_tool

    text = ref.strip()
    if not text:
        return None
    if text.startswith("@"):
        server, _, tool = text[1:].partition("/")
        return (server, tool or None) if server else None
    return None, canonical_tool(text)


def _overlaps(pattern: str, server: str | None, tool: str | None) -> bool:
    """Whether ``pattern`` could match some call of the reference (globs on both sides may meet)."""
    if pattern == "*":
        return True
    if pattern == "@builtin":
        return server is None
    if pattern.startswith("@"):
        if server is None:
            return False
        srv, _, name = pattern[1:].partition("/")
        if not _globs_meet(srv.casefold(), server.casefold()):
            return False
        return tool is None or not name or _globs_meet(name, tool)
    return server is None and tool is not None and any(_globs_meet(pattern, name) for name in tool_names(tool))


def _covers(pattern: str, server: str | None, tool: str | None) -> bool:
    """Whether ``pattern`` matches every call of the reference."""
    if pattern == "*":
        return True
    if pattern == "@builtin":
        return server is None
    if pattern.startswith("@"):
        if server is None:
            return False
        srv, _, name = pattern[1:].partition("/")
        if not fnmatchcase(server.casefold(), srv.casefold()):
            return False
        return not name or name == "*" or (tool is not None and fnmatchcase(tool, name))
    return server is None and tool is not None and any(fnmatchcase(name, pattern) for name in tool_names(tool))


def _globs_meet(a: str, b: str) -> bool:
    if fnmatchcase(a, b) or fnmatchcase(b, a):
        return True
    return any(c in a for c in "*?[") and any(c in b for c in "*?[")
