"""A conversation's own Kiro session in the person's hands: open it by hand, and its images kept in bounds.

``kirocrew conversations open|repair`` (the real CLI in a subprocess, against the fake kiro-cli,
no host: the command opens the state directory itself) and the image rules on ``send``: images
over 1900 px are downscaled before kiro sees them, and a send that would bring the session to
kiro's 100-image cap is refused with ``session_image_limit``. The fake fails every prompt of a
session holding a bad image, as kiro's backend does, so "the session works again" is observable.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import kiro_sessions


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "project dir"  # a space: the printed command must quote it
    path.mkdir()
    return path


@pytest.fixture
def conversations(kirocrew: Any, fake_kiro_env: dict[str, str]) -> Any:
    def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return kirocrew("conversations", *args, env={**fake_kiro_env, **env}, timeout=120)

    return run


def ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, f"exit {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    return done


def refused(done: subprocess.CompletedProcess[str], code: str) -> str:
    assert done.returncode != 0 and code in done.stderr, f"stdout: {done.stdout}\nstderr: {done.stderr}"
    return done.stderr


def last_json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return json.loads(ok(done).stdout.strip().splitlines()[-1])


def png(width: int, height: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), (10, 120, 200)).save(out, format="PNG")
    return out.getvalue()


def session_of(conversations_rows: Any, conversation_id: str) -> kiro_sessions.SessionFiles:
    """The conversation's Kiro session files, from its row in the store on disk."""
    [(session_id,)] = conversations_rows("SELECT acp_session_id FROM conversations WHERE id = ?", conversation_id)
    located = kiro_sessions.locate(session_id)
    assert located is not None
    return located


def add_images(session: kiro_sessions.SessionFiles, pictures: list[bytes]) -> None:
    """Turns holding ``pictures``, written as the fake (kiro's format) writes a prompt with images."""
    from kirocrew_testing.fake_kiro import sessions

    files = sessions.SessionFiles(session)
    for picture in pictures:
        sessions.append_transcript(files, "user", "see this", [{"data": base64.b64encode(picture).decode(),
                                                                "mimeType": "image/png"}])
        sessions.append_transcript(files, "assistant", "seen")


def images_in(session: kiro_sessions.SessionFiles) -> list[tuple[int, int]]:
    from PIL import Image

    sizes = []
    for line in session.transcript.read_text().splitlines():
        for image in json.loads(line).get("data", {}).get("images", []):
            with Image.open(io.BytesIO(base64.b64decode(image["data"]))) as picture:
                sizes.append(picture.size)
    return sizes


def test_open_releases_the_worker_and_prints_or_execs_the_resume_command_in_the_workspace(
        conversations, workspace, fake_kiro_cli):
    first = last_json(conversations("--json", "spawn", "--name", "handy", "--workspace", str(workspace),
                                    "Carry this on\n!say ready"))
    cid = first["conversationId"]

    printed = ok(conversations("open", cid)).stdout.strip()
    opened = last_json(conversations("open", cid, "--json"))
    session_id = opened["sessionId"]
    assert opened["cwd"] == str(workspace)
    assert opened["argv"] == [str(fake_kiro_cli.sandboxable_path), "chat", "--resume-id", session_id]
    assert printed == opened["command"] == f"cd {shlex.quote(str(workspace))} && {shlex.join(opened['argv'])}"
    assert kiro_sessions.locate(session_id) is not None and not kiro_sessions.session_in_use(session_id)

    # --exec: this process becomes kiro-cli, in the workspace, on the conversation's session.
    resumed = ok(conversations("open", cid, "--exec")).stdout.strip()
    assert resumed == f"resumed {session_id} in {workspace}: Carry this on"

    assert "conversation_not_found" in refused(conversations("open", "no-such-conversation"),
                                               "conversation_not_found")
    refused(conversations("open", "../../etc"), "conversation_not_found")


def test_repair_mends_a_session_its_images_broke_keeping_the_original_and_refusing_a_live_lock(
        conversations, workspace, conversations_rows):
    cid = last_json(conversations("--json", "spawn", "--name", "pics", "--workspace", str(workspace),
                                  "!say first"))["conversationId"]
    session = session_of(conversations_rows, cid)
    dot = png(3, 3)
    add_images(session, [dot] * 85 + [png(2400, 30)])

    # Broken, as kiro's backend breaks it: every later run fails.
    broken = conversations("--json", "send", cid, "!say still there?")
    assert broken.returncode != 0
    error = json.loads(broken.stdout.splitlines()[-1])["error"]
    assert error["code"] == "kiro_run_failed" and f"kirocrew conversations repair {cid}" in error["message"]
    original = session.transcript.read_bytes()

    # Another process holds the session: nothing changes.
    session.lock.write_text(json.dumps({"pid": os.getppid(), "started_at": "now"}))
    refused(conversations("repair", cid), "kiro_session_in_use")
    assert session.transcript.read_bytes() == original and not session.transcript.with_name(
        session.transcript.name + ".bak").exists()
    session.lock.unlink()

    report = last_json(conversations("repair", cid, "--json"))
    assert (report["images"], report["removed"], report["downscaled"], report["imagesLeft"]) == (86, 6, 1, 80)
    backup = session.transcript.with_name(session.transcript.name + ".bak")
    assert report["backups"] == [backup.name]
    assert backup.read_bytes() == original
    sizes = images_in(session)
    assert len(sizes) == 80 and max(max(size) for size in sizes) == 1900
    ok(conversations("send", cid, "!say works again"))

    # The backup holds the prompts too: deleting the conversation removes it with the rest.
    ok(conversations("archive", cid))
    ok(conversations("delete", cid, "--confirm-name", "pics"))
    assert sorted(p.name for p in session.transcript.parent.iterdir()
                  if p.name.startswith(session.session_id)) == []


def test_send_downscales_big_images_and_refuses_the_hundredth_with_a_code_naming_repair(
        conversations, workspace, tmp_path, conversations_rows):
    wide = tmp_path / "wide.png"
    wide.write_bytes(png(2600, 40))
    cid = last_json(conversations("--json", "spawn", "--name", "shots", "--workspace", str(workspace),
                                  "!say hi"))["conversationId"]
    ok(conversations("send", cid, "--image", str(wide), "!say got it"))
    session = session_of(conversations_rows, cid)
    assert images_in(session) == [(1900, 29)]

    add_images(session, [png(2, 2)] * 98)
    message = refused(conversations("send", cid, "--image", str(wide), "!say one too many"), "session_image_limit")
    assert "kirocrew conversations repair" in message
    assert len(images_in(session)) == 99, "nothing was queued or sent"

    refused(conversations("repair", "nope"), "conversation_not_found")


def test_a_v3_session_is_opened_resumed_and_deleted_with_its_sub_executions(conversations, workspace):
    v3 = {"KIRO_FAKE_V3": "1"}
    cid = last_json(conversations("--json", "spawn", "--name", "engine", "--workspace", str(workspace),
                                  "Use the new engine\n!subagent check it", **v3))["conversationId"]
    opened = last_json(conversations("open", cid, "--json", **v3))
    session = kiro_sessions.locate(opened["sessionId"])
    assert session is not None and session.layout == "v3" and session.directory is not None
    assert len(session.transcripts()) == 2  # its own and the sub-agent's sub-execution
    resumed = ok(conversations("open", cid, "--exec", **v3)).stdout.strip()
    assert resumed == f"resumed {opened['sessionId']} in {workspace}: Use the new engine"

    ok(conversations("archive", cid, **v3))
    ok(conversations("delete", cid, "--confirm-name", "engine", **v3))
    assert not session.directory.exists() and kiro_sessions.locate(opened["sessionId"]) is None
