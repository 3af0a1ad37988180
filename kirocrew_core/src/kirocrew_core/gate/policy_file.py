"""Where the rules live: the owner's ``policy.toml``, its last good copy, and project files.

The owner's file is ``<crew home>/policy.toml``; ``kirocrew policy add|remove``, the Policy
page and an owner's "allow always" edit it through :func:`add_rule` and :func:`remove_rule`
(tomlkit: the owner's comments and layout survive; the write is atomic, 0600, under the
``policy`` lock). It looks like this::

    # The decision when no rule matches, per authority (these are the defaults).
    [defaults]
    unrestricted = "allow"
    read_only = "ask"
    workspace_write = "ask"

    [[rule]]
    id = "r-3f9a1c2e"
    decision = "deny"
    tool = "shell"
    command = "rm"
    reason = "sessions never delete; ask me"

A file that is absent means the defaults. A file that cannot be used — not TOML, an unknown
key, a rule that does not check, two rules with one id, unreadable — is **reported** (the
CLI, the Policy page, ``kirocrew doctor``) and the **last good policy stays in force**: every
time the file is read whole and sound, a copy is kept in ``<crew home>/state/policy/``. With
no good copy either, no owner rule applies and every authority's default is ``ask``: a broken
file never means "allow all".

A **project** may add rules in ``<workspace>/.kiro/crew/policy.toml`` (same format), but only
``deny`` and ``ask`` rules and stricter ``[defaults]``: a project may not loosen the owner's
rules. Its ``allow`` rules and looser defaults are ignored and reported. (The rendered agent's
blanket grants are computed from the owner's policy only, so a project rule reaches the calls
that come to the gate, which is every call a built-in or owner rule could refuse.)
"""

from __future__ import annotations

import contextlib
import os
import threading
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kirocrew_core import home
from kirocrew_core.errors import BadInputError, KirocrewError
from kirocrew_core.gate.engine import Policy
from kirocrew_core.gate.protections import AUTHORITY_DEFAULTS, policy_file
from kirocrew_core.gate.rules import DECISIONS, SEVERITY, Decision, PolicyError, Rule, build_rule, new_rule_id

LOCK = "policy"
MAX_POLICY_BYTES = 4 * 1024 * 1024
MAX_RULES = 5000
LAST_GOOD_NAME = "last-good.toml"
PROJECT_FILE = Path(".kiro") / "crew" / "policy.toml"
TOP_LEVEL = ("defaults", "rule")

State = Literal["absent", "ok", "malformed", "unreadable"]


@dataclass
class PolicyFile:
    """One read of a policy file: its state, what it says when usable, and its problems."""

    path: Path
    state: State
    rules: list[Rule] = field(default_factory=list)
    defaults: dict[str, Decision] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    text: str | None = None

    @property
    def usable(self) -> bool:
        return self.state in ("absent", "ok")


def last_good_file() -> Path:
    return home.state_dir("policy") / LAST_GOOD_NAME


def known_authorities() -> tuple[str, ...]:
    """The authority names a rule may name: the built-in three (plugins' backends are checked where they run)."""
    return tuple(AUTHORITY_DEFAULTS)


def read_policy_file(path: Path | None = None, *, tier: Literal["owner", "project"] = "owner") -> PolicyFile:
    """Read and check one policy file (see the module docstring); never raises for the file's content."""
    target = path if path is not None else policy_file()
    try:
        with open(target, "rb") as fh:
            raw = fh.read(MAX_POLICY_BYTES + 1)
    except FileNotFoundError:
        return PolicyFile(target, "absent")
    except OSError as exc:
        return PolicyFile(target, "unreadable", problems=[f"{target}: cannot read it ({exc.strerror or exc})"])
    if len(raw) > MAX_POLICY_BYTES:
        return PolicyFile(target, "malformed", problems=[f"{target}: larger than {MAX_POLICY_BYTES} bytes"])
    try:
        text = raw.decode("utf-8")
        document = tomllib.loads(text)
    except UnicodeDecodeError as exc:
        return PolicyFile(target, "malformed", problems=[f"{target}: not UTF-8 ({exc.reason})"])
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        return PolicyFile(target, "malformed", problems=[f"{target}: not valid TOML: {exc}"])
    try:
        rules, defaults, notes = _check_document(document, target, tier)
    except PolicyError as exc:
        return PolicyFile(target, "malformed", problems=[f"{target}: {exc.message}"], text=text)
    return PolicyFile(target, "ok", rules, defaults, notes, text)


def _check_document(document: dict[str, Any], path: Path,
                    tier: Literal["owner", "project"]) -> tuple[list[Rule], dict[str, Decision], list[str]]:
    unknown = sorted(k for k in document if k not in TOP_LEVEL)
    if unknown:
        raise PolicyError(f"unknown top-level key(s) {', '.join(unknown)}; a policy has [defaults] and [[rule]]")
    notes: list[str] = []
    defaults: dict[str, Decision] = {}
    raw_defaults = document.get("defaults", {})
    if not isinstance(raw_defaults, dict):
        raise PolicyError("[defaults] must be a table of authority = \"allow\" | \"ask\" | \"deny\"")
    for authority, decision in raw_defaults.items():
        if authority not in known_authorities():
            raise PolicyError(f"[defaults] names an unknown authority {authority!r}; known: "
                              f"{', '.join(known_authorities())}")
        if decision not in DECISIONS:
            raise PolicyError(f"[defaults] {authority} must be allow, ask or deny, got {decision!r}")
        defaults[authority] = decision
    raw_rules = document.get("rule", [])
    if not isinstance(raw_rules, list):
        raise PolicyError("rules are [[rule]] tables")
    if len(raw_rules) > MAX_RULES:
        raise PolicyError(f"more than {MAX_RULES} rules")
    rules: list[Rule] = []
    seen: set[str] = set()
    for index, table in enumerate(raw_rules, start=1):
        try:
            rule = build_rule(table, tier=tier, source=str(path), known_authorities=known_authorities())
        except PolicyError as exc:
            raise PolicyError(f"rule {index}: {exc.message}", field=exc.field) from None
        if rule.id in seen:
            raise PolicyError(f"rule {index}: the id {rule.id!r} is used twice")
        seen.add(rule.id)
        if tier == "project" and rule.decision == "allow":
            notes.append(f"{path}: rule {rule.id} ignored: a project may add deny and ask rules, not allow rules")
            continue
        rules.append(rule)
    return rules, defaults, notes


# -- the policy in force ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Key:
    policy: tuple[int, int, int] | None
    config: tuple[int, int, int] | None
    crew_home: str
    pm: int


_cache_lock = threading.Lock()
_cache: tuple[_Key, Policy] | None = None


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def policy_signature() -> str:
    """What the blanket grants depend on, as a short string: ``policy.toml`` and ``config.toml`` (the ceiling)
    as they are on disk now. A render records it; a kiro-cli started under another one is out of date."""
    return f"{_signature(policy_file())}|{_signature(home.config_file())}"


def current_policy(pm: Any = None) -> Policy:
    """The policy in force for this process, re-read when ``policy.toml`` or ``config.toml`` changed."""
    global _cache
    from kirocrew_core.plugins import get_plugin_manager

    manager = pm if pm is not None else get_plugin_manager()
    key = _Key(_signature(policy_file()), _signature(home.config_file()), str(home.crew_home()), id(manager))
    with _cache_lock:
        if _cache is not None and _cache[0] == key:
            return _cache[1]
    policy = load_policy(manager)
    with _cache_lock:
        _cache = (key, policy)
    return policy


def load_policy(pm: Any = None) -> Policy:
    """Read the owner's file now: the policy, or the last good one (or ask-everything) when it cannot be used."""
    read = read_policy_file()
    if read.usable:
        if read.state == "ok":
            _keep_last_good(read)
        else:
            _forget_last_good()
        return Policy.build(read.rules, read.defaults, problems=read.problems, pm=pm, source=str(read.path))
    good = read_policy_file(last_good_file())
    if good.state == "ok":
        note = "the last good policy stays in force until the file is fixed"
        rules = [_relabel(rule, read.path) for rule in good.rules]
        return Policy.build(rules, good.defaults, problems=[*read.problems, note], pm=pm, source=str(good.path))
    note = ("there is no earlier good policy, so no owner rule applies and every authority's default is ask "
            "until the file is fixed")
    return Policy.build([], dict.fromkeys(AUTHORITY_DEFAULTS, "ask"), problems=[*read.problems, note], pm=pm,
                        source=str(read.path))


def _relabel(rule: Rule, path: Path) -> Rule:
    from dataclasses import replace

    return replace(rule, source=f"{path} (last good copy)")


def _keep_last_good(read: PolicyFile) -> None:
    from kirocrew_core.jsonfile import write_bytes_atomic

    target = last_good_file()
    data = (read.text or "").encode("utf-8")
    try:
        if target.exists() and target.read_bytes() == data:
            return
        write_bytes_atomic(target, data, secret=True)
    except OSError:
        pass  # the copy is a fallback; failing to refresh it changes nothing about this decision


def _forget_last_good() -> None:
    """The owner removed the file: the defaults apply, and a later broken file must not revive old rules."""
    target = last_good_file()
    with contextlib.suppress(OSError):
        if target.exists():
            target.unlink()


def project_rules(workspace: str) -> tuple[list[Rule], dict[str, Decision], list[str]]:
    """A workspace's own deny/ask rules and stricter defaults (see the module docstring), with its problems."""
    if not workspace:
        return [], {}, []
    read = read_policy_file(Path(workspace) / PROJECT_FILE, tier="project")
    if read.state == "absent":
        return [], {}, []
    if not read.usable:
        return [], {}, [*read.problems, "the project's rules are not applied until the file is fixed"]
    defaults: dict[str, Decision] = {}
    problems = list(read.problems)
    for authority, decision in read.defaults.items():
        # Kept unless looser than the built-in default: the owner may have loosened that, and the engine
        # applies a project default only where it is stricter than the owner's (Policy.default_rules).
        if SEVERITY[decision] >= SEVERITY[AUTHORITY_DEFAULTS.get(authority, "ask")]:
            defaults[authority] = decision
        else:
            problems.append(f"{read.path}: [defaults] {authority} = {decision!r} ignored: a project may only be "
                            "stricter than the owner")
    return read.rules, defaults, problems


# -- editing the owner's file -----------------------------------------------------------------


def add_rule(fields: dict[str, Any]) -> Rule:
    """Check ``fields`` as a rule, give it a fresh id, append it to ``policy.toml``; the rule.

    Raises :class:`~kirocrew_core.gate.rules.PolicyError` for a rule that does not check and
    ``policy_file_malformed`` when the file cannot be used (it is never overwritten then).
    """
    import tomlkit
    from tomlkit.items import AoT

    from kirocrew_core.locks import named_lock

    fields = {k: v for k, v in fields.items() if v not in (None, (), [])}
    fields.pop("id", None)
    rule = build_rule(fields, tier="owner", source=str(policy_file()), known_authorities=known_authorities(),
                      rule_id=new_rule_id())
    with named_lock(LOCK):
        document = _editable()
        existing = document.get("rule")
        if existing is not None and not isinstance(existing, AoT):  # ``rule = [...]``: one more inline table
            table = tomlkit.inline_table()
            table.update(rule.as_table())
            existing.append(table)
            _write(document)
        else:
            # Appended as text after what is there, so the owner's layout and comments stay exactly as they were.
            text = document.as_string().rstrip("\n")
            text = (text + "\n\n" if text else "") + tomlkit.dumps({"rule": [rule.as_table()]})
            _write(tomlkit.parse(text))
    _audit("policy_rule_added", rule=rule.id, decision=rule.decision, tool=rule.tool)
    return rule


def remove_rule(rule_id: str) -> Rule:
    """Remove the owner rule ``rule_id`` from ``policy.toml``; the rule removed (``policy_rule_not_found``)."""
    from kirocrew_core.locks import named_lock

    with named_lock(LOCK):
        read = read_policy_file()
        if not read.usable:
            raise _unusable(read, "nothing was changed")
        found = next((r for r in read.rules if r.id == rule_id), None)
        if found is None:
            raise BadInputError(f"no rule {rule_id!r} in {read.path} (kirocrew policy list shows the ids)",
                                code="policy_rule_not_found")
        document = _editable()
        tables = document.get("rule", [])
        index = [r.id for r in read.rules].index(rule_id)
        # Comments after the rule's last line introduce what follows it: they stay, before the next rule.
        trailing = _trailing_comments(tables[index])
        del tables[index]
        if index < len(tables):
            tables[index].trivia.indent = trailing + tables[index].trivia.indent
            trailing = ""
        if not tables:
            del document["rule"]
        text = document.as_string()
        _write_text(text.rstrip("\n") + "\n" + trailing.lstrip("\n") if trailing.strip() else text)
    _audit("policy_rule_removed", rule=found.id, decision=found.decision, tool=found.tool)
    return found


def _editable() -> Any:
    """The owner's file as a tomlkit document (a new one with a header when absent); malformed: refused."""
    import tomlkit

    read = read_policy_file()
    if not read.usable:
        raise _unusable(read, "nothing was changed (fix or remove the file first)")
    if read.state == "absent":
        document = tomlkit.document()
        document.add(tomlkit.comment("kirocrew permission policy: `kirocrew policy add|remove` and the Policy page "
                                     "edit this file; comments are kept."))
        document.add(tomlkit.comment("Decisions: allow, ask, deny; the strictest matching rule wins."))
        return document
    return tomlkit.parse(read.text or "")


def _unusable(read: PolicyFile, outcome: str) -> KirocrewError:
    """``policy_file_malformed``: bad content exits 2 like any malformed file, an unreadable one 1."""
    return KirocrewError("; ".join([*read.problems, outcome]), code="policy_file_malformed",
                         exit_code=2 if read.state == "malformed" else 1)


def _trailing_comments(table: Any) -> str:
    """The comment and blank lines that end ``table``'s body (tomlkit keeps them in the table above a header)."""
    from tomlkit.items import Comment, Whitespace

    tail: list[str] = []
    for key, item in reversed(table.value.body):
        if key is not None or not isinstance(item, (Comment, Whitespace)):
            break
        tail.append(item.as_string())
    return "".join(reversed(tail))


def _write(document: Any) -> None:
    _write_text(document.as_string())


def _write_text(text: str) -> None:
    """Write the owner's file, and keep it as the last good copy: an edit is a file read whole and sound, so a
    typo made before any decision reads it must not lose the rules the edit left."""
    from kirocrew_core.jsonfile import write_bytes_atomic

    home.ensure_crew_home()
    write_bytes_atomic(policy_file(), text.encode("utf-8"), secret=True)
    written = read_policy_file()
    if written.state == "ok":
        _keep_last_good(written)


def _audit(event: str, **fields: Any) -> None:
    from kirocrew_core import audit

    try:
        audit.record(event, actor="owner", outcome="ok", **fields)
    except Exception:  # the change is made; a SEL that cannot be written must not undo it
        import logging

        logging.getLogger(__name__).warning("could not record %s in the security event log", event, exc_info=True)
