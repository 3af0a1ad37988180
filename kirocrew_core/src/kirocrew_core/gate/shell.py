"""A shell command line reduced to the simple commands it would run, with a real parser.

Prefix or regex matching on the raw command line is bypassed by chaining (``a; b``,
``a && b``, pipes, ``&``, newlines), substitution (``$(…)``, backticks), wrappers
(``bash -c``, ``env``, ``xargs``) and redirections (the permission reference, §5). So the
line is parsed with tree-sitter-bash and every ``command`` node anywhere in the tree —
inside lists, pipelines, subshells, substitutions, conditions, loops, function bodies —
becomes a :class:`SimpleCommand`. Then:

- **wrappers** are unwrapped: ``env``, ``timeout``, ``time``, ``nice``, ``nohup``, ``stdbuf``,
  ``command``, ``builtin``, ``exec``, ``setsid``, ``ionice``, ``coproc``, ``busybox`` and
  ``xargs`` stand for the command they run (only that one is checked); ``sudo``/``doas``
  are checked themselves *and* for the command they run; ``find -exec …`` adds the command it
  execs;
- **scripts inside scripts** are parsed too: ``bash -c '…'`` (any ``sh``-like shell, flags such
  as ``-lc``), ``eval …``, ``env -S '…'``, and a here-document or here-string fed to a shell;
- **redirections** to files are file writes (``>``, ``>>``, ``&>``, ``>|``, ``<>``) or reads
  (``<``); ``/dev/null`` and friends and descriptor copies (``2>&1``) are not files.

A word's value is known when it is literal (quoted or not; ``~``, ``$HOME`` and ``$PWD`` are
expanded); anything built from another variable or a substitution is unknown (None). What the
parser cannot reduce to known simple commands is reported in :attr:`Reduction.unknown`, and the
engine never allows such a line without asking: a parse error, a command name that is not
known before it runs (``$CMD x``), ``eval`` or ``bash -c`` of something unknown, a shell
reading commands from a pipe, a value bash evaluates as code (``${x@P}``; arithmetic on
anything but numbers, since an array subscript in a variable's value runs its substitutions;
``unset 'a[$(…)]'``), a line longer than :data:`MAX_CHARS`, a line with a NUL byte.
"""

from __future__ import annotations

import os
import re
import shlex
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

MAX_CHARS = 10_000
MAX_COMMANDS = 256
MAX_DEPTH = 4

#: Shells whose ``-c`` argument (or here-document) is a script to parse.
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh", "fish"})
#: Wrappers that only run another command: the command they run is what is checked.
TRANSPARENT = frozenset({"env", "timeout", "time", "nice", "nohup", "stdbuf", "command", "builtin", "exec",
                         "setsid", "ionice", "coproc", "busybox", "xargs"})
#: Wrappers that change who runs the command: checked themselves and for what they run.
ELEVATING = frozenset({"sudo", "doas"})

#: Shell options whose value is a script (fish), and options that take the next word as their value.
_SHELL_SCRIPT_OPTIONS = frozenset({"--command", "--init-command"})
_SHELL_VALUE_OPTIONS = frozenset({"--rcfile", "--init-file"})

#: Files that are not files for a permission decision.
_NOT_FILES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/stdin", "/dev/tty", "-"})
_WRITE_OPERATORS = frozenset({">", ">>", "&>", "&>>", ">|", "<>"})
_READ_OPERATORS = frozenset({"<"})
_GLOB = frozenset("*?[")

# Options that take a value, per wrapper (short and long; a long one may also be --name=value).
_VALUE_OPTIONS: dict[str, frozenset[str]] = {
    "env": frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}),
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "--class", "-n", "--classdata", "-p", "-P", "-u"}),
    "stdbuf": frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}),
    "exec": frozenset({"-a"}),
    "xargs": frozenset({"-I", "-i", "-n", "--max-args", "-P", "--max-procs", "-L", "--max-lines", "-s",
                        "--max-chars", "-d", "--delimiter", "-E", "-e", "--eof", "-a", "--arg-file"}),
    "sudo": frozenset({"-u", "--user", "-g", "--group", "-C", "--close-from", "-D", "--chdir", "-h", "--host",
                       "-p", "--prompt", "-r", "--role", "-t", "--type", "-T", "--command-timeout", "-U",
                       "--other-user"}),
    "doas": frozenset({"-u", "-C"}),
}


@dataclass(frozen=True)
class Word:
    """One argument: ``value`` when known before the run, else None; ``glob`` when the shell expands it."""

    value: str | None
    glob: bool = False

    @property
    def shown(self) -> str:
        return self.value if self.value is not None else "<unknown>"


@dataclass(frozen=True)
class SimpleCommand:
    """A command the line would run; ``open_tail`` when more arguments come from elsewhere (``xargs``)."""

    argv: tuple[Word, ...]
    #: Names assigned in front of it (``A=1 cmd``, ``env A=1 cmd``) or on their own in the line (``PATH=…; cmd``).
    assignments: tuple[str, ...] = ()
    open_tail: bool = False
    via: str | None = None  # the wrapper or construct it was found in ("bash -c", "xargs", "find -exec")

    @property
    def name(self) -> str | None:
        """The command's name: the basename of ``argv[0]`` (None when unknown)."""
        first = self.argv[0].value if self.argv else None
        return os.path.basename(first) if first else None

    @property
    def text(self) -> str:
        """The command as words (for the owner, the audit fingerprint and messages)."""
        return " ".join(w.shown for w in self.argv) + (" …" if self.open_tail else "")


@dataclass(frozen=True)
class Redirect:
    """A file the line reads (``<``) or writes (``>``)."""

    target: Word
    write: bool


@dataclass
class Reduction:
    """What :func:`reduce` found: the commands, the files redirected, and why parts could not be reduced."""

    commands: list[SimpleCommand] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)

    @property
    def reduced(self) -> bool:
        return not self.unknown

    def _unknown(self, why: str) -> None:
        if why not in self.unknown:
            self.unknown.append(why)


_parser_lock = threading.Lock()
_parser: Any = None


def _parse(source: bytes) -> Any:
    global _parser
    with _parser_lock:
        if _parser is None:
            import tree_sitter_bash
            from tree_sitter import Language, Parser

            _parser = Parser(Language(tree_sitter_bash.language()))
        return _parser.parse(source)


def reduce(command: str, *, cwd: str = "", home: str = "") -> Reduction:
    """Reduce ``command`` (see the module docstring). ``home``/``cwd`` give ``~``, ``$HOME``, ``$PWD``."""
    out = Reduction()
    if len(command) > MAX_CHARS:
        out._unknown(f"the command is longer than {MAX_CHARS} characters")
        return out
    if "\x00" in command:
        # bash drops NUL bytes from what it reads and execve ends an argument at one, so the line that runs is
        # not the line as written: decide on it without them (``rm\0 x`` is ``rm x``), and never allow it unasked.
        out._unknown("the command contains a NUL byte")
        command = command.replace("\x00", "")
    reducer = _Reducer(out, cwd=cwd, home=home)
    reducer.script(command, depth=0, via=None)
    if reducer.assigned:
        # A variable set on its own (``PATH=…; git status``, ``export LD_PRELOAD=…``) is in force for the
        # commands after it: each command counts it as assigned in front of it.
        names = tuple(dict.fromkeys(reducer.assigned))
        out.commands = [replace(c, assignments=tuple(dict.fromkeys((*c.assignments, *names))))
                        for c in out.commands]
    return out


class _Reducer:
    def __init__(self, out: Reduction, *, cwd: str, home: str) -> None:
        self.out = out
        self.vars = {"HOME": home, "PWD": cwd} if home else {"PWD": cwd}
        self.vars = {k: v for k, v in self.vars.items() if v}
        self.home = home
        self.assigned: list[str] = []  # names set by assignments that stand alone

    # -- scripts and nodes ----------------------------------------------------------------------

    def script(self, source: str, *, depth: int, via: str | None) -> None:
        if depth > MAX_DEPTH:
            self.out._unknown(f"scripts nested deeper than {MAX_DEPTH} levels")
            return
        tree = _parse(source.encode("utf-8", "surrogatepass"))
        root = tree.root_node
        if root.has_error:
            self.out._unknown("the command does not parse as shell")
        self.walk(root, depth=depth, via=via, source=source)

    def walk(self, node: Any, *, depth: int, via: str | None, source: str) -> None:
        stack = [node]
        while stack:
            current = stack.pop()
            kind = current.type
            if kind == "command":
                self.command(current, depth=depth, via=via, pipe_fed=_pipe_fed(current))
            elif kind == "declaration_command" or kind == "unset_command":
                words = [self.word(c) for c in current.named_children if c.type not in ("variable_assignment",)]
                keyword = Word(_text(current.children[0])) if current.children else Word(None)
                if kind == "declaration_command":  # ``export PATH`` exports what an earlier assignment set
                    self.assigned.extend(_text(c) for c in current.named_children if c.type in ("variable_name", "word")
                                         and not _text(c).startswith(("-", "+")))
                if any(_subscript_code(w.value) for w in words):
                    self.out._unknown(f"{keyword.value} evaluates the subscript of a variable name it is given "
                                      "(a[$(…)])")
                self.add(SimpleCommand((keyword, *words), via=via))
            elif kind == "file_redirect":
                self.redirect(current)
            elif kind == "redirected_statement":
                self.fed_script(current, depth=depth)
            elif kind == "variable_assignment" and (current.parent is None or current.parent.type != "command"):
                self.assigned.append(_assigned_name(current))
            why = _evaluates_values(current)
            if why:
                self.out._unknown(why)
            stack.extend(reversed(current.children))

    def add(self, command: SimpleCommand) -> None:
        if len(self.out.commands) >= MAX_COMMANDS:
            self.out._unknown(f"more than {MAX_COMMANDS} commands")
            return
        self.out.commands.append(command)

    def command(self, node: Any, *, depth: int, via: str | None, pipe_fed: bool) -> None:
        name_node = node.child_by_field_name("name")
        assignments = tuple(_text(c.child_by_field_name("name")) for c in node.named_children
                            if c.type == "variable_assignment" and c.child_by_field_name("name") is not None)
        if name_node is None:
            return  # assignments alone (``A=1``): their substitutions are walked as nodes
        name = self.word(name_node.named_children[0] if name_node.named_children else name_node)
        args = [self.word(c) for c in node.children_by_field_name("argument")]
        fed = False
        for here in (c for c in node.children if c.type == "herestring_redirect"):
            self.here_string(name, here, depth=depth)
            fed = True
        parent = node.parent
        if parent is not None and parent.type == "redirected_statement":
            fed = fed or any(c.type == "heredoc_redirect" for c in parent.children)
        self.expand([name, *args], assignments, depth=depth, via=via, pipe_fed=pipe_fed, script_fed=fed)

    def redirect(self, node: Any) -> None:
        destination = node.child_by_field_name("destination")
        operator = next((c.type for c in node.children if not c.is_named), ">")
        if destination is None or operator in (">&", "<&", ">&-", "<&-"):
            return
        target = self.word(destination)
        if target.value is not None and (target.value in _NOT_FILES or target.value.startswith("/dev/fd/")):
            return
        if destination.type == "number" and operator in (">&", "<&"):
            return
        if operator in _WRITE_OPERATORS or operator.startswith(">"):
            self.out.redirects.append(Redirect(target, write=True))
        elif operator in _READ_OPERATORS:
            self.out.redirects.append(Redirect(target, write=False))

    def fed_script(self, node: Any, *, depth: int) -> None:
        """A here-document fed to a shell (``bash <<'EOF' … EOF``) is a script: parse it."""
        body = node.child_by_field_name("body")
        if body is None or body.type != "command":
            return
        name = self.word(body.child_by_field_name("name") or body)
        if _base(name.value) not in SHELLS:
            return
        for here in (c for c in node.children if c.type == "heredoc_redirect"):
            start = next((c for c in here.children if c.type == "heredoc_start"), None)
            content = next((c for c in here.children if c.type == "heredoc_body"), None)
            if content is None:
                continue
            quoted = start is not None and _text(start)[:1] in ("'", '"')
            if not quoted and any(c.type not in ("heredoc_content",) for c in content.named_children):
                self.out._unknown("a here-document with expansions is fed to a shell")
                continue
            body = _text(content) if quoted else _unescape_heredoc(_text(content))
            self.script(body, depth=depth + 1, via=f"{name.value} <<")

    def here_string(self, name: Word, node: Any, *, depth: int) -> None:
        if _base(name.value) not in SHELLS:
            return
        value = self.word(node.named_children[0]) if node.named_children else Word(None)
        if value.value is None:
            self.out._unknown("a here-string with expansions is fed to a shell")
        else:
            self.script(value.value, depth=depth + 1, via=f"{name.value} <<<")

    # -- words ----------------------------------------------------------------------------------

    def word(self, node: Any) -> Word:
        kind = node.type
        text = _text(node)
        if kind == "word":
            return self._plain(text)
        if kind == "number":
            return Word(text)
        if kind == "raw_string":
            return Word(text[1:-1])
        if kind == "string":
            return self._double_quoted(node)
        if kind == "concatenation":
            parts = [self.word(c) for c in node.named_children]
            if any(_text(c) in ("{", "}") for c in node.children) and "," in text:
                return Word(None)  # brace expansion: several words, not one
            if any(p.value is None for p in parts):
                return Word(None)
            return Word("".join(p.value or "" for p in parts), glob=any(p.glob for p in parts))
        if kind in ("simple_expansion", "expansion"):
            return Word(self._variable(node))
        if kind == "command_name":
            return self.word(node.named_children[0]) if node.named_children else Word(None)
        return Word(None)  # substitutions, arithmetic, $'…', $"…", brace expressions

    def _plain(self, text: str) -> Word:
        glob = False
        out: list[str] = []
        chars = iter(text)
        for ch in chars:
            if ch == "\\":
                out.append(next(chars, ""))
            else:
                glob = glob or ch in _GLOB
                out.append(ch)
        value = "".join(out)
        if value == "~" or value.startswith("~/"):
            if not self.home:
                return Word(None)
            value = self.home + value[1:]
        elif value.startswith("~"):
            return Word(None)  # ~user
        return Word(value, glob=glob)

    def _double_quoted(self, node: Any) -> Word:
        out: list[str] = []
        for child in node.named_children:
            if child.type == "string_content":
                out.append(_unescape_double(_text(child)))
            elif child.type in ("simple_expansion", "expansion"):
                value = self._variable(child)
                if value is None:
                    return Word(None)
                out.append(value)
            else:
                return Word(None)
        return Word("".join(out))

    def _variable(self, node: Any) -> str | None:
        names = [c for c in node.named_children]
        if len(names) != 1 or names[0].type != "variable_name":
            return None
        if node.type == "expansion" and _text(node) != "${" + _text(names[0]) + "}":
            return None
        return self.vars.get(_text(names[0]))

    # -- wrappers -------------------------------------------------------------------------------

    def expand(self, argv: list[Word], assignments: tuple[str, ...], *, depth: int, via: str | None,
               pipe_fed: bool, open_tail: bool = False, script_fed: bool = False) -> None:
        if not argv:
            return
        first = argv[0]
        if first.value is None or first.glob:
            self.out._unknown("a command name is not known before it runs")
            return
        name = os.path.basename(first.value)
        rest = argv[1:]
        if name in _NAME_BUILTINS and any(_subscript_code(w.value) for w in rest):
            self.out._unknown(f"{name} evaluates the subscript of a variable name it is given (a[$(…)])")
        if name == "let" and any(w.value is None or _ARITHMETIC_NAME.search(w.value) for w in rest):
            self.out._unknown(_ARITHMETIC_WHY)
        if name in SHELLS:
            self.shell(name, argv, assignments, depth=depth, via=via, pipe_fed=pipe_fed, open_tail=open_tail,
                       script_fed=script_fed)
            return
        if name == "eval":
            if any(w.value is None for w in rest):
                self.out._unknown("eval of something not known before it runs")
            elif rest:
                self.script(" ".join(w.value or "" for w in rest), depth=depth + 1, via="eval")
            return
        if name in ELEVATING:
            self.add(SimpleCommand(tuple(argv), assignments, open_tail, via))
            inner = _after_options(rest, _VALUE_OPTIONS.get(name, frozenset()))
            if inner is None:
                self.out._unknown(f"the command {name} runs is not known")
            elif inner:
                self.expand(inner, (), depth=depth, via=name, pipe_fed=False, open_tail=open_tail)
            return
        if name in TRANSPARENT:
            self.transparent(name, argv, assignments, depth=depth, via=via, open_tail=open_tail)
            return
        if name == "find":
            self.find(argv, assignments, depth=depth, via=via)
            return
        self.add(SimpleCommand(tuple(argv), assignments, open_tail, via))

    def shell(self, name: str, argv: list[Word], assignments: tuple[str, ...], *, depth: int, via: str | None,
              pipe_fed: bool, open_tail: bool, script_fed: bool) -> None:
        """A shell runs its ``-c`` script, a here-document's or here-string's (parsed elsewhere), or a file.

        Options are read as the shell reads them: all of them first (``-o``/``-O`` and ``--rcfile`` take a
        value), then ``-c``'s script is the first operand, wherever ``-c`` stood (``bash -c -e 'rm x'``,
        ``bash -o pipefail -c 'rm x'``); fish takes it as the option's own value (``--command='rm x'``).
        """
        rest = argv[1:]
        runs_c = False
        scripts: list[Word] = []
        operands: list[Word] = []
        index = 0
        while index < len(rest):
            word = rest[index]
            value = word.value
            index += 1
            if operands or value is None:
                operands.append(word)
                continue
            if value in ("--", "-", "+"):
                operands.extend(rest[index:])
                break
            if value.startswith("--"):
                option, eq, attached = value.partition("=")
                if option in _SHELL_SCRIPT_OPTIONS:
                    scripts.append(Word(attached) if eq else (rest[index] if index < len(rest) else Word(None)))
                    index += 0 if eq else 1
                elif option in _SHELL_VALUE_OPTIONS and not eq:
                    index += 1
                continue
            if value.startswith(("-", "+")):
                cluster = value[1:]
                if name == "fish" and ("c" in cluster or "C" in cluster):
                    scripts.append(rest[index] if index < len(rest) else Word(None))
                    index += 1
                    continue
                runs_c = runs_c or "c" in cluster
                index += sum(ch in "oO" for ch in cluster)  # -o/-O take the next word as their value
                continue
            operands.append(word)
        if runs_c:
            scripts.append(operands[0] if operands else Word(None))
        if scripts:
            for script in scripts:
                if script.value is None:
                    self.out._unknown(f"{name} -c runs a script not known before it runs")
                else:
                    self.script(script.value, depth=depth + 1, via=f"{name} -c")
            return
        if open_tail or any(w.value is None for w in rest):
            self.out._unknown(f"{name} gets arguments not known before it runs")
            return
        if not operands and script_fed:
            return  # the here-document or here-string is the script, and it was parsed as one
        if pipe_fed and not operands:
            self.out._unknown(f"{name} reads commands from a pipe")
            return
        self.add(SimpleCommand(tuple(argv), assignments, open_tail, via))

    def transparent(self, name: str, argv: list[Word], assignments: tuple[str, ...], *, depth: int,
                    via: str | None, open_tail: bool) -> None:
        rest = argv[1:]
        inner_assignments = list(assignments)
        inner: list[Word] | None
        if name == "env":
            index = 0
            while index < len(rest):
                value = rest[index].value
                if value is None:
                    self.out._unknown("env gets arguments not known before it runs")
                    return
                if value in ("-S", "--split-string") or value.startswith("--split-string="):
                    # The string is split into words, and the arguments after it follow them.
                    attached = "=" in value
                    split = value.partition("=")[2] if attached else (
                        rest[index + 1].value if index + 1 < len(rest) else None)
                    trailing = rest[index + (1 if attached else 2):]
                    if split is None or any(w.value is None for w in trailing):
                        self.out._unknown("env -S of something not known before it runs")
                    else:
                        script = " ".join([split, *(shlex.quote(w.value or "") for w in trailing)])
                        self.script(script, depth=depth + 1, via="env -S")
                    return
                if value == "--":
                    index += 1
                    break
                if value.startswith("-") and value != "-":
                    index += 2 if value in _VALUE_OPTIONS["env"] else 1
                    continue
                if "=" in value and not value.startswith("="):
                    inner_assignments.append(value.partition("=")[0])
                    index += 1
                    continue
                break
            inner = rest[index:]
        elif name == "command" and rest and rest[0].value in ("-v", "-V"):
            self.add(SimpleCommand(tuple(argv), assignments, open_tail, via))
            return
        elif name == "timeout":
            after = _after_options(rest, _VALUE_OPTIONS["timeout"])
            inner = after[1:] if after else after  # the duration comes first
        elif name == "nice":
            inner = _after_nice_options(rest)
        elif name == "busybox":
            inner = rest
        else:
            inner = _after_options(rest, _VALUE_OPTIONS.get(name, frozenset()))
        if inner is None:
            self.out._unknown(f"the command {name} runs is not known")
            return
        if not inner:
            if name == "xargs":
                inner = [Word("echo")]
            else:
                self.add(SimpleCommand(tuple(argv), assignments, open_tail, via))  # ``env`` alone, ``time`` alone
                return
        self.expand(inner, tuple(inner_assignments), depth=depth, via=name, pipe_fed=False,
                    open_tail=open_tail or name == "xargs")

    def find(self, argv: list[Word], assignments: tuple[str, ...], *, depth: int, via: str | None) -> None:
        self.add(SimpleCommand(tuple(argv), assignments, False, via))
        index = 1
        while index < len(argv):
            value = argv[index].value
            if value in ("-exec", "-execdir", "-ok", "-okdir"):
                end = index + 1
                while end < len(argv) and argv[end].value not in (";", "+"):
                    end += 1
                inner = [w for w in argv[index + 1:end] if w.value != "{}"]
                self.expand(inner, (), depth=depth, via=f"find {value}", pipe_fed=False, open_tail=True)
                index = end
            index += 1


def _text(node: Any) -> str:
    data = node.text if node is not None else b""
    return data.decode("utf-8", "surrogatepass") if isinstance(data, bytes) else str(data or "")


def _unescape_double(text: str) -> str:
    out: list[str] = []
    chars = iter(text)
    for ch in chars:
        if ch == "\\":
            nxt = next(chars, "")
            out.append(nxt if nxt in '"\\$`\n' else "\\" + nxt)
        else:
            out.append(ch)
    return "".join(out)


# -- values bash evaluates as code ------------------------------------------------------------------

_ARITHMETIC_WHY = "arithmetic on a value not written in the line (its array subscripts run commands)"
_ARITHMETIC_TESTS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
_ARITHMETIC_NODES = frozenset({"binary_expression", "unary_expression", "parenthesized_expression",
                               "ternary_expression", "postfix_expression"})
_ARITHMETIC_NAME = re.compile(r"[A-Za-z_$`]")
#: Builtins that take variable names, and evaluate an array subscript in one (``unset 'a[$(cmd)]'``).
_NAME_BUILTINS = frozenset({"unset", "test", "[", "printf", "read", "mapfile", "readarray", "declare", "typeset",
                            "local", "export", "readonly", "wait", "getopts"})


def _assigned_name(node: Any) -> str:
    name = node.child_by_field_name("name")
    if name is not None and name.type == "subscript":
        name = name.child_by_field_name("name")
    return _text(name) if name is not None else ""


def _subscript_code(value: str | None) -> bool:
    return value is not None and "[" in value and ("$" in value or "`" in value)


def _reads_values(node: Any) -> bool:
    """True when an arithmetic expression uses anything but numbers (a name, an expansion, a substitution)."""
    if node.type == "number":
        return False
    if node.type in _ARITHMETIC_NODES:
        return any(_reads_values(child) for child in node.named_children)
    return True


def _evaluates_values(node: Any) -> str | None:
    """Why ``node`` makes bash run code held in a value (``${x@P}``, arithmetic on a variable), or None.

    A variable's value can come from a file or from an earlier part of the line, so the parser
    sees data where bash sees commands: prompt expansion runs its substitutions, and arithmetic
    evaluates names recursively, running the substitutions in array subscripts (``a[$(cmd)]``).
    """
    kind = node.type
    parts: list[Any] = []
    if kind == "expansion":
        tokens = [_text(c) for c in node.children if not c.is_named]
        text = _text(node)
        if "@" in tokens and text.endswith("P}"):
            return "a prompt expansion (${x@P}) runs the commands in a variable's value"
        if tokens[:2] == ["${", "!"] and len(node.named_children) == 1 and node.named_children[0].type == \
                "variable_name":
            return "an indirect expansion (${!x}) evaluates the name a variable holds"
        if ":" in tokens:
            parts = node.named_children[1:]  # ${x:offset:length} are arithmetic
    elif kind == "arithmetic_expansion" or (kind == "compound_statement" and node.children
                                            and _text(node.children[0]) == "(("):
        parts = node.named_children
    elif kind == "c_style_for_statement":
        parts = [c for name in ("initializer", "condition", "update") for c in node.children_by_field_name(name)]
    elif kind == "subscript":
        parts = [c for c in node.children_by_field_name("index") if _text(c) not in ("@", "*")]
    elif kind == "binary_expression" and node.parent is not None and node.parent.type == "test_command":
        operator = node.child_by_field_name("operator")
        if operator is not None and _text(operator) in _ARITHMETIC_TESTS:
            parts = [c for c in node.named_children if c.id != operator.id]
    elif kind == "declaration_command":
        flags = "".join(_text(c)[1:] for c in node.named_children if c.type == "word" and _text(c).startswith("-"))
        for assignment in (c for c in node.named_children if c.type == "variable_assignment"):
            value = assignment.child_by_field_name("value")
            literal = _text(value) if value is not None else ""
            if ("i" in flags and value is not None and _reads_values(value)) or (
                    "n" in flags and _subscript_code(literal)):
                return _ARITHMETIC_WHY
    if any(_reads_values(part) for part in parts):
        return _ARITHMETIC_WHY
    return None


def _unescape_heredoc(text: str) -> str:
    """An unquoted here-document's body as its reader gets it: a backslash before ``$``, a backquote or a
    backslash is dropped, a backslash-newline joins the lines."""
    out: list[str] = []
    chars = iter(text)
    for ch in chars:
        if ch == "\\":
            nxt = next(chars, "")
            out.append(nxt if nxt in "$`\\" else "" if nxt == "\n" else "\\" + nxt)
        else:
            out.append(ch)
    return "".join(out)


def _base(value: str | None) -> str | None:
    return os.path.basename(value) if value else None


def _pipe_fed(node: Any) -> bool:
    """True when the command is not the first of a pipeline (its stdin is another command's output)."""
    parent = node.parent
    child = node
    while parent is not None and parent.type == "redirected_statement":
        child, parent = parent, parent.parent
    if parent is None or parent.type != "pipeline":
        return False
    return parent.named_children[0].id != child.id


def _after_nice_options(words: list[Word]) -> list[Word] | None:
    """``nice``'s arguments after ``-n N``, ``-N``, ``--adjustment[=N]`` (a negative number is a value)."""
    index = 0
    while index < len(words):
        value = words[index].value
        if value is None:
            return None
        if value in ("-n", "--adjustment"):
            index += 2
        elif value == "--":
            return words[index + 1:]
        elif value.startswith("--adjustment=") or (value.startswith("-") and value[1:].lstrip("n").lstrip("-")
                                                   .isdigit()):
            index += 1
        else:
            return words[index:]
    return []


def _after_options(words: list[Word], with_value: frozenset[str]) -> list[Word] | None:
    """``words`` after the leading options (``--`` ends them); None when an option is not known."""
    index = 0
    while index < len(words):
        value = words[index].value
        if value is None:
            return None
        if value == "--":
            return words[index + 1:]
        if not value.startswith("-") or value == "-":
            return words[index:]
        name = value.partition("=")[0]
        index += 2 if name in with_value and "=" not in value else 1
    return []


def iter_words(reduction: Reduction) -> Iterator[Word]:
    """Every argument of every command (not the command names): the words a path protection looks at."""
    for command in reduction.commands:
        yield from command.argv[1:]
