"""``kirocrew conversations …``: the real CLI in a subprocess, against the fake kiro-cli.

With no server running, every command opens the test's state directory itself; a later
command sees what an earlier one left there, as a user's shell session would.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kirocrew_conversations.tool_schemas import TOOLS_BY_NAME

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


@pytest.fixture
def conversations(kirocrew: Any, fake_kiro_env: dict[str, str]) -> Any:
    """``conversations(*args, input=None)``: ``kirocrew conversations *args`` with the fake kiro-cli."""

    def run(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return kirocrew("conversations", *args, env=fake_kiro_env, input=input, timeout=120)

    return run


def documents(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """The JSON documents a ``--json`` command printed, one per line."""
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def conforms(tool: str, document: dict[str, Any]) -> dict[str, Any]:
    from jsonschema import Draft202012Validator

    Draft202012Validator(TOOLS_BY_NAME[tool].output_schema).validate(document)
    return document


def ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"exit {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    return done


def spawned(conversations: Any, workspace: Path, name: str, message: str) -> tuple[str, str]:
    """Spawn (supervised to its end, no server running); the new conversation's and run's IDs."""
    first, final = documents(ok(conversations("--json", "spawn", "--name", name, "--workspace", str(workspace),
                                              message)))
    conforms("kiro_spawn", first)
    conforms("kiro_result", final)
    assert final["runId"] == first["runId"]
    return first["conversationId"], first["runId"]


def test_delegate_without_a_server_supervises_the_run_and_prints_its_reply(conversations: Any,
                                                                            workspace: Path) -> None:
    done = ok(conversations("delegate", "--name", "greet", "--workspace", str(workspace), "!say hello from kiro"))
    assert "hello from kiro" in done.stdout
    assert ": completed" in done.stdout
    assert "supervising" in done.stderr  # the user is told the run ends with the command


def test_delegate_json_is_one_document_that_validates_against_the_tool_output_schema(
        conversations: Any, workspace: Path) -> None:
    [out] = documents(ok(conversations("delegate", "--json", "--name", "greet", "--workspace", str(workspace),
                                       "!say hi")))
    conforms("kiro_delegate", out)
    assert out["createdConversation"] is True and out["waitExpired"] is False
    assert out["run"]["status"] == "completed" and out["run"]["reply"]["text"] == "hi"


def test_a_run_spawned_by_one_command_is_read_by_a_later_one_completed_and_the_same_twice(
        conversations: Any, workspace: Path) -> None:
    cid, rid = spawned(conversations, workspace, "later", "!say kept for later")
    first = ok(conversations("--json", "result", cid, rid))
    second = ok(conversations("--json", "result", cid, rid))
    [run] = documents(first)
    conforms("kiro_result", run)
    assert run["status"] == "completed" and run["reply"]["text"] == "kept for later"
    assert first.stdout == second.stdout  # reading never consumes the result
    human = ok(conversations("result", cid, rid)).stdout
    assert f"run {rid} in conversation {cid}: completed" in human and "kept for later" in human


def test_status_lists_the_spawned_conversation_with_its_latest_run(conversations: Any, workspace: Path) -> None:
    cid, rid = spawned(conversations, workspace, "listed", "!say hi")
    [out] = documents(ok(conversations("status", "--json")))
    conforms("kiro_status", out)
    [summary] = out["conversations"]
    assert summary["conversationId"] == cid and summary["name"] == "listed"
    assert summary["latestRun"] == {"runId": rid, "status": "completed"}
    assert out["counts"]["idle"] == 1
    human = ok(conversations("status", "--run-status", "completed")).stdout
    assert cid in human and "listed" in human and f"latest {rid} completed" in human
    assert cid not in ok(conversations("status", "--run-status", "failed")).stdout


def test_a_follow_up_sent_without_a_server_runs_to_its_end_in_the_same_conversation(
        conversations: Any, workspace: Path) -> None:
    cid, _ = spawned(conversations, workspace, "chat", "!say first")
    first, final = documents(ok(conversations("--json", "send", cid, "!say second")))
    conforms("kiro_send", first)
    conforms("kiro_result", final)
    assert first["conversationId"] == cid and first["delivery"] == "queue"
    assert final["runId"] == first["runId"] and final["reply"]["text"] == "second"


def test_a_message_of_dash_is_read_from_stdin(conversations: Any, workspace: Path) -> None:
    done = ok(conversations("delegate", "--name", "piped", "--workspace", str(workspace), "-",
                            input="!say read from stdin\n"))
    assert "read from stdin" in done.stdout


def test_a_new_conversation_works_in_the_current_directory_by_default(fake_kiro_env: dict[str, str],
                                                                      workspace: Path) -> None:
    exe = Path(sys.executable).with_name("kirocrew")
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "kirocrew_core.cli"]
    done = subprocess.run([*argv, "conversations", "--json", "delegate", "--name", "here", "!say hi"],
                          cwd=workspace, env=fake_kiro_env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    [out] = documents(ok(done))
    assert out["run"]["settings"]["workspace"]["label"] == workspace.name


def test_a_run_that_fails_makes_delegate_exit_1_and_shows_its_error(conversations: Any, workspace: Path) -> None:
    done = conversations("delegate", "--name", "broken", "--workspace", str(workspace), "!error -32603 boom")
    assert done.returncode == 1, done.stderr
    assert ": failed" in done.stdout and "error[kiro_run_failed]" in done.stdout


def test_delete_needs_an_archived_conversation_and_its_exact_name(conversations: Any, workspace: Path) -> None:
    cid, _ = spawned(conversations, workspace, "doomed", "!say hi")
    early = conversations("delete", cid, "--confirm-name", "doomed")
    assert early.returncode == 1 and "error[conversation_not_archived]" in early.stderr

    [archived] = documents(ok(conversations("--json", "archive", cid)))
    assert conforms("kiro_archive", archived)["state"] == "archived"
    assert cid not in ok(conversations("status")).stdout  # hidden from the default listing

    wrong = conversations("delete", cid, "--confirm-name", "dooomed")
    assert wrong.returncode == 1
    assert "kirocrew: error[confirmation_mismatch]:" in wrong.stderr and wrong.stdout == ""
    assert cid in ok(conversations("status", "--archive", "all")).stdout  # nothing was deleted

    [deleted] = documents(ok(conversations("delete", "--json", cid, "--confirm-name", "doomed")))
    assert conforms("kiro_delete", deleted) == {"conversationId": cid, "deleted": True}
    assert cid not in ok(conversations("status", "--archive", "all")).stdout


def test_a_slash_command_message_is_refused_from_the_shell_too(conversations: Any, workspace: Path) -> None:
    cid, _ = spawned(conversations, workspace, "slashy", "!say hi")
    refused = conversations("send", cid, "  /clear")
    assert refused.returncode == 1 and "kirocrew: error[slash_command_refused]:" in refused.stderr
    unknown = conversations("configure", cid, "--allow-slash-command", "/no-such-command")
    assert unknown.returncode == 1 and "kirocrew: error[unknown_slash_command]:" in unknown.stderr
    both = conversations("configure", cid, "--allow-slash-command", "/compact", "--no-slash-commands")
    assert both.returncode == 2
    [cleared] = documents(ok(conversations("--json", "configure", cid, "--no-slash-commands")))
    assert conforms("kiro_configure", cleared)["defaults"]["allowedSlashCommands"] == []
    mixed = conversations("spawn", "--conversation", cid, "--allow-slash-command", "/compact", "/compact")
    assert mixed.returncode == 2 and "--allow-slash-command" in mixed.stderr
    # kiro's commands come from the capability probe, so even a shell with no server may allow one at once.
    first, final = documents(ok(conversations("--json", "spawn", "--name", "fresh", "--workspace", str(workspace),
                                              "--allow-slash-command", "/compact", "/compact")))
    assert conforms("kiro_result", final)["reply"]["text"] == "/compact done"
    assert first["runId"] == final["runId"]


@pytest.mark.parametrize("target", ["conv_only", "conv_a:", ":run_b", "conv_a:run_b:extra"])
def test_a_malformed_wait_target_exits_2_naming_the_expected_form(conversations: Any, target: str) -> None:
    done = conversations("wait", target)
    assert done.returncode == 2
    assert "kirocrew: error[bad_input]:" in done.stderr and "CONVERSATION_ID:RUN_ID" in done.stderr


def test_wait_reports_every_target_and_validates_against_the_tool_output_schema(
        conversations: Any, workspace: Path) -> None:
    one = spawned(conversations, workspace, "one", "!say one")
    two = spawned(conversations, workspace, "two", "!say two")
    [out] = documents(ok(conversations("--json", "wait", "--all", ":".join(one), ":".join(two))))
    conforms("kiro_wait", out)
    assert out["mode"] == "all" and out["waitExpired"] is False
    assert [(r["runId"], r["status"]) for r in out["runs"]] == [(one[1], "completed"), (two[1], "completed")]


def test_an_unknown_conversation_id_is_reported_as_conversation_not_found(conversations: Any) -> None:
    for args in (("send", "conv_nope", "!say hi"), ("archive", "conv_nope"), ("configure", "conv_nope",
                                                                                 "--effort", "low")):
        done = conversations(*args)
        assert done.returncode == 1, args
        assert "kirocrew: error[conversation_not_found]:" in done.stderr, args


def test_new_conversation_options_with_an_existing_conversation_are_bad_input(conversations: Any,
                                                                              workspace: Path) -> None:
    mixed = conversations("spawn", "--conversation", "conv_x", "--name", "again", "!say hi")
    assert mixed.returncode == 2 and "--name" in mixed.stderr and "error[bad_input]" in mixed.stderr
    nameless = conversations("spawn", "--workspace", str(workspace), "!say hi")
    assert nameless.returncode == 2 and "--name" in nameless.stderr
    assert json.loads(ok(conversations("status", "--json")).stdout)["conversations"] == []


def test_an_image_that_is_a_text_file_is_refused_as_invalid_image_and_creates_nothing(
        conversations: Any, workspace: Path) -> None:
    notes = workspace / "notes.txt"
    notes.write_text("not a picture\n")
    disguised = workspace / "photo.png"
    disguised.write_text("not a picture either\n")  # the extension says image; the bytes do not
    for image in (notes, disguised):
        done = conversations("spawn", "--name", "pictures", "--workspace", str(workspace), "--image", str(image),
                             "!say what is this")
        assert done.returncode == 1, done.stderr
        assert "kirocrew: error[invalid_image]:" in done.stderr
    assert json.loads(ok(conversations("status", "--json", "--archive", "all")).stdout)["conversations"] == []


def test_capabilities_and_events_json_validate_against_their_tool_output_schemas(
        conversations: Any, workspace: Path) -> None:
    [caps] = documents(ok(conversations("capabilities", "--json")))
    conforms("kiro_capabilities", caps)
    assert caps["kiroCli"]["version"] == "2.15.0"
    cid, rid = spawned(conversations, workspace, "evented", "!say hi")
    [events] = documents(ok(conversations("--json", "events", cid, rid, "--limit", "100")))
    conforms("kiro_events", events)
    assert events["runId"] == rid and any(e["kind"] == "message" for e in events["events"])
    assert f"#{events['events'][0]['seq']} " in ok(conversations("events", cid, rid)).stdout


def _serving(path: Path, server: subprocess.Popen[Any], stderr: Path) -> None:
    """Until the server accepts on its control socket (a bound on a hang, not a measurement)."""
    import socket
    import time

    deadline = time.monotonic() + 60
    while True:
        assert server.poll() is None, f"the server exited {server.returncode}:\n{stderr.read_text()}"
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(str(path))
                return
            except OSError:
                pass
        assert time.monotonic() < deadline, f"no control socket at {path}:\n{stderr.read_text()}"
        time.sleep(0.1)


@contextlib.contextmanager
def _server_running(fake_kiro_env: dict[str, str], tmp_path: Path) -> Iterator[dict[str, str]]:
    """A real ``kirocrew mcp-conversations`` owning a state dir; yields the env whose twins reach it."""
    from kirocrew_core import proc
    from kirocrew_testing.fixtures import kirocrew_argv

    # A short state directory: a Unix socket path must fit in 108 bytes.
    env = {**fake_kiro_env, "KIRO_CONVERSATIONS_STATE_DIR": str(tmp_path / "s")}
    stderr = tmp_path / "server.stderr"
    with stderr.open("w") as errlog:
        # stdin stays an open pipe, so the stdio server keeps running until the test closes it.
        server = proc.spawn(kirocrew_argv("mcp-conversations", "--standalone"), env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=errlog, text=True)
    try:
        _serving(tmp_path / "s" / "control.sock", server, stderr)
        yield env
    finally:
        ended = proc.terminate(server, reason="test over")
    assert ended.returncode == 0, stderr.read_text()


def test_with_a_server_running_spawn_returns_at_once_and_a_later_wait_sees_the_run_complete(
        kirocrew: Any, fake_kiro_env: dict[str, str], workspace: Path, tmp_path: Path) -> None:
    with _server_running(fake_kiro_env, tmp_path) as env:
        started = ok(kirocrew("conversations", "--json", "spawn", "--name", "served", "--workspace",
                              str(workspace), "!sleep 2\n!say served by the server", env=env, timeout=120))
        [out] = documents(started)  # no second document: the command did not supervise the run
        conforms("kiro_spawn", out)
        assert "supervising" not in started.stderr

        target = f"{out['conversationId']}:{out['runId']}"
        [waited] = documents(ok(kirocrew("conversations", "--json", "wait", target, env=env, timeout=120)))
        conforms("kiro_wait", waited)
        [run] = waited["runs"]
        assert run["status"] == "completed" and run["reply"]["text"] == "served by the server"


def test_with_a_server_running_a_refused_command_keeps_its_stable_code_and_exit_status(
        kirocrew: Any, fake_kiro_env: dict[str, str], tmp_path: Path) -> None:
    with _server_running(fake_kiro_env, tmp_path) as env:
        missing = kirocrew("conversations", "archive", "conv_nope", env=env, timeout=120)
        malformed = kirocrew("conversations", "archive", "not an id!", env=env, timeout=120)
    assert missing.returncode == 1 and "kirocrew: error[conversation_not_found]:" in missing.stderr
    assert malformed.returncode == 2 and "kirocrew: error[invalid_arguments]:" in malformed.stderr


def test_every_conversations_command_is_in_the_user_guide() -> None:
    from kirocrew_conversations.cli import conversations as group

    def leaves(command: Any, path: str) -> list[str]:
        children = getattr(command, "commands", None)
        if children is None:
            return [path]
        return [leaf for name, child in children.items() for leaf in leaves(child, f"{path} {name}")]

    guide = (REPO / "docs" / "user-guide.md").read_text()
    commands = leaves(group, "kirocrew conversations")
    assert len(commands) == 19  # one per tool, and open and repair
    for command in commands:
        assert re.search(rf"`{command}( |`)", guide), command


def test_worktree_inspect_names_the_base_ref_and_the_commit_it_resolved_to(conversations: Any,
                                                                           tmp_path: Path) -> None:
    import os

    from kirocrew_testing.requirements import executable

    env = {"PATH": os.environ["PATH"], "HOME": os.environ["HOME"], "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": os.devnull, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}

    def git(*args: str) -> str:
        return subprocess.run([executable("git", apt="git"), *args], cwd=repo, env=env, check=True,
                              capture_output=True, text=True, timeout=60).stdout.strip()

    repo = tmp_path / "repo"
    repo.mkdir()
    git("init", "-q", "-b", "main")
    (repo / "README").write_text("one\n")
    git("add", "README")
    git("commit", "-q", "-m", "one")
    based_on = git("rev-parse", "main")
    first, _ = documents(ok(conversations("--json", "spawn", "--name", "based", "--workspace", str(repo),
                                          "--worktree", "--base-ref", "main", "!say hi")))
    (repo / "README").write_text("two\n")
    git("commit", "-q", "-am", "two")  # main moves on: what the worktree was based on does not
    shown = ok(conversations("worktree", "inspect", first["conversationId"])).stdout
    assert shown.startswith(f"branch {first['settings']['workspace']['branch']} (base main at {based_on[:12]}): "
                            "integrated, ")
