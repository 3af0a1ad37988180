"""Command vetting: what a ``command`` job may not contain, checked when it is stored and again when it fires.

A command runs unattended, later, under ``sh -c``. Vetting is a **tripwire, not a boundary**: it
refuses commands whose *text* plainly hides what runs, names a credential, or sends data away,
so a steered session's obvious attempt fails loudly and the person sees why. It cannot stop a
determined one: the text is not what runs once a script runs (``printf '\143\141\164 …' > x.sh;
sh x.sh``, a file the command did not write, a program's own behaviour), and globs and the
environment decide at run time what a word names. What confines a command is its authority (a
session's job runs with its conversation's, sandboxed when that is restricted) and what keeps
secrets out of results is the redactor (:mod:`kirocrew_core.redaction`), not this module.

The checks read the text, not a parse of it: a construct is refused wherever it appears,
even quoted, because a quoted string handed to a nested shell (``sh -c '…'``) runs too. That
refuses a few harmless commands; the refusal names the construct so the person can rephrase.

A refusal is ``cron_error("command_refused", …)``; its message names the construct found (``$(``,
``.ssh``, ``GITHUB_TOKEN``, ``curl --data``), never more of the command, and never a value.
"""

from __future__ import annotations

import re
import unicodedata

from kirocrew_core.redaction import is_secret_name

from kirocrew_cron.errors import cron_error
from kirocrew_cron.model import COMMAND_MAX

#: More ``NAME=value`` assignments than this: the command is mostly environment, hiding what runs.
ASSIGNMENTS_MAX = 64
#: Variables a command may use without assigning them: the home (paths like ``$HOME/bin``) and the
#: working directory (the job's workspace). Any other comes from an environment the job does not control.
ALLOWED_VARIABLES = frozenset({"HOME", "PWD"})
#: Secret variables named in the reference, refused by name even without ``$``; any other name
#: kirocrew treats as a secret's (``kirocrew_core.redaction``: *TOKEN*, *SECRET*, *PASSWORD*, …) too.
SECRET_VARIABLES = ("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN", "GITHUB_TOKEN", "GH_TOKEN",
                    "GITLAB_TOKEN")
#: Credential files and directories beyond the sandbox's read-only list (ssh keys by name, database and
#: package-registry passwords, kiro-cli's login data, kirocrew's own owner token and audit key).
EXTRA_CREDENTIAL_PATHS = (
    ".pgpass", ".my.cnf", ".npmrc", ".pypirc", ".gem/credentials", ".cargo/credentials", ".s3cfg", ".boto",
    ".terraform.d/credentials.tfrc.json", ".vault-token", ".config/gcloud", ".config/hub", ".azure", ".password-store",
    ".local/share/kiro-cli", "Application Support/kiro-cli", ".kiro/crew", "gateway.token", "sel.key",
    "/etc/shadow",
)
_KEY_FILES = ("id_rsa", "id_dsa", "id_ecdsa", "id_ed25519")


def credential_paths() -> tuple[str, ...]:
    """Path fragments a command may not name: the sandbox's credential roots, :data:`EXTRA_CREDENTIAL_PATHS`,
    and the crew home wherever ``KIROCREW_HOME`` puts it (the sandbox hides it from restricted runs).
    """
    from kirocrew_conversations.public import CREDENTIALS
    from kirocrew_core.home import crew_home

    return (*CREDENTIALS, *EXTRA_CREDENTIAL_PATHS, str(crew_home()))


def _refused(why: str) -> Exception:
    return cron_error("command_refused", f"command refused: {why}")


# Shell constructs that make the text differ from what runs.
_SYNTAX = (
    (re.compile(r"\$\("), "command substitution $( )"),
    (re.compile(r"`"), "command substitution (backticks)"),
    (re.compile(r"\$'"), "ANSI-C quoting $'…'"),
    (re.compile(r'\$"'), 'locale quoting $"…"'),
    (re.compile(r"[<>]\("), "process substitution <( ) or >( )"),
    (re.compile(r"\$\{(?![A-Za-z_][A-Za-z0-9_]*\})"), "a parameter expansion other than plain ${NAME}"),
    (re.compile(r"\$[0-9@*#]"), "positional parameters ($1, $@, $*, $#)"),
    # {a,b} and {1..9} (bash expands them; dash does not): refused so a name cannot be spelled in parts.
    (re.compile(r"(?<!\$)\{[^\s{}'\":]*(?:,|\.\.)[^\s{}'\":]*\}"), "brace expansion {a,b} or {1..9}"),
)
# A loop or case statement: at the start of a command (after ; & | ( {, do, then, or opening the script
# of a nested shell: ``sh -c '…'``, ``eval "…"``).
_KEYWORD = re.compile(
    r"(?:^|[;&|({]|-c\s+['\"]|\beval\s+['\"]?|\bdo\b|\bthen\b)\s*(for|while|until|case)(?=\s|$)")
# The start of a command: after a separator, a keyword or the script of ``sh -c '…'``; then, skipped, any
# ``NAME=value`` and wrappers that run their arguments as a command (``env``, ``sudo``, ``timeout 5`` …).
_COMMAND_START = (r"(?:^|[;&|({]|\b(?:then|do|else)\s|-c\s+['\"]?)"
                  r"\s*(?:(?:[A-Za-z_][A-Za-z0-9_]*=\S*|env|exec|sudo|command|builtin|nohup|nice|time|xargs"
                  r"|timeout(?:\s+[0-9.]+[smhd]?)?|-\S+)\s+)*")
_COMMAND_WORD = re.compile(_COMMAND_START + r"([^\s;&|()<>]+)")
# A variable may begin a command only as a path under the home or the working directory ($HOME/bin/x).
_PATH_COMMAND = re.compile(r"^['\"]?\$(?:HOME|\{HOME\}|PWD|\{PWD\})(?:/[^$]*)?$")
_ASSIGNMENT = re.compile(r"(?:^|[\s;&|(])([A-Za-z_][A-Za-z0-9_]*)\+?=")
_VARIABLE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
_UPPER_WORD = re.compile(r"(?<![A-Za-z0-9_])([A-Z][A-Z0-9_]{2,})(?![A-Za-z0-9_])")
_ENV_DUMP = (
    (re.compile(r"(?<![\w./-])printenv(?![\w.-])"), "printenv (prints every secret in the environment)"),
    (re.compile(r"(?:^|[;&|(])\s*env\s*(?:$|[;&|)])"), "a bare env (prints every secret in the environment)"),
    (re.compile(r"(?:^|[;&|(])\s*(?:export|declare|typeset)\s+-p"), "export -p (prints the environment)"),
    (re.compile(r"/proc/[^/\s]+/environ"), "/proc/…/environ"),
)
# A wildcard in a hidden name (~/.s*/, .a?s): it names a credential directory without spelling it. Not
# after a quote: a quoted wildcard does not expand (jq's '.items[]').
_HIDDEN_GLOB = re.compile(r"(?:^|[/~\s=])\.[^/\s'\"]*[*?\[]")
# Sending data: the tools and the flags that upload.
_NET_TOOL = re.compile(r"(?<![\w.-])(nc|ncat|netcat|socat|telnet)(?![\w.-])")
_CURL = re.compile(r"(?<![\w.-])curl(?![\w.-])")
_CURL_UPLOAD = re.compile(
    r"(?:^|\s)(--data[\w-]*|--form[\w-]*|--upload-file|--json|--config|-[A-Za-z]*[dFTK]"
    r"|(?:-H|--header)\s*['\"]?@)(?=[\s=@'\"]|$|[^\s])")
_WGET = re.compile(r"(?<![\w.-])wget(?![\w.-])")
_WGET_UPLOAD = re.compile(r"--(post-data|post-file|body-data|body-file)\b")
_DEV_NET = re.compile(r"/dev/(tcp|udp)/")
_INLINE_CODE = re.compile(
    r"(?<![\w.-])(python[0-9.]*|perl|ruby|node|nodejs|php|deno|bun)(?![\w.-])[^|;&]*?\s(-c|-e|-r|--eval|-E)(?=\s)")
_NETWORK_WORDS = re.compile(r"urllib|requests|http\.client|httpx|aiohttp|socket|urlopen|fetch\(|net/http|"
                            r"LWP|IO::Socket|Net::|open-uri|Net::HTTP|XMLHttpRequest", re.IGNORECASE)
_PIPE_TO_SHELL = re.compile(r"\|\s*(?:sudo\s+)?(?:sh|bash|dash|zsh|ksh|fish)(?![\w.-])")
# Code fed to an interpreter on its standard input (no script named): ``… | python3``, ``python3 - <<<'…'``.
_PIPE_TO_INTERPRETER = re.compile(
    r"\|\s*(?:sudo\s+)?(python[0-9.]*|perl|ruby|node|nodejs|php)(?:\s+-)?\s*(?:$|[;&|)])"
    r"|(?<![\w.-])(python[0-9.]*|perl|ruby|node|nodejs|php)(?:\s+-)?\s*<<<")
_DECODE = re.compile(r"(?<![\w.-])(?:base64|base32|basenc)(?![\w.-])[^|;&]*\s(?:-d|-D|--decode)(?![\w-])"
                     r"|(?<![\w.-])xxd(?![\w.-])[^|;&]*\s-r")


def _control(command: str) -> str | None:
    for ch in command:
        if ch == "\t":
            continue
        category = unicodedata.category(ch)
        if category in ("Cc", "Cf", "Zl", "Zp", "Co", "Cs"):
            return f"a control or invisible character (U+{ord(ch):04X})"
    return None


def _credential_path(command: str) -> str | None:
    paths = credential_paths()
    crew = paths[-1]
    for fragment in paths:
        if re.search(rf"(?:^|[\s/~'\"=:@]){re.escape(fragment)}(?:$|[\s/'\";:&|).])", command):
            return "the crew home" if fragment == crew else fragment  # never an absolute path in a message
    for name in _KEY_FILES:
        if re.search(rf"(?<![\w.-]){name}", command):
            return name
    return None


def _secret_variable(command: str) -> str | None:
    for name in SECRET_VARIABLES:  # also in lower case: the keys of ~/.aws/credentials
        if re.search(rf"(?<![A-Za-z0-9_]){name}(?![A-Za-z0-9_])", command, re.IGNORECASE):
            return name
    for match in _UPPER_WORD.finditer(command):
        if is_secret_name(match[1]):
            return match[1]
    for match in _VARIABLE.finditer(command):
        if is_secret_name(match[1]):
            return match[1]
    return None


def _exfiltration(command: str) -> str | None:
    if match := _NET_TOOL.search(command):
        return f"{match[1]} (a raw network connection)"
    if _DEV_NET.search(command):
        return "/dev/tcp or /dev/udp (a raw network connection)"
    if _CURL.search(command) and (match := _CURL_UPLOAD.search(command)):
        return f"curl {match[1]} (sends data)"
    if _WGET.search(command) and (match := _WGET_UPLOAD.search(command)):
        return f"wget --{match[1]} (sends data)"
    if (match := _INLINE_CODE.search(command)) and _NETWORK_WORDS.search(command):
        return f"inline {match[1]} code using the network"
    if _PIPE_TO_SHELL.search(command):
        return "piping into a shell"
    if match := _PIPE_TO_INTERPRETER.search(command):
        return f"code fed to {match[1] or match[2]} on its standard input"
    if _DECODE.search(command):
        return "base64 -d or xxd -r (decoding hidden text)"
    return None


def _command_word(command: str) -> str | None:
    """What is wrong with a command's name: ``eval``, or a variable in it (the name is decided at run time)."""
    for match in _COMMAND_WORD.finditer(command):
        word = match[1]
        if word.strip("'\"") == "eval":
            return "eval (runs text put together at run time)"
        if "$" in word and not _PATH_COMMAND.match(word.rstrip("'\"")):
            return "a variable as (part of) a command's name (the command is decided at run time)"
    return None


def _dequoted(command: str) -> str:
    """``command`` with quotes and backslashes removed, as the shell joins ``cu''rl`` and ``.a\\ws`` back."""
    return command.replace("'", "").replace('"', "").replace("\\", "")


def command_problem(command: object) -> str | None:
    """Why ``command`` may not be stored or run (the construct found), or None when it passes."""
    if not isinstance(command, str):
        return "it must be a string"
    if not command.strip():
        return "it is empty"
    if len(command) > COMMAND_MAX:
        return f"it is longer than {COMMAND_MAX} characters"
    if why := _control(command):
        return f"it contains {why}"
    for pattern, construct in _SYNTAX:
        if pattern.search(command):
            return f"it uses {construct}"
    if match := _KEYWORD.search(command):
        return f"it uses a shell loop or case ({match[1]})"
    if why := _command_word(command):
        return f"it uses {why}"
    assigned = [match[1] for match in _ASSIGNMENT.finditer(command)]
    if len(assigned) > ASSIGNMENTS_MAX:
        return f"it makes more than {ASSIGNMENTS_MAX} variable assignments"
    if _HIDDEN_GLOB.search(command):
        return "it uses a wildcard in a hidden path (~/.s*): name the file"
    # Names, paths and tools are looked for as written and as the shell joins them (cu''rl, .a"w"s).
    for text in dict.fromkeys((command, _dequoted(command))):
        if fragment := _credential_path(text):
            return f"it names a credential path ({fragment})"
        if name := _secret_variable(text):
            return f"it names a secret variable ({name})"
        for pattern, construct in _ENV_DUMP:
            if pattern.search(text):
                return f"it uses {construct}"
        if why := _exfiltration(text):
            return f"it uses {why}"
    known = ALLOWED_VARIABLES | set(assigned)
    for match in _VARIABLE.finditer(command):
        if match[1] not in known:
            return (f"it uses the variable ${match[1]} (only $HOME, $PWD and variables the command assigns itself "
                    "may be used)")
    return None


def vet_command(command: str) -> None:
    """Refuse ``command`` with ``cron_error("command_refused", …)`` naming what was found; None when it passes."""
    why = command_problem(command)
    if why is not None:
        raise _refused(why)
