"""The permission policy's decisions: known bypasses, deny > ask > allow, scopes, tools, paths, domains,
unknown inputs, kirocrew's own protections, and which tools may keep a blanket auto-approve."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import home
from kirocrew_core.gate import shell
from kirocrew_core.gate.calls import Context, ToolCall
from kirocrew_core.gate.engine import Policy, Verdict
from kirocrew_core.gate.rules import Rule, build_rule
from kirocrew_testing.plugins import register_plugin


def rule(decision: str, tool: str, **fields: Any) -> dict[str, Any]:
    return {"decision": decision, "tool": tool, **fields}


class Gate:
    """A policy under test and the session it decides for: ``workspace_write`` (default ask) in ``workspace``."""

    def __init__(self, pm: Any, user_home: Path, workspace: Path) -> None:
        self.pm, self.home, self.workspace = pm, user_home, workspace

    def policy(self, *tables: dict[str, Any], defaults: dict[str, str] | None = None) -> Policy:
        rules = [build_rule(t, tier="owner", source="policy.toml") for t in tables]
        return Policy.build(rules, defaults, pm=self.pm)  # type: ignore[arg-type]

    def ctx(self, authority: str = "workspace_write", agent: str | None = "kirocrew",
            workspace: Path | str | None = None) -> Context:
        return Context(authority, agent, str(workspace or self.workspace), str(self.home))

    def decide(self, policy: Policy, tool: str, call_input: Any = None, *, server: str | None = None,
               project: tuple[Rule, ...] = (), **where: Any) -> Verdict:
        return policy.decide(ToolCall(tool, server, call_input), self.ctx(**where), project)

    def shell(self, policy: Policy, line: str, **where: Any) -> str:
        return self.decide(policy, "shell", {"command": line}, **where).decision


@pytest.fixture
def gate(plugin_manager: Any, isolated_homes: Any, tmp_path: Path) -> Gate:
    workspace = tmp_path / "project"
    (workspace / "src").mkdir(parents=True)
    return Gate(plugin_manager, isolated_homes.user_home, workspace)


@pytest.fixture
def secrets(isolated_homes: Any) -> dict[str, Path]:
    """kirocrew's own files as a session would find them: the token, the audit key, the policy, an OAuth grant."""
    files = {"token": home.gateway_token_file(), "audit_key": home.audit_key_file(),
             "policy": home.crew_home() / "policy.toml", "grant": home.oauth_cache_dir() / "grant.json",
             "config": home.config_file(), "agent": home.rendered_agent_file()}
    for path in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    return files


# -- the known bypasses (the permission reference, §5) ----------------------------------------------------

BYPASS_RULES = (rule("allow", "shell", command=["git status", "echo"]), rule("deny", "shell", command="rm"))


@pytest.mark.parametrize(("line", "expected"), [
    ("git status", "allow"),
    ("echo safe", "allow"),
    ("rm -rf x", "deny"),
    ("git status; rm -rf x", "deny"),
    ("git status && rm -rf x", "deny"),
    ("git status || rm -rf x", "deny"),
    ("git status | rm -rf x", "deny"),
    ("git status\nrm -rf x", "deny"),
    ("bash -c \"rm -rf x\"", "deny"),
    ("sh -c 'git status; rm -rf x'", "deny"),
    ("bash -o pipefail -c 'rm -rf x'", "deny"),
    ("echo $(rm -rf x)", "deny"),
    ("echo `rm -rf x`", "deny"),
    ("env A=1 rm -rf x", "deny"),
    ("A=1 rm -rf x", "deny"),
    ("/bin/rm -rf x", "deny"),
    ("\\rm -rf x", "deny"),
    ("r\"\"m -rf x", "deny"),
    ("sudo rm -rf x", "deny"),
    ("echo x | xargs rm", "deny"),
    ("find . -exec rm {} \\;", "deny"),
    ("timeout 5 rm -rf x", "deny"),
    ("nohup rm -rf x", "deny"),
    ("eval \"rm -rf x\"", "deny"),
    ("bash <<'EOF'\nrm -rf x\nEOF", "deny"),
    ("bash <<< 'rm -rf x'", "deny"),
    ("git status > ~/.bashrc", "ask"),  # the redirection is a write, and writes ask by default
    ("echo safe & whoami", "ask"),  # whoami has no rule
    ("echo rm -rf x | bash", "ask"),  # a shell reading commands from a pipe
    ("$CMD x", "ask"),
    ("eval \"$X\"", "ask"),
    ("LD_PRELOAD=/tmp/x.so git status", "ask"),
    ("env LD_PRELOAD=/tmp/x.so git status", "ask"),
    ("PATH=/tmp/evil:$PATH; git status", "ask"),
    ("export GIT_DIR=/tmp/other && git status", "ask"),
    ("x='$(rm -rf y)'; echo ${x@P}", "ask"),
    ("x='a[$(rm -rf y)]'; echo $((x))", "ask"),
    ("git status; ;", "ask"),  # does not parse
    ("echo " + "a" * shell.MAX_CHARS, "ask"),  # longer than the parser is given
])
def test_a_line_is_allowed_only_when_every_command_it_runs_is(gate, line, expected):
    assert gate.shell(gate.policy(*BYPASS_RULES), line) == expected


def test_a_denied_command_in_a_chain_names_the_deny_rule_and_the_command(gate):
    verdict = gate.decide(gate.policy(*BYPASS_RULES), "shell", {"command": "git status && rm -rf build"})
    assert verdict.decision == "deny" and verdict.rule.commands == ("rm",) and verdict.subject == "rm -rf build"
    assert [(p.label, p.decision) for p in verdict.parts] == [("git status", "allow"), ("rm -rf build", "deny")]
    assert "refused `rm -rf build`" in verdict.reason


def test_what_cannot_be_reduced_asks_even_under_a_blanket_allow(gate):
    policy = gate.policy(rule("allow", "shell"), rule("allow", "*"))
    assert gate.shell(policy, "ls -la") == "allow"
    for line in ("$CMD x", "echo x | sh", "git status; ;", "echo " + "a" * shell.MAX_CHARS):
        verdict = gate.decide(policy, "shell", {"command": line})
        assert verdict.decision == "ask", line
    assert gate.decide(policy, "shell", {}).decision == "ask"  # a call that carries no command


@pytest.mark.parametrize(("line", "expected"), [
    ("git log --oneline", "allow"),
    ("git --upload-pa=evil fetch", "ask"),  # an abbreviated long option is the option
    ("git --upload-pack=evil fetch", "ask"),
    ("git -c core.pager=evil log", "ask"),
    ("git -ccore.pager=evil log", "ask"),
    ("git --exec-path=/tmp/evil status", "ask"),
    ("rg TODO src", "allow"),
    ("rg --pre cat TODO", "ask"),
    ("rg --pre=cat TODO", "ask"),
    ("find . -name '*.py'", "allow"),
    ("find . -exec cat {} +", "ask"),
    ("find . -execdir cat {} \\;", "ask"),
    ("sed -n 1p notes.txt", "allow"),
    ("sed 's/a/b/e' notes.txt", "ask"),
    ("sed -e '1e id' notes.txt", "ask"),
    ("sed 's/a/b/w out' notes.txt", "ask"),  # the s command's w flag writes a file
    ("sed '1,5w out' notes.txt", "ask"),
    ("sed '$r /etc/shadow' notes.txt", "ask"),  # r reads a file the line never names as an argument
    ("sed '/x/R other' notes.txt", "ask"),
    ("sed 's/are/were/g; s/x/e/' notes.txt", "allow"),
    ("tar --to-command=sh -xf a.tar", "ask"),
    ("rsync -e 'sh -c id' a b", "ask"),
    ("awk '{print $1}' notes.txt", "allow"),
    ("awk 'BEGIN{system(\"id\")}'", "ask"),
    ("ls | xargs git log", "ask"),  # xargs adds arguments nobody has seen
])
def test_an_allow_by_prefix_does_not_cover_options_that_run_other_programs(gate, line, expected):
    policy = gate.policy(rule("allow", "shell", command=["git", "rg", "find", "sed", "tar", "rsync", "awk", "ls"]))
    verdict = gate.decide(policy, "shell", {"command": line})
    assert verdict.decision == expected, verdict.reason
    if expected == "ask":
        assert "needs the owner's decision" in verdict.reason


def test_a_program_of_the_same_name_elsewhere_is_not_allowed_by_its_bare_name(gate):
    policy = gate.policy(rule("allow", "shell", command="ls"), rule("deny", "shell", command="shred"))
    assert gate.shell(policy, "ls") == "allow"
    assert gate.shell(policy, "/tmp/evil/ls") == "ask"  # an allow covers the bare name only
    assert gate.shell(policy, "./ls") == "ask"
    assert gate.shell(policy, "/usr/bin/shred x") == "deny"  # a deny covers the name wherever it lives


def test_command_prefixes_match_word_by_word_with_globs(gate):
    policy = gate.policy(rule("allow", "shell", command=["npm run test:*", "git diff"]))
    assert gate.shell(policy, "npm run test:unit --watch=false") == "allow"
    assert gate.shell(policy, "npm run build") == "ask"
    assert gate.shell(policy, "git diff HEAD~1") == "allow"
    assert gate.shell(policy, "git difftool") == "ask"  # words, not characters
    assert gate.shell(policy, "git") == "ask"


# -- deny > ask > allow ------------------------------------------------------------------------------------

ORDERED = (rule("allow", "shell"), rule("ask", "shell", command="git"), rule("deny", "shell", command="git push"))


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_the_strictest_matching_rule_wins_whatever_the_order(gate, order):
    policy = gate.policy(*(ORDERED[i] for i in order))
    assert gate.shell(policy, "git push --force") == "deny"
    assert gate.shell(policy, "git status") == "ask"
    assert gate.shell(policy, "ls") == "allow"


def test_among_rules_of_one_decision_the_first_in_the_file_is_named(gate):
    policy = gate.policy(rule("deny", "shell", command="rm", id="first"), rule("deny", "*", id="second"))
    assert gate.decide(policy, "shell", {"command": "rm x"}).rule.id == "first"


def test_a_specific_allow_does_not_carve_an_exception_out_of_a_broad_deny(gate):
    policy = gate.policy(rule("deny", "shell"), rule("allow", "shell", command="git status"))
    assert gate.shell(policy, "git status") == "deny"


# -- scopes -------------------------------------------------------------------------------------------------

def test_a_rule_scoped_to_an_authority_applies_only_there(gate):
    policy = gate.policy(rule("deny", "shell", command="curl", authority="read_only"))
    assert gate.shell(policy, "curl example.com", authority="read_only") == "deny"
    assert gate.shell(policy, "curl example.com", authority="unrestricted") == "allow"  # its default


def test_a_rule_scoped_to_an_agent_glob_applies_only_to_those_agents(gate):
    policy = gate.policy(rule("deny", "web_fetch", agent="review*"))
    fetch = {"url": "https://example.com/"}
    assert gate.decide(policy, "web_fetch", fetch, authority="unrestricted", agent="reviewer").decision == "deny"
    assert gate.decide(policy, "web_fetch", fetch, authority="unrestricted", agent="kirocrew").decision == "allow"
    assert gate.decide(policy, "web_fetch", fetch, authority="unrestricted", agent=None).decision == "allow"


def test_a_rule_scoped_to_a_workspace_covers_it_and_below_it_and_its_symlinks(gate, tmp_path):
    policy = gate.policy(rule("deny", "shell", workspace=str(gate.workspace)))
    (gate.workspace / "sub").mkdir()
    sibling = tmp_path / (gate.workspace.name + "-2")
    sibling.mkdir()
    link = tmp_path / "link"
    link.symlink_to(gate.workspace)
    assert gate.shell(policy, "ls") == "deny"
    assert gate.shell(policy, "ls", workspace=gate.workspace / "sub") == "deny"
    assert gate.shell(policy, "ls", workspace=link) == "deny"
    assert gate.shell(policy, "ls", workspace=sibling) == "ask"  # a name that only starts the same is not below it
    assert gate.shell(policy, "ls", workspace=tmp_path) == "ask"


def test_an_authority_the_policy_does_not_know_asks(gate):
    assert gate.shell(gate.policy(), "ls", authority="sandboxed") == "ask"


def test_defaults_per_authority_apply_when_no_rule_matches(gate):
    policy = gate.policy(defaults={"read_only": "deny", "unrestricted": "ask"})
    assert gate.shell(policy, "ls", authority="read_only") == "deny"
    assert gate.shell(policy, "ls", authority="unrestricted") == "ask"
    assert gate.shell(policy, "ls", authority="workspace_write") == "ask"  # untouched: the built-in default
    assert gate.decide(policy, "introspect", {}, authority="read_only").decision == "allow"  # read-only tools


# -- tool patterns --------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("pattern", "tool", "server", "expected"), [
    ("@github", "list_issues", "github", "deny"),
    ("@github", "list_issues", "gitlab", "ask"),
    ("@GitHub", "list_issues", "github", "deny"),  # server names are not case-sensitive
    ("@github/list_issues", "list_issues", "github", "deny"),
    ("@github/list_issues", "create_issue", "github", "ask"),
    ("@github/list_*", "list_pulls", "github", "deny"),
    ("@git*", "x", "gitea", "deny"),
    ("@builtin", "web_fetch", None, "deny"),
    ("@builtin", "list_issues", "github", "ask"),
    ("*", "list_issues", "github", "deny"),
    ("*", "web_fetch", None, "deny"),
    ("web_fetch", "web_fetch", None, "deny"),
    ("web_fetch", "web_fetch", "fetcher", "ask"),  # a built-in name never names an MCP tool
    ("fs_write", "write", None, "deny"),  # 1.x names in a rule
    ("write", "fs_write", None, "deny"),  # 1.x names in a call
    ("shell", "execute_bash", None, "deny"),
])
def test_a_tool_pattern_names_built_ins_servers_tools_and_globs(gate, pattern, tool, server, expected):
    policy = gate.policy(rule("deny", pattern))
    call_input = {"url": "https://example.com/", "path": "src/x", "command": "ls"}
    assert gate.decide(policy, tool, call_input, server=server).decision == expected


# -- paths and domains ------------------------------------------------------------------------------------------

def test_file_tools_are_decided_by_path_globs_relative_to_the_workspace(gate):
    policy = gate.policy(rule("allow", "write", path=["src/**", "~/notes/*.md"]),
                         rule("deny", "write", path="src/generated"))
    assert gate.decide(policy, "write", {"path": "src/app.py"}).decision == "allow"
    assert gate.decide(policy, "write", {"path": str(gate.workspace / "src" / "app.py")}).decision == "allow"
    assert gate.decide(policy, "write", {"path": "src/generated/x.py"}).decision == "deny"
    assert gate.decide(policy, "write", {"path": "~/notes/todo.md"}).decision == "allow"
    assert gate.decide(policy, "write", {"path": "README.md"}).decision == "ask"
    assert gate.decide(policy, "write", {"path": "src/../../elsewhere"}).decision == "ask"
    # Every path of a call must be allowed: one outside makes the call ask.
    both = {"operations": [{"path": "src/a.py"}, {"path": "README.md"}]}
    assert gate.decide(policy, "write", both).decision == "ask"


def test_a_symlink_cannot_borrow_an_allow_or_dodge_a_deny(gate, isolated_homes):
    bashrc = isolated_homes.user_home / ".bashrc"
    bashrc.write_text("")
    (gate.workspace / "src" / "rc").symlink_to(bashrc)
    allow_src = gate.policy(rule("allow", "write", path="src/**"))
    assert gate.decide(allow_src, "write", {"path": "src/rc"}).decision == "ask"
    deny_rc = gate.policy(rule("deny", "write", path="~/.bashrc"), rule("allow", "write", path="src/**"))
    assert gate.decide(deny_rc, "write", {"path": "src/rc"}).decision == "deny"


def test_fetches_are_decided_by_domain(gate):
    policy = gate.policy(rule("allow", "web_fetch", domain=["docs.python.org", "*.github.io"]),
                         rule("deny", "web_fetch", domain="evil.example"))

    def fetch(url: str) -> str:
        return gate.decide(policy, "web_fetch", {"url": url}).decision

    assert fetch("https://docs.python.org/3/") == "allow"
    assert fetch("https://DOCS.python.org./3/") == "allow"
    assert fetch("https://someone.github.io/") == "allow"
    assert fetch("https://github.io/") == "ask"
    assert fetch("https://evil.example/x") == "deny"
    assert fetch("https://docs.python.org@evil.example/") == "deny"  # the host is after the @
    assert fetch("not a url") == "ask"  # unknown: the deny may apply, so it asks


# -- inputs not known before the call runs ------------------------------------------------------------------------

def test_an_unknown_input_turns_a_matching_deny_into_ask_and_never_satisfies_an_allow(gate):
    deny = gate.policy(rule("deny", "web_fetch", domain="evil.example"), defaults={"workspace_write": "allow"})
    verdict = gate.decide(deny, "web_fetch", {})
    assert verdict.decision == "ask" and "may apply" in verdict.reason
    allow = gate.policy(rule("allow", "web_fetch", domain="*"))
    assert gate.decide(allow, "web_fetch", {"url": "https://x.org/"}).decision == "allow"
    assert gate.decide(allow, "web_fetch", {"url": "nonsense"}).decision == "ask"
    write = gate.policy(rule("allow", "write", path="**"))
    assert gate.decide(write, "write", {}).decision == "ask"


def test_a_command_with_an_unknown_word_where_a_deny_looks_asks(gate):
    policy = gate.policy(rule("deny", "shell", command="git push"), defaults={"workspace_write": "allow"})
    assert gate.shell(policy, "git $(echo push)") == "ask"
    assert gate.shell(policy, "git status $X") == "allow"  # the deny's words are known not to match
    assert gate.shell(policy, "ls | xargs git") == "ask"  # the arguments xargs adds may say push


# -- kirocrew's own protections ---------------------------------------------------------------------------------------

BLANKET = (rule("allow", "*"), rule("allow", "read", path="~/**"), rule("allow", "write", path="~/**"),
           rule("allow", "shell"))


@pytest.mark.parametrize("rules", [(), BLANKET], ids=["no owner rule", "an owner allowing everything"])
def test_reading_a_secret_asks_and_writing_kirocrews_files_is_denied(gate, secrets, rules):
    policy = gate.policy(*rules)
    for name in ("token", "audit_key", "policy", "grant"):
        verdict = gate.decide(policy, "read", {"path": str(secrets[name])}, authority="unrestricted")
        assert (verdict.decision, verdict.rule.id) == ("ask", "builtin:protect-secrets"), name
    for name in ("token", "config", "agent", "grant"):
        verdict = gate.decide(policy, "write", {"path": str(secrets[name])}, authority="unrestricted")
        assert (verdict.decision, verdict.rule.id) == ("deny", "builtin:protect-kirocrew"), name
    assert gate.decide(policy, "read", {"path": str(secrets["config"])}, authority="unrestricted").decision == "allow"


@pytest.mark.parametrize("rules", [(), BLANKET], ids=["no owner rule", "an owner allowing everything"])
def test_a_shell_line_naming_a_secret_asks_and_one_changing_it_is_denied(gate, secrets, rules):
    policy = gate.policy(*rules)
    token = secrets["token"]

    def decided(line: str) -> str:
        return gate.shell(policy, line, authority="unrestricted")

    assert decided(f"cat {token}") == "ask"
    assert decided("cat ~/.kiro/crew/gateway.token") == "ask"
    assert decided("cat ~/.kiro/crew/gate*") == "ask"  # a glob is expanded as the shell would
    assert decided(f"cat < {token}") == "ask"
    assert decided(f"echo $(< {token})") == "ask"
    assert decided(f"rm {token}") == "deny"
    assert decided(f"echo x > {secrets['policy']}") == "deny"
    assert decided(f"cp /etc/hostname {home.crew_home()}/") == "deny"
    assert decided("ls ~") == "allow"


def test_a_search_rooted_above_a_secret_asks(gate, secrets, isolated_homes):
    policy = gate.policy(*BLANKET)
    for root in ("~/.kiro", "~", str(isolated_homes.root)):
        verdict = gate.decide(policy, "grep", {"pattern": "token", "path": root}, authority="unrestricted")
        assert verdict.decision == "ask", root
        assert gate.decide(policy, "glob", {"pattern": "**", "path": root}, authority="unrestricted").decision == "ask"
    assert gate.decide(policy, "grep", {"pattern": "x", "path": "src"}, authority="unrestricted").decision == "allow"
    assert gate.decide(policy, "grep", {"pattern": "x"}, authority="unrestricted").decision == "allow"


def test_a_symlink_to_a_secret_is_the_secret(gate, secrets):
    (gate.workspace / "t").symlink_to(secrets["token"])
    policy = gate.policy(*BLANKET)
    assert gate.decide(policy, "read", {"path": "t"}, authority="unrestricted").decision == "ask"
    assert gate.shell(policy, "cat t", authority="unrestricted") == "ask"
    assert gate.decide(policy, "write", {"path": "t"}, authority="unrestricted").decision == "deny"


def test_a_project_allow_cannot_weaken_a_protection_either(gate, secrets):
    project = (build_rule(rule("allow", "*"), tier="project", source="project"),)
    verdict = gate.decide(gate.policy(), "write", {"path": str(secrets["token"])}, project=project)
    assert verdict.decision == "deny"


def test_project_deny_and_ask_rules_apply_beside_the_owners(gate):
    project = (build_rule(rule("deny", "shell", command="docker"), tier="project", source="project"),
               build_rule(rule("ask", "web_fetch"), tier="project", source="project"))
    policy = gate.policy(rule("allow", "shell"), rule("allow", "web_fetch"))
    assert gate.decide(policy, "shell", {"command": "docker ps"}, project=project).decision == "deny"
    assert gate.decide(policy, "web_fetch", {"url": "https://a.org/"}, project=project).decision == "ask"
    assert gate.decide(policy, "shell", {"command": "ls"}, project=project).decision == "allow"


def _broken(*args: Any) -> list[Any]:
    raise RuntimeError("vault offline")


@pytest.mark.parametrize("implementation", [_broken, lambda: "not a list"], ids=["raises", "returns nonsense"])
def test_a_failing_protected_paths_plugin_makes_every_file_access_and_shell_command_ask(gate, implementation):
    register_plugin(gate.pm, "vault", protected_paths=implementation)
    policy = gate.policy(*BLANKET)
    assert any("vault" in problem for problem in policy.problems)
    assert gate.decide(policy, "read", {"path": "src/app.py"}, authority="unrestricted").decision == "ask"
    assert gate.decide(policy, "write", {"path": "src/app.py"}, authority="unrestricted").decision == "ask"
    assert gate.decide(policy, "grep", {"pattern": "x"}, authority="unrestricted").decision == "ask"
    assert gate.shell(policy, "ls", authority="unrestricted") == "ask"
    assert gate.decide(policy, "introspect", {}, authority="unrestricted").decision == "allow"
    assert not policy.may_auto_approve("@github") and not policy.may_auto_approve("introspect")


# -- blanket auto-approve ------------------------------------------------------------------------------------------

def test_the_shell_is_never_auto_approved(gate):
    policy = gate.policy(rule("allow", "shell"), rule("allow", "*"))
    assert not policy.may_auto_approve("shell") and not policy.may_auto_approve("execute_bash")


def test_file_reads_are_never_auto_approved_because_the_protections_must_see_them(gate):
    policy = gate.policy(rule("allow", "read"), rule("allow", "glob"), rule("allow", "grep"))
    for ref in ("read", "fs_read", "glob", "grep", "write", "fs_write"):
        assert not policy.may_auto_approve(ref), ref


def test_introspection_todo_lists_and_kirocrews_own_tools_are_auto_approved(gate):
    policy = gate.policy()
    for ref in ("introspect", "todo_list", "@kirocrew-core", "@kirocrew-core/crew_list", "@kirocrew-cron"):
        assert policy.may_auto_approve(ref), ref


def test_an_mcp_tool_is_auto_approved_only_with_an_owner_allow_without_input_or_scope(gate):
    assert not gate.policy().may_auto_approve("@github")  # read_only's default asks
    assert gate.policy(rule("allow", "@github")).may_auto_approve("@github")
    assert gate.policy(rule("allow", "@github")).may_auto_approve("@github/list_issues")
    assert gate.policy(rule("allow", "@github/list_*")).may_auto_approve("@github/list_issues")
    assert not gate.policy(rule("allow", "@github/list_*")).may_auto_approve("@github")
    assert not gate.policy(rule("allow", "@github", path="/srv/**")).may_auto_approve("@github")
    assert not gate.policy(rule("allow", "@github", workspace="/srv/a")).may_auto_approve("@github")
    scoped = gate.policy(rule("allow", "@github", authority="read_only"), rule("allow", "@github",
                                                                               authority="workspace_write"))
    assert scoped.may_auto_approve("@github")  # allowed under every authority, one rule each
    assert gate.policy(rule("allow", "@github", authority="read_only")).may_auto_approve("@github", ("read_only",))


def test_a_deny_or_ask_rule_that_could_match_keeps_a_tool_out_of_the_blanket_grant(gate):
    policy = gate.policy(rule("allow", "@github"), rule("ask", "@github/delete_*", agent="reviewer"))
    assert not policy.may_auto_approve("@github")
    assert not policy.may_auto_approve("@github/delete_repo")
    assert policy.may_auto_approve("@github/list_issues")
    assert policy.trusted_tools(["@github/list_issues", "@github/delete_repo", "shell"], "read_only") == (
        "@github/list_issues",)


def test_a_server_the_governance_ceiling_names_is_never_auto_approved(gate):
    register_plugin(gate.pm, "ceiling", governance_ceiling=lambda: ["@notion/delete_page"])
    policy = gate.policy(rule("allow", "@notion"), rule("allow", "@linear"))
    assert not policy.may_auto_approve("@notion") and not policy.may_auto_approve("@notion/search")
    assert policy.may_auto_approve("@linear")
    # Its calls ask by default, wherever they run.
    assert gate.decide(gate.policy(), "search", {}, server="notion", authority="unrestricted").decision == "ask"


# -- the verdict ------------------------------------------------------------------------------------------------------

def test_a_verdict_carries_a_fingerprint_of_the_input_and_never_the_input(gate):
    secret_line = "curl -H 'Authorization: Bearer s3cr3t' https://example.com"
    verdict = gate.decide(gate.policy(rule("allow", "shell", command="curl")), "shell", {"command": secret_line})
    again = gate.decide(gate.policy(), "shell", {"command": secret_line})
    assert verdict.fingerprint == again.fingerprint and len(verdict.fingerprint) == 16
    assert "s3cr3t" not in str(verdict.as_dict()["fingerprint"]) and verdict.tool == "shell"
    assert verdict.as_dict()["rule"]["tier"] == "owner"


@pytest.mark.parametrize(("line", "expected"), [
    ("grep -r token ~/.kiro", "ask"),  # reads every file below, the token among them
    ("grep -rn token ~", "ask"),
    ("rg token ~/.kiro", "ask"),
    ("find ~/.kiro -type f -exec cat {} +", "ask"),
    ("rm -rf ~/.kiro", "ask"),  # changes what is below it: the protections may apply, the owner decides
    ("mv ~/.kiro /tmp/elsewhere", "ask"),
    ("chmod -R 777 ~/.kiro", "ask"),
    ("chmod -R 777 ~/.kiro/crew", "deny"),  # the crew home itself is protected
    ("cp -r /tmp/evil/. ~/.kiro/", "ask"),
    ("grep -r token src", "allow"),
    ("grep token ~/.bashrc", "allow"),
    ("ls ~/.kiro", "allow"),  # names, not contents
    ("rm -rf src", "allow"),
])
def test_a_shell_command_reaching_into_a_directory_above_a_protected_path_asks(gate, secrets, line, expected):
    (gate.workspace / "src" / "x").write_text("")
    (Path(home.user_home()) / ".bashrc").write_text("")
    assert gate.shell(gate.policy(*BLANKET), line, authority="unrestricted") == expected


def test_a_search_through_a_symlink_to_a_protected_directory_asks(gate, secrets):
    (gate.workspace / "k").symlink_to(home.crew_home())
    policy = gate.policy(*BLANKET)
    assert gate.decide(policy, "grep", {"pattern": "x", "path": "k"}, authority="unrestricted").decision == "ask"
    assert gate.shell(policy, "grep -r x k", authority="unrestricted") == "ask"



@pytest.mark.parametrize(("line", "expected"), [
    ("cd ~/.kiro/crew && cat gateway.token", "ask"),
    ("cd ~/.kiro && cd crew; cat gateway.token", "ask"),
    ("cd ~/.kiro/crew && echo x > gateway.token", "deny"),
    ("cd ~/.kiro/crew && rm gateway.token", "deny"),
    ("pushd ~/.kiro/crew; cat gateway.token", "ask"),
    ("cd; cat .kiro/crew/gateway.token", "ask"),  # cd alone goes home
    ("cd src && cat x", "allow"),
])
def test_relative_paths_after_a_cd_are_also_read_from_where_it_went(gate, secrets, line, expected):
    (gate.workspace / "src" / "x").write_text("")
    assert gate.shell(gate.policy(*BLANKET), line, authority="unrestricted") == expected


@pytest.mark.parametrize(("pattern", "tool"), [
    ("fs_*", "write"), ("fs_*", "read"), ("fs_*", "fs_write"), ("execute_*", "shell"), ("execute_ba?h", "shell"),
])
def test_a_glob_over_kiro_1x_names_matches_the_tools_they_name(gate, pattern, tool):
    # kiro's own agent files use fs_* globs: a rule written the same way must not silently match nothing.
    policy = gate.policy(rule("deny", pattern))
    assert gate.decide(policy, tool, {"path": "src/x", "command": "ls"}, authority="unrestricted").decision == "deny"
    assert gate.decide(policy, "introspect", {}, authority="unrestricted").decision == "allow"


def test_a_project_default_applies_only_where_it_is_stricter_than_the_owners(gate):
    policy = gate.policy(defaults={"read_only": "allow", "workspace_write": "deny"})
    project = {"read_only": "ask", "workspace_write": "ask", "unrestricted": "ask"}

    def decided(authority: str) -> str:
        call = ToolCall("shell", None, {"command": "ls"})
        return policy.decide(call, gate.ctx(authority=authority), (), project).decision

    assert decided("read_only") == "ask"  # stricter than the owner's allow
    assert decided("workspace_write") == "deny"  # the owner's deny is stricter: it stays
    assert decided("unrestricted") == "ask"
    assert gate.shell(policy, "ls", authority="read_only") == "allow"  # without the project


@pytest.mark.parametrize(("line", "expected"), [
    ("git push origin main", "deny"),
    ("git -C . push origin main", "ask"),  # global options before the subcommand: the deny may apply
    ("git --no-pager push", "ask"),
    ("git -c push.default=current push", "ask"),
    ("git log --grep push", "allow"),  # push is an argument of log here, not the subcommand
    ("git commit -m push", "allow"),
    ("git status", "allow"),
])
def test_options_before_a_denied_subcommand_do_not_dodge_the_deny(gate, line, expected):
    policy = gate.policy(rule("deny", "shell", command="git push"))
    assert gate.shell(policy, line, authority="unrestricted") == expected


# -- the rule index changes no decision ------------------------------------------------------------------------------

def _many_rules(workspace: Path) -> list[dict[str, Any]]:
    """A mix like a long-lived policy's: shell allows and denies, globs, paths, domains, MCP tools, scopes."""
    tables: list[dict[str, Any]] = [
        rule("allow", "shell", command=["git status", "git diff", "npm run test:*", "ls", "grep", "make build"]),
        rule("deny", "shell", command=["rm", "git push", "curl"]), rule("ask", "shell", command="docker"),
        rule("allow", "shell", command="g*t log"), rule("deny", "execute_*", command="shred"),
        rule("allow", "fs_*", path="src/**"), rule("deny", "write", path=["*.pem", "~/.ssh/**"]),
        rule("ask", "read", path="/etc/**"), rule("allow", "web_fetch", domain=["docs.python.org", "*.github.io"]),
        rule("deny", "web_fetch", domain="evil.example"), rule("allow", "web_*", domain="*"),
        rule("allow", "@github"), rule("deny", "@github/delete_*"), rule("ask", "@git*/merge"),
        rule("allow", "@builtin", agent="review*"), rule("deny", "*", authority="read_only"),
        rule("deny", "shell", workspace=str(workspace / "locked")), rule("allow", "@files", path="/srv/**"),
    ]
    for i in range(150):
        tables.append(rule(("allow", "ask", "deny")[i % 3], "shell", command=f"tool{i} sub{i % 7}"))
        tables.append(rule("allow", ("write", "read")[i % 2], path=f"src/mod{i}/**"))
        tables.append(rule(("allow", "deny")[i % 2], f"@srv{i % 20}/op{i}"))
    return tables


CORPUS_LINES = [line for line, _ in [
    ("git status", ""), ("git status -s && rm -rf x", ""), ("git -C . push", ""), ("npm run test:unit", ""),
    ("npm run build", ""), ("git log --oneline", ""), ("gist log", ""), ("/usr/bin/shred x", ""),
    ("tool3 sub3 && tool4 sub4; tool5 x", ""), ("ls src | grep x > out.txt", ""), ("cat ~/.ssh/id_rsa", ""),
    ("docker ps", ""), ("$CMD", ""), ("echo $(curl evil.example)", ""), ("bash -c 'rm -rf /'", ""),
    ("LD_PRELOAD=x ls", ""), ("ls | xargs rm", ""), ("grep -r x src", ""), ("cd src && cat a.py", ""),
]]


def _corpus(workspace: Path) -> list[tuple[str, str | None, dict[str, Any]]]:
    calls: list[tuple[str, str | None, dict[str, Any]]] = [("shell", None, {"command": c}) for c in CORPUS_LINES]
    for path in ("src/a.py", "src/mod3/x.py", "src/mod4/x.py", "key.pem", "~/.ssh/config", "/etc/hosts",
                 "README.md", "/srv/data/x"):
        calls += [("write", None, {"path": path}), ("fs_read", None, {"path": path}), ("glob", None, {"path": path})]
    for url in ("https://docs.python.org/3/", "https://a.github.io/", "https://evil.example/", "https://x.org/",
                "nonsense"):
        calls.append(("web_fetch", None, {"url": url}))
    for server, tool in (("github", "list"), ("github", "delete_repo"), ("gitlab", "merge"), ("srv3", "op3"),
                         ("srv3", "op4"), ("files", "read"), ("other", "x")):
        calls.append((tool, server, {"path": "/srv/data/x"}))
    calls += [("introspect", None, {}), ("todo_list", None, {})]
    return calls


def test_the_rule_index_changes_no_decision(gate, secrets, monkeypatch):
    from kirocrew_core.gate import engine

    (gate.workspace / "src" / "a.py").write_text("")
    (gate.workspace / "locked").mkdir()
    policy = gate.policy(*_many_rules(gate.workspace))
    where = [{"authority": a, "agent": g, "workspace": w} for a in ("unrestricted", "read_only", "workspace_write")
             for g in ("kirocrew", "reviewer") for w in (gate.workspace, gate.workspace / "locked")]

    def verdicts() -> list[tuple[str, str, tuple[Any, ...]]]:
        out = []
        for tool, server, call_input in _corpus(gate.workspace):
            for context in where:
                verdict = gate.decide(policy, tool, call_input, server=server, **context)
                out.append((verdict.decision, verdict.rule.id, verdict.parts))
        return out

    indexed = verdicts()
    monkeypatch.setattr(engine._RuleIndex, "candidates", lambda index, subject, scope: list(index.rules))
    assert indexed == verdicts()
    assert {decision for decision, _, _ in indexed} == {"allow", "ask", "deny"}


def test_a_copy_of_a_policy_with_other_defaults_shares_its_index_and_decides_by_its_defaults(gate):
    from dataclasses import replace

    from kirocrew_core.gate import engine

    policy = gate.policy(rule("allow", "shell", command="ls"))
    stricter = replace(policy, defaults={**policy.defaults, "unrestricted": "deny"})
    assert gate.shell(policy, "whoami", authority="unrestricted") == "allow"
    assert gate.shell(stricter, "whoami", authority="unrestricted") == "deny"
    assert gate.shell(stricter, "ls", authority="unrestricted") == "allow"
    assert engine._index_of(stricter.builtin_rules, stricter.owner_rules) is engine._index_of(
        policy.builtin_rules, policy.owner_rules)
