"""read_only / workspace_write through conversations: the fake kiro-cli really runs inside bubblewrap.

Each run executes a probe script with the fake's ``!shell`` (which asks permission under a restricted
authority; the test answers ``allow_once``). The script tries every allowed and forbidden operation and
appends ``name=ok|denied`` to a file in the Kiro home, one of the few places it may write; the host then
checks the verdicts and that nothing leaked onto the host.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kirocrew_testing.requirements import executable

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the bubblewrap backend is Linux-only")


@pytest.fixture(autouse=True)
def _bubblewrap() -> None:
    executable("bwrap", apt="bubblewrap")

PROBE = r'''
r="$KIRO_HOME/probe-results.txt"
check() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name=ok" >> "$r"; else echo "$name=denied" >> "$r"; fi; }
check ws_read cat probe.sh
check ws_write sh -c 'echo x > ws-written.txt'
check tmp_write sh -c 'echo x > /tmp/t && test -s /tmp/t'
check sessions_write sh -c 'echo x > "$KIRO_HOME/sessions/probe-w"'
check data_write sh -c 'echo x > "$HOME/.local/share/kiro-cli/probe-w"'
check cache_write sh -c 'echo x > "$HOME/.cache/kiro-cli/probe-w"'
check agents_write sh -c 'echo x > "$KIRO_HOME/agents/evil.json"'
check steering_write sh -c 'echo x > "$KIRO_HOME/steering/evil.md"'
check skills_write sh -c 'echo x > "$KIRO_HOME/skills/evil.md"'
check cred_read cat "$HOME/.aws/credentials"
check cred_write sh -c 'echo x >> "$HOME/.aws/credentials"'
check home_write sh -c 'echo x > "$HOME/escape.txt"'
check crew_read cat "$KIROCREW_HOME/gateway-token"
check remount mount -o remount,rw /
check mv_protected mv "$KIRO_HOME/agents" "$KIRO_HOME/agents-moved"
check link_credential ln "$HOME/.aws/credentials" "$KIRO_HOME/stolen"
check nested_userns unshare -U true
check git_hook_write sh -c 'echo x > .git/hooks/pre-commit'
check git_config_write sh -c 'echo x >> .git/config'
'''

COMMON = {
    "ws_read": "ok", "tmp_write": "ok", "sessions_write": "ok", "data_write": "ok", "cache_write": "ok",
    "agents_write": "denied", "steering_write": "denied", "skills_write": "denied",
    "cred_read": "ok", "cred_write": "denied", "home_write": "denied", "crew_read": "denied",
    "remount": "denied", "mv_protected": "denied", "link_credential": "denied", "nested_userns": "denied",
    "git_hook_write": "denied", "git_config_write": "denied",
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    ws = tmp_path / "project"
    ws.mkdir()
    (ws / "probe.sh").write_text(PROBE)
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n")
    user = Path.home()
    (user / ".aws").mkdir(exist_ok=True)
    (user / ".aws" / "credentials").write_text("[default]\naws_access_key_id = AKIAEXAMPLE\n")
    crew = Path(os.environ["KIROCREW_HOME"])
    crew.mkdir(parents=True, exist_ok=True)
    (crew / "gateway-token").write_text("owner-secret")
    return ws


async def run_allowing(client: Any, **spawn: Any) -> dict[str, Any]:
    """Delegate, answering every permission request allow_once, until the run ends."""
    out = await client.call("kiro_delegate", **spawn)
    run = out["run"]
    while run["status"] == "needs_attention":
        await client.call("kiro_permission_decide", conversationId=run["conversationId"], runId=run["runId"],
                          permissionRequestId=run["attention"]["permissionRequestId"], decision="allow_once")
        run = (await client.call("kiro_wait", targets=[{"conversationId": run["conversationId"],
                                                        "runId": run["runId"]}], mode="all"))["runs"][0]
    return run


def verdicts() -> dict[str, str]:
    text = (Path(os.environ["KIRO_HOME"]) / "probe-results.txt").read_text()
    return dict(line.split("=", 1) for line in text.split())


@pytest.mark.parametrize("mode", ["read_only", "workspace_write"])
def test_a_restricted_run_is_confined_by_its_authority(conversations_client, run_async, project, mode):
    async def main() -> dict[str, Any]:
        async with conversations_client() as client:
            caps = await client.call("kiro_capabilities")
            assert {a["name"]: a["available"] for a in caps["authorities"]}[mode] is True
            return await run_allowing(client, conversation="new", name=f"sandboxed-{mode.replace('_', '-')}",
                                      workspace=str(project), authority=mode, message="!shell sh probe.sh\n!say done")

    run = run_async(main())
    assert run["status"] == "completed" and run["settings"]["authority"] == mode
    expected = {**COMMON, "ws_write": "ok" if mode == "workspace_write" else "denied"}
    assert verdicts() == expected
    assert (project / "ws-written.txt").exists() is (mode == "workspace_write")
    assert not (Path.home() / "escape.txt").exists()
    assert (Path.home() / ".aws" / "credentials").read_text().endswith("AKIAEXAMPLE\n")
    assert (project / ".git" / "config").read_text() == "[core]\n"
    assert not (Path(os.environ["KIRO_HOME"]) / "agents" / "evil.json").exists()
    assert not (Path(os.environ["KIRO_HOME"]) / "stolen").exists()


def test_reads_are_allowed_by_the_policy_and_other_tools_ask_under_a_restricted_authority(
        conversations_client, run_async, project):
    async def main() -> None:
        async with conversations_client() as client:
            # Nothing is pre-trusted (a read of kirocrew's secrets asks): the gate allows this read by default.
            quiet = await client.call("kiro_delegate", conversation="new", name="reader", workspace=str(project),
                                      authority="read_only", message='!tool read {"path": "notes.txt"}\n!say read it')
            assert quiet["run"]["status"] == "completed" and quiet["run"]["reply"]["text"] == "read it"
            asks = await client.call("kiro_delegate", conversation=quiet["run"]["conversationId"],
                                     message="!tool fs_write {}\n!say wrote")
            assert asks["run"]["status"] == "needs_attention"
            assert asks["run"]["attention"]["toolName"] == "fs_write"
            await client.call("kiro_cancel", conversationId=asks["run"]["conversationId"],
                              runId=asks["run"]["runId"])

    run_async(main())


def _fake_bwrap(directory: Path) -> Path:
    directory.mkdir()
    script = directory / "bwrap"
    script.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return directory


@pytest.mark.parametrize("how", ["missing", "broken"])
def test_without_a_working_bubblewrap_restricted_runs_are_refused_never_run_unrestricted(
        conversations_client, run_async, fake_kiro_env, project, tmp_path, how):
    path = str(_fake_bwrap(tmp_path / "bin")) if how == "broken" else str(tmp_path / "empty-path")
    env = {**fake_kiro_env, "PATH": path}

    async def main() -> None:
        async with conversations_client(env=env) as client:
            caps = await client.call("kiro_capabilities")
            listed = {a["name"]: a for a in caps["authorities"]}
            assert listed["unrestricted"]["available"] is True
            for mode in ("read_only", "workspace_write"):
                assert listed[mode]["available"] is False
                expected = "not installed" if how == "missing" else "No permissions to creating new namespace"
                assert expected in listed[mode]["reason"]
            with pytest.raises(client.ToolCallError) as refused:
                await client.call("kiro_spawn", conversation="new", name="nope", workspace=str(project),
                                  authority="read_only", message="!write leaked.txt x")
            assert refused.value.code == "authority_unavailable"
            assert (await client.call("kiro_status", archive="all"))["conversations"] == []

    run_async(main())
    assert not (project / "leaked.txt").exists()


def test_the_sandbox_preflight_runs_real_bubblewrap(tmp_path):
    from kirocrew_conversations.sandbox.bwrap import BwrapBackend

    assert BwrapBackend().available() == (True, "")
    done = subprocess.run(["bwrap", "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("bubblewrap")


# -- the bwrap command line (what the runs above exercise) ----------------------------------------


def _args(mode: str, workspace: Path) -> list[str]:
    from kirocrew_conversations.sandbox.bwrap import bwrap_args
    from kirocrew_conversations.sandbox.policy import build_policy, prepare

    policy = build_policy(mode, workspace)
    prepare(policy)
    return bwrap_args(policy)


def _binds(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, arg in enumerate(args) if arg == flag]


def test_both_user_namespace_and_dropped_capabilities_isolate_every_run(project):
    args = _args("read_only", project)
    for flag in ("--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-ipc", "--die-with-parent",
                 "--new-session"):
        assert flag in args
    assert args[args.index("--cap-drop") + 1] == "ALL"
    assert "--unshare-net" not in args, "the network is kept"


def test_the_workspace_is_bound_writable_only_in_workspace_write_and_protections_come_after(project):
    read_only, writable = _args("read_only", project), _args("workspace_write", project)
    assert str(project) not in _binds(read_only, "--bind")
    assert str(project) in _binds(read_only, "--ro-bind")
    assert str(project) in _binds(writable, "--bind")
    hooks = str(project / ".git" / "hooks")
    assert hooks in _binds(writable, "--ro-bind")
    assert writable.index(hooks) > writable.index(str(project), writable.index("--bind"))
    kiro = os.environ["KIRO_HOME"]
    agents = str(Path(kiro) / "agents")
    assert read_only.index(agents) > read_only.index(kiro), "re-protection follows the writable Kiro home"
    assert os.environ["KIROCREW_HOME"] in _binds(read_only, "--tmpfs"), "kirocrew's home is hidden"


def test_a_kiro_cli_installed_under_tmp_stays_visible_inside_the_private_tmp():
    from kirocrew_conversations.sandbox.bwrap import installation

    assert installation(Path("/tmp/checkout/.venv/bin/kiro-cli")) == [Path("/tmp/checkout")]
    assert installation(Path("/usr/local/bin/kiro-cli")) == [Path("/usr/local/bin")]


def test_the_preflight_passes_while_another_thread_has_narrowed_the_umask() -> None:
    # The host narrows the process-wide umask to 0o177 while it binds its socket; a preflight running
    # meanwhile in a worker thread once created its scratch workspace without the search bit, so
    # bwrap could not chdir into it and read_only/workspace_write were reported unavailable.
    import shutil

    from kirocrew_conversations.sandbox.bwrap import BwrapBackend

    old = os.umask(0o177)
    try:
        verdict = BwrapBackend()._preflight(shutil.which("bwrap"))
    finally:
        os.umask(old)
    assert verdict[0] is True, verdict
