"""The macOS Seatbelt backend: the profile text, what it decides, and (on macOS) sandbox-exec itself.

Off macOS the profile is checked two ways: against golden files, and by evaluating it the way
Seatbelt does (the last matching rule decides) for the operations a run would attempt. On macOS
the same operations run for real under ``sandbox-exec``.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from kirocrew_core.acp_runtime import AcpOptions
from kirocrew_core.errors import KirocrewError

from kirocrew_conversations.sandbox.policy import SandboxPolicy, build_policy, prepare
from kirocrew_conversations.sandbox.seatbelt import (
    SANDBOX_EXEC,
    SeatbeltBackend,
    authority_backends,
    render_profile,
    run_tmpdir,
    sandboxed_options,
    sbpl_string,
    seatbelt_argv,
)
from kirocrew_conversations.vocabulary import READ_ONLY, WORKSPACE_WRITE

GOLDEN = Path(__file__).parent / "golden"
FAKE_HOME = "/Users/u"
WORKSPACE = "/Users/u/project"
RUN_TMP = "/private/var/folders/xy/run/T/kirocrew"
on_macos = pytest.mark.skipif(sys.platform != "darwin", reason="needs macOS: sandbox-exec")


@pytest.fixture
def fake_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fixed macOS-looking home, so the profile text is the same on every run (rendering writes nothing)."""
    monkeypatch.setenv("HOME", FAKE_HOME)
    monkeypatch.delenv("KIRO_HOME", raising=False)
    monkeypatch.delenv("KIROCREW_HOME", raising=False)


def darwin_policy(mode: str, workspace: str = WORKSPACE) -> SandboxPolicy:
    return build_policy(mode, workspace, platform="darwin")


# -- a reader for the profile, and Seatbelt's decision rule -------------------------------------

_TOKEN = re.compile(r'\s+|;[^\n]*|(?P<open>\()|(?P<close>\))|#"(?P<regex>(?:[^"\\]|\\.)*)"'
                    r'|"(?P<string>(?:[^"\\]|\\.)*)"|(?P<atom>[^\s()";]+)')


def parse(profile: str) -> list[Any]:
    """The profile's top-level forms; strings come back unescaped, regexes as ``("regex", text)``."""
    stack: list[list[Any]] = [[]]
    position = 0
    while position < len(profile):
        match = _TOKEN.match(profile, position)
        assert match, f"unreadable profile text at {profile[position:position + 40]!r}"
        position = match.end()
        if match["open"]:
            stack.append([])
        elif match["close"]:
            form = stack.pop()
            stack[-1].append(form)
        elif match["regex"] is not None:
            stack[-1].append(("regex", match["regex"]))
        elif match["string"] is not None:
            stack[-1].append(re.sub(r"\\(.)", r"\1", match["string"]))
        elif match["atom"]:
            stack[-1].append(match["atom"])
    assert len(stack) == 1, "unbalanced parentheses"
    return stack[0]


def rules(profile: str) -> list[tuple[str, list[str], list[Any]]]:
    """Every allow/deny rule in order: (action, operations, filters)."""
    found = []
    for form in parse(profile):
        if form[0] in ("allow", "deny"):
            operations = [item for item in form[1:] if isinstance(item, str)]
            filters = [item for item in form[1:] if isinstance(item, list)]
            found.append((form[0], operations, filters))
    return found


def _matches(filter_: list[Any], path: str, params: dict[str, str]) -> bool:
    kind, value = filter_
    if isinstance(value, list) and value[0] == "param":
        value = params[value[1]]
    if kind == "literal":
        return path == value
    if kind == "subpath":
        return path == value or path.startswith(value.rstrip("/") + "/")
    if kind == "regex":
        return re.search(value[1], path) is not None
    raise AssertionError(f"unknown filter {kind}")


def decide(profile: str, operation: str, path: str = "", params: dict[str, str] | None = None) -> str:
    """Seatbelt's answer: the last rule whose operation and filters match (``default`` matches all)."""
    verdict = None
    for action, operations, filters in rules(profile):
        covered = any(op == "default" or op == operation or (op.endswith("*") and operation.startswith(op[:-1]))
                      for op in operations)
        if covered and (not filters or any(_matches(f, path, params or {"TMPDIR": RUN_TMP}) for f in filters)):
            verdict = action
    assert verdict is not None, "the profile decides nothing"
    return verdict


# -- the profile text ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [READ_ONLY, WORKSPACE_WRITE])
def test_the_profile_for_each_mode_matches_its_golden_text(fake_home: None, mode: str) -> None:
    expected = (GOLDEN / f"seatbelt_{mode}.sb").read_text()
    assert render_profile(darwin_policy(mode)) == expected


def test_the_same_policy_always_renders_the_same_profile_naming_its_mode(fake_home: None) -> None:
    first = render_profile(darwin_policy(WORKSPACE_WRITE))
    assert first == render_profile(darwin_policy(WORKSPACE_WRITE))
    assert first.startswith("(version 1)\n; kirocrew conversations, authority workspace_write:")
    assert "authority read_only:" in render_profile(darwin_policy(READ_ONLY))


def test_only_workspace_write_allows_writing_the_workspace(fake_home: None) -> None:
    def allowed_write_roots(mode: str) -> list[Any]:
        return [f[1] for action, ops, filters in rules(render_profile(darwin_policy(mode)))
                if action == "allow" and "file-write*" in ops for f in filters]

    assert WORKSPACE not in allowed_write_roots(READ_ONLY)
    assert all(not str(root).startswith(WORKSPACE) for root in allowed_write_roots(READ_ONLY))
    assert WORKSPACE in allowed_write_roots(WORKSPACE_WRITE)


@pytest.mark.parametrize("mode", [READ_ONLY, WORKSPACE_WRITE])
def test_every_protected_and_hidden_path_is_denied_after_the_last_write_allow(fake_home: None, mode: str) -> None:
    policy = darwin_policy(mode)
    ordered = rules(render_profile(policy))
    last_allow = max(i for i, (action, ops, _) in enumerate(ordered) if action == "allow" and "file-write*" in ops)
    for path in (*policy.read_only, *policy.hidden):
        denies = [i for i, (action, ops, filters) in enumerate(ordered)
                  if action == "deny" and "file-write*" in ops and ["subpath", str(path)] in filters]
        assert denies and min(denies) > last_allow, f"{path} is not re-denied after the allows"


def test_a_quote_and_a_backslash_in_a_path_are_escaped_for_the_profile(fake_home: None) -> None:
    odd = '/Users/u/we"ird\\name'
    profile = render_profile(darwin_policy(WORKSPACE_WRITE, odd))
    assert '(subpath "/Users/u/we\\"ird\\\\name")' in profile
    assert any(["subpath", odd] in filters for _, _, filters in rules(profile))  # reads back as the same path
    assert decide(profile, "file-write-create", odd + "/new.txt") == "allow"
    assert sbpl_string('a"b\\c') == '"a\\"b\\\\c"'


@pytest.mark.parametrize("bad", ["/Users/u/pro\0ject", "/Users/u/pro\nject", "/Users/u/pro\rject"])
def test_a_path_with_a_nul_or_a_line_break_is_refused_without_naming_it(fake_home: None, bad: str) -> None:
    policy = SandboxPolicy(mode=WORKSPACE_WRITE, workspace=Path(bad), writable=(Path(bad),), read_only=(),
                           hidden=())
    with pytest.raises(ValueError, match="control character") as refused:
        render_profile(policy)
    assert "/Users/u" not in str(refused.value)


def test_a_relative_path_is_refused(fake_home: None) -> None:
    policy = SandboxPolicy(mode=READ_ONLY, workspace=Path("/w"), writable=(Path("relative/dir"),), read_only=(),
                           hidden=())
    with pytest.raises(ValueError, match="absolute"):
        render_profile(policy)


# -- what the profile decides -------------------------------------------------------------------

KIRO = f"{FAKE_HOME}/.kiro"
ALWAYS = [
    ("file-write-create", f"{RUN_TMP}/scratch.txt", "allow"),
    ("file-write-data", f"{KIRO}/sessions/cli/s.json", "allow"),
    ("file-write-create", f"{FAKE_HOME}/Library/Caches/kiro-cli/c", "allow"),
    ("file-write-data", "/dev/null", "allow"),
    ("file-write-data", "/dev/ttys003", "allow"),
    ("file-write-create", f"{FAKE_HOME}/escape.txt", "deny"),
    ("file-write-create", "/etc/evil", "deny"),
    ("file-write-create", f"{KIRO}/agents/evil.json", "deny"),
    ("file-write-unlink", f"{KIRO}/agents", "deny"),
    ("file-write-create", f"{KIRO}/steering/evil.md", "deny"),
    ("file-write-create", f"{KIRO}/skills/evil.md", "deny"),
    ("file-read-data", f"{FAKE_HOME}/.aws/credentials", "allow"),
    ("file-write-data", f"{FAKE_HOME}/.aws/credentials", "deny"),
    ("file-write-data", f"{FAKE_HOME}/.netrc", "deny"),
    ("file-read-data", f"{KIRO}/crew/gateway.token", "deny"),
    ("file-read-metadata", f"{KIRO}/crew", "deny"),
    ("file-write-data", f"{KIRO}/crew/gateway.token", "deny"),
    ("file-link", f"{FAKE_HOME}/.aws/credentials", "deny"),
    ("file-link", f"{KIRO}/crew/gateway.token", "deny"),
    ("file-link", f"{FAKE_HOME}/.zshrc", "deny"),  # an alias in a writable root would make it writable
    ("file-link", f"{RUN_TMP}/a", "allow"),
    ("file-write-unlink", KIRO, "deny"),  # renaming ~/.kiro would carry crew/ and agents/ away
    ("file-write-unlink", f"{KIRO}/sessions/cli/old.json", "allow"),
    ("file-read-data", f"{WORKSPACE}/README.md", "allow"),
    ("network-outbound", "", "allow"),
    ("process-exec", "", "allow"),
    ("lsopen", "", "deny"),
    ("appleevent-send", "", "deny"),
    ("file-mount", "", "deny"),
    ("job-creation", "", "deny"),
]


@pytest.mark.parametrize(("operation", "path", "verdict"), ALWAYS)
@pytest.mark.parametrize("mode", [READ_ONLY, WORKSPACE_WRITE])
def test_both_modes_decide_the_same_outside_the_workspace(fake_home: None, mode: str, operation: str, path: str,
                                                          verdict: str) -> None:
    assert decide(render_profile(darwin_policy(mode)), operation, path) == verdict


@pytest.mark.parametrize(("operation", "path", "read_only", "workspace_write"), [
    ("file-write-create", f"{WORKSPACE}/new.txt", "deny", "allow"),
    ("file-write-data", f"{WORKSPACE}/src/main.py", "deny", "allow"),
    ("file-write-create", f"{WORKSPACE}/.git/objects/ab/cdef", "deny", "allow"),
    ("file-write-create", f"{WORKSPACE}/.git/hooks/pre-commit", "deny", "deny"),
    ("file-write-data", f"{WORKSPACE}/.git/config", "deny", "deny"),
    ("file-write-unlink", f"{WORKSPACE}/.git", "deny", "deny"),  # mv .git away and back would free hooks/
    ("file-write-unlink", WORKSPACE, "deny", "deny"),
])
def test_the_workspace_is_writable_only_in_workspace_write_and_its_git_hooks_never(
        fake_home: None, operation: str, path: str, read_only: str, workspace_write: str) -> None:
    assert decide(render_profile(darwin_policy(READ_ONLY)), operation, path) == read_only
    assert decide(render_profile(darwin_policy(WORKSPACE_WRITE)), operation, path) == workspace_write


# -- the launcher -------------------------------------------------------------------------------


def test_the_launcher_resolves_symlinked_roots_and_passes_the_temporary_area_as_a_parameter(
        tmp_path: Path) -> None:
    real_kiro, linked_kiro = tmp_path / "real-kiro", tmp_path / "kiro-link"
    real_kiro.mkdir()
    linked_kiro.symlink_to(real_kiro)
    (tmp_path / "run-tmp").mkdir()
    (tmp_path / "tmp-link").symlink_to(tmp_path / "run-tmp")
    policy = SandboxPolicy(mode=READ_ONLY, workspace=tmp_path, writable=(linked_kiro,),
                           read_only=(linked_kiro / "agents",), hidden=())
    argv = seatbelt_argv(policy, tmp_path / "tmp-link")
    assert argv[0] == SANDBOX_EXEC and argv[1] == "-p" and argv[3:] == ["-D", f"TMPDIR={tmp_path / 'run-tmp'}"]
    profile = argv[2]
    # Seatbelt matches resolved paths: the allow names the real directory...
    assert decide(profile, "file-write-create", f"{real_kiro}/sessions/x") == "allow"
    # ...and the protected path is denied in both spellings (the link itself can be removed by its own name).
    assert decide(profile, "file-write-create", f"{real_kiro}/agents/evil.json") == "deny"
    assert decide(profile, "file-write-unlink", f"{linked_kiro}/agents") == "deny"


def test_sandboxed_options_wrap_kiro_cli_trust_no_tool_a_rule_could_refuse_and_set_tmpdir(
        fake_home: None, tmp_path: Path) -> None:
    policy = darwin_policy(WORKSPACE_WRITE)
    base = AcpOptions(model="m", trust_all_tools=True, env={"PATH": "/usr/bin", "TMPDIR": "/elsewhere"})
    options = sandboxed_options(base, policy, tmp_path)
    argv = options.argv("/opt/kiro/kiro-cli")
    assert argv[:5] == [SANDBOX_EXEC, "-p", render_profile(policy), "-D", f"TMPDIR={tmp_path}"]
    # Reads are not pre-trusted: the built-in protections ask before kirocrew's secrets are read, so every read
    # reaches the permission gate (which allows the rest by default). Nothing is trusted wholesale.
    assert argv[5:] == ["/opt/kiro/kiro-cli", "acp", "--model", "m", "--trust-tools="]
    assert "--trust-all-tools" not in argv
    assert dict(options.env or {}) == {"PATH": "/usr/bin", "TMPDIR": str(tmp_path)}
    # The orchestrator restarts kiro-cli whenever a run's options differ: the same run must give equal options.
    assert sandboxed_options(base, policy, tmp_path) == options


def test_the_temporary_area_is_private_and_stable_per_mode_and_workspace(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ws_a, ws_b = tmp_path / "a", tmp_path / "b"
    ws_a.mkdir()
    ws_b.mkdir()
    first = run_tmpdir(build_policy(READ_ONLY, ws_a, platform="darwin"))
    assert first == run_tmpdir(build_policy(READ_ONLY, ws_a, platform="darwin"))
    assert first.parent == tmp_path / f"kirocrew-seatbelt-{os.getuid()}"
    assert stat.S_IMODE(first.stat().st_mode) == 0o700 and stat.S_IMODE(first.parent.stat().st_mode) == 0o700
    others = {run_tmpdir(build_policy(WORKSPACE_WRITE, ws_a, platform="darwin")),
              run_tmpdir(build_policy(READ_ONLY, ws_b, platform="darwin"))}
    assert first not in others and len(others) == 2


@pytest.mark.parametrize("planted", ["symlink", "group_writable"])
def test_a_temporary_area_someone_else_could_reach_is_refused(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, planted: str) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    base = tmp_path / f"kirocrew-seatbelt-{os.getuid()}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if planted == "symlink":
        base.symlink_to(elsewhere)
    else:
        base.mkdir()
        base.chmod(0o770)
    with pytest.raises(PermissionError, match="not a private directory"):
        run_tmpdir(build_policy(READ_ONLY, tmp_path, platform="darwin"))
    assert list(elsewhere.iterdir()) == []


# -- availability off macOS ---------------------------------------------------------------------


@pytest.mark.skipif(sys.platform == "darwin", reason="checks the refusal off macOS")
def test_seatbelt_is_unavailable_off_macos_and_the_factory_refuses(isolated_homes: Any, tmp_path: Path) -> None:
    backend = SeatbeltBackend()
    ok, reason = backend.available()
    assert ok is False and "macOS" in reason
    workspace = tmp_path / "project"
    workspace.mkdir()
    with pytest.raises(KirocrewError) as refused:
        backend.factory(AcpOptions(), workspace=str(workspace), mode=WORKSPACE_WRITE)
    assert refused.value.code == "authority_unavailable" and "macOS" in str(refused.value)
    # Nothing was prepared for a run that cannot be confined.
    assert list(isolated_homes.user_home.iterdir()) == [] and list(workspace.iterdir()) == []


def test_the_backends_are_registered_for_macos_only() -> None:
    backends = authority_backends()
    assert [b.name for b in backends] == [READ_ONLY, WORKSPACE_WRITE]
    assert all(b.platforms == ("darwin",) for b in backends)


# -- sandbox-exec itself (macOS) ----------------------------------------------------------------

PROBE = r'''
r="$1"; ws="$2"
check() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name=ok" >> "$r"; else echo "$name=denied" >> "$r"; fi; }
check ws_read cat "$ws/README.md"
check ws_write sh -c 'echo x > "$1/written.txt"' sh "$ws"
check tmp_write sh -c 'echo x > "$TMPDIR/t" && test -s "$TMPDIR/t"'
check sessions_write sh -c 'mkdir -p "$KIRO_HOME/sessions" && echo x > "$KIRO_HOME/sessions/probe-w"'
check cache_write sh -c 'echo x > "$HOME/Library/Caches/kiro-cli/probe-w"'
check agents_write sh -c 'echo x > "$KIRO_HOME/agents/evil.json"'
check cred_read cat "$HOME/.aws/credentials"
check cred_write sh -c 'echo x >> "$HOME/.aws/credentials"'
check home_write sh -c 'echo x > "$HOME/escape.txt"'
check crew_read cat "$KIROCREW_HOME/gateway.token"
check link_credential ln "$HOME/.aws/credentials" "$TMPDIR/stolen"
check mv_protected mv "$KIRO_HOME/agents" "$KIRO_HOME/agents-moved"
check mv_kiro_home mv "$KIRO_HOME" "$HOME/Library/Caches/kiro-cli/moved"
check git_hook_write sh -c 'echo x > "$1/.git/hooks/pre-commit"' sh "$ws"
check dev_null sh -c 'echo x > /dev/null'
'''
COMMON = {
    "ws_read": "ok", "tmp_write": "ok", "sessions_write": "ok", "cache_write": "ok", "agents_write": "denied",
    "cred_read": "ok", "cred_write": "denied", "home_write": "denied", "crew_read": "denied",
    "link_credential": "denied", "mv_protected": "denied", "mv_kiro_home": "denied", "git_hook_write": "denied",
    "dev_null": "ok",
}


@pytest.mark.macos
@on_macos
@pytest.mark.parametrize(("mode", "ws_write"), [(READ_ONLY, "denied"), (WORKSPACE_WRITE, "ok")])
def test_sandbox_exec_enforces_the_profile(isolated_homes: Any, tmp_path: Path, mode: str, ws_write: str) -> None:
    workspace = tmp_path / "project"
    (workspace / ".git" / "hooks").mkdir(parents=True)
    (workspace / "README.md").write_text("hello\n")
    (isolated_homes.user_home / ".aws").mkdir()
    (isolated_homes.user_home / ".aws" / "credentials").write_text("[default]\n")
    isolated_homes.crew_home.mkdir(parents=True, exist_ok=True)
    (isolated_homes.crew_home / "gateway.token").write_text("secret\n")
    policy = build_policy(mode, workspace, platform="darwin")
    prepare(policy)
    run_tmp = tmp_path / "run-tmp"
    run_tmp.mkdir()
    results = isolated_homes.kiro_home / "probe-results.txt"
    env = {**os.environ, "TMPDIR": str(run_tmp)}
    done = subprocess.run([*seatbelt_argv(policy, run_tmp), "/bin/sh", "-c", PROBE, "probe", str(results),
                           str(workspace)], env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    verdicts = dict(line.split("=", 1) for line in results.read_text().split())
    assert verdicts == {**COMMON, "ws_write": ws_write}
    assert (workspace / "written.txt").exists() == (ws_write == "ok")
    assert not (isolated_homes.user_home / "escape.txt").exists()
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    agents = isolated_homes.kiro_home / "agents"
    assert agents.is_dir() and not (agents / "evil.json").exists()


@pytest.mark.macos
@on_macos
def test_on_macos_the_preflight_passes_and_the_factory_wraps_kiro_cli(
        isolated_homes: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    backend = SeatbeltBackend()
    assert backend.available() == (True, "")
    workspace = tmp_path / "project"
    workspace.mkdir()
    options = backend.factory(AcpOptions(), workspace=str(workspace), mode=READ_ONLY)
    assert options.launcher[0] == SANDBOX_EXEC and options.trust_all_tools is False
    tmpdir = dict(options.env or {})["TMPDIR"]
    done = subprocess.run([*options.launcher, "/bin/sh", "-c", 'echo x > "$TMPDIR/ok" && ! echo x > "$1/no"',
                           "sh", str(workspace)], env=dict(options.env or {}), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert Path(tmpdir, "ok").exists() and not (workspace / "no").exists()


@pytest.mark.macos
@on_macos
def test_a_missing_sandbox_exec_makes_the_authority_unavailable(tmp_path: Path) -> None:
    ok, reason = SeatbeltBackend(sandbox_exec=str(tmp_path / "sandbox-exec")).available()
    assert ok is False and "missing" in reason
