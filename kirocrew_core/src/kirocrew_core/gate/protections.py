"""The rules kirocrew brings: protections of its own files, and the defaults.

**Protections** (tier ``builtin``) keep a session away from what would let it act as the
owner or loosen its own rules. They are ``deny`` and ``ask`` only, and no owner or project
rule can weaken them: in a decision the strictest matching rule wins. They come from the
``protected_paths()`` hook (core's own below; kirocrew-connections adds its client secrets):

- ``builtin:protect-secrets``: reading a secret (the gateway token, the security event log's
  key, OAuth client secrets, kiro-cli's OAuth grants, the policy file) **asks** the owner —
  a ``read``/``glob``/``grep`` of it, a shell command naming it, or a search rooted above it
  (``grep -r x ~/.kiro``, the ``grep`` tool on ``~``);
- ``builtin:protect-kirocrew``: writing anything protected (the whole crew home: token, log,
  policy, every store; the rendered agent file; kiro-cli's OAuth grants) is **denied**; a shell
  command changing a directory above it (``rm -rf ~/.kiro``, ``mv ~/.kiro …``) **asks**.

If a plugin's ``protected_paths()`` fails, ``builtin:protections-unavailable`` asks for every
file access and shell command until it is fixed (fail closed).

**Defaults** (tier ``default``) apply only when no other rule matches a subject, first match
wins: the governance ceiling's servers ask (``default:ceiling``); kirocrew's own session
tools (``@kirocrew-core``, ``@kirocrew-cron``, which narrow every call to the session's own
authority) and the read-only built-ins are allowed everywhere; then the authority's default
from ``[defaults]`` in ``policy.toml`` — ``unrestricted`` allows (what it allowed before the
gate), ``read_only`` and ``workspace_write`` ask.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from kirocrew_core import home
from kirocrew_core.contributions import ProtectedPath
from kirocrew_core.gate.rules import Decision, Rule

if TYPE_CHECKING:
    from kirocrew_core.plugins import KirocrewPluginManager

FILE_READ_TOOLS = ("read", "glob", "grep")
READ_ONLY_TOOLS = ("read", "glob", "grep", "introspect", "todo_list")
KIROCREW_SESSION_SERVERS = ("kirocrew-core", "kirocrew-cron")

#: Each authority's decision when nothing else matches, unless ``[defaults]`` says otherwise.
AUTHORITY_DEFAULTS: dict[str, Decision] = {"unrestricted": "allow", "read_only": "ask", "workspace_write": "ask"}
#: An authority the policy does not know asks.
UNKNOWN_AUTHORITY_DEFAULT: Decision = "ask"


def policy_file() -> Path:
    """The owner's policy file, ``<crew home>/policy.toml``."""
    return home.crew_home() / "policy.toml"


def core_protected_paths() -> list[ProtectedPath]:
    """What core protects: the crew home (its secrets by name), the rendered agent, kiro-cli's OAuth grants."""
    return [
        ProtectedPath(home.gateway_token_file(), secret=True, label="the gateway owner token"),
        ProtectedPath(home.audit_key_file(), secret=True, label="the security event log's key"),
        ProtectedPath(policy_file(), secret=True, label="the permission policy"),
        ProtectedPath(home.state_dir("policy"), secret=True, label="the last good permission policy"),
        ProtectedPath(home.oauth_cache_dir(), secret=True, label="kiro-cli's OAuth grants"),
        ProtectedPath(home.crew_home(), label="kirocrew's data home"),
        ProtectedPath(home.rendered_agent_file(), label="the rendered kirocrew agent"),
    ]


def _problem(value: Any) -> str | None:
    if value is None or (isinstance(value, (list, tuple)) and all(isinstance(p, ProtectedPath) for p in value)):
        return None
    return "did not return a list of ProtectedPath"


def all_protected_paths(pm: KirocrewPluginManager | None = None) -> tuple[list[ProtectedPath], list[str]]:
    """Every plugin's ``protected_paths()``, and the problems met (a failing plugin): what the gate's built-in
    rules are made of, and the fence ``file_send`` keeps sessions' deliveries out of."""
    from kirocrew_core.plugins import call_hook, get_plugin_manager

    call = call_hook(pm if pm is not None else get_plugin_manager(), "protected_paths", on_error="skip",
                     check=_problem)
    protected = [path for contribution in call.contributions for path in contribution.value or ()]
    problems = [f"plugin {f.plugin!r}: protected_paths() failed ({f.error}); every file access and shell "
                "command asks until it is fixed" for f in call.failures]
    return protected, problems


def protection_rules(pm: KirocrewPluginManager | None = None) -> tuple[list[Rule], list[str]]:
    """The built-in rules from every plugin's ``protected_paths()``, and the problems met (a failing plugin)."""
    protected, problems = all_protected_paths(pm)
    secrets = tuple(dict.fromkeys(str(p.path) for p in protected if p.secret))
    writes = tuple(dict.fromkeys(str(p.path) for p in protected))
    rules = [
        Rule("builtin:protect-secrets", "ask", FILE_READ_TOOLS[0], paths=secrets,
             reason="kirocrew's secrets (its token, the audit key, client secrets, OAuth grants, the policy) are "
                    "read only with the owner's say-so",
             tier="builtin", source="built-in", also_tools=FILE_READ_TOOLS[1:]),
        Rule("builtin:protect-kirocrew", "deny", "write", paths=writes,
             reason="a session never writes kirocrew's own files (its token, stores, policy, the rendered agent) "
                    "or kiro-cli's OAuth grants",
             tier="builtin", source="built-in"),
    ]
    if problems:
        rules.append(Rule("builtin:protections-unavailable", "ask", "shell",
                          reason="a plugin's protected paths could not be read, so file access is not checked",
                          tier="builtin", source="built-in", also_tools=(*FILE_READ_TOOLS, "write")))
    return rules, problems


def default_rules(defaults: dict[str, Decision]) -> list[Rule]:
    """The fallbacks after the ceiling (which :class:`~kirocrew_core.gate.engine.Policy` adds), in order."""
    rules = [
        Rule("default:kirocrew-tools", "allow", "@" + KIROCREW_SESSION_SERVERS[0],
             reason="kirocrew's session tools act only within the calling session's own authority",
             tier="default", source="built-in", also_tools=tuple("@" + s for s in KIROCREW_SESSION_SERVERS[1:])),
        Rule("default:read-only-tools", "allow", READ_ONLY_TOOLS[0],
             reason="reading and searching is allowed unless a rule says otherwise",
             tier="default", source="built-in", also_tools=READ_ONLY_TOOLS[1:]),
    ]
    for authority, decision in sorted(defaults.items()):
        rules.append(Rule(f"default:{authority}", decision, "*", authority=authority,
                          reason=f"the {authority} authority's default when no rule matches",
                          tier="default", source="built-in"))
    return rules
