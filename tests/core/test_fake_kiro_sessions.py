"""The fake writes kiro-cli's session files as kiro does: a third-party reader of real sessions reads them.

``kiro-cli-history`` (a test-only dependency) reads real kiro-cli 2.x and V3 sessions; pointed at
sessions the fake wrote it must see their titles and messages. Sub-agents and the image limits of
kiro's backend are checked on the same files, and the layout helpers of
:mod:`kirocrew_core.kiro_sessions` are checked against what the fake wrote.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import home, kiro_sessions
from kirocrew_testing.fake_kiro.harness import start_fake_kiro


def _png(width: int, height: int) -> str:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, format="PNG")
    return base64.b64encode(out.getvalue()).decode()


def _reader(monkeypatch: pytest.MonkeyPatch) -> Any:
    """kiro-cli-history's reader, looking at this test's kiro home (it reads ``~/.kiro`` at import)."""
    from kiro_cli_history import main as reader  # type: ignore[import-untyped]

    monkeypatch.setattr(reader, "SESSIONS_DIR", home.kiro_sessions_dir())
    monkeypatch.setattr(reader, "SQLITE_DB", home.kiro_home() / "no-such.sqlite3")
    return reader


async def _session(fake_kiro_cli: Any, cwd: Path, prompts: list[str], *args: str) -> tuple[str, list[str]]:
    """Run ``prompts`` in a new session; its id and the chunks it replied."""
    async with start_fake_kiro(fake_kiro_cli.path, "acp", *args, env=dict(os.environ)) as k:
        await k.initialize()
        sid = (await k.new_session(str(cwd)))["sessionId"]
        for text in prompts:
            await k.prompt(sid, text)
        return sid, k.client.texts()


def test_kiro_cli_history_reads_a_flat_session_the_fake_wrote_title_messages_and_credits(
        fake_kiro_cli, tmp_path, monkeypatch):
    sid, texts = asyncio.run(_session(fake_kiro_cli, tmp_path, ["Fix the login page\nplease", "!say all done",
                                                                "!subagent look at the tests"]))
    reader = _reader(monkeypatch)
    (found,) = [s for s in reader.get_sessions() if s["session_id"] == sid]
    assert found["title"] == "Fix the login page"
    assert found["cwd"] == str(tmp_path) and found["source"] == "jsonl"
    assert found["msg_count"] == 6
    assert found["credits_used"] == pytest.approx(0.03)
    assert reader.extract_messages(found)[:4] == [
        {"role": "you", "text": "Fix the login page\nplease"}, {"role": "kiro", "text": "Fix the login page\nplease"},
        {"role": "you", "text": "!say all done"}, {"role": "kiro", "text": "all done"}]

    # The sub-agent's session is a sibling kiro links to its parent; the layout helpers find it.
    child = texts[-1].removeprefix("subagent: ")
    (sub,) = [s for s in reader.get_sessions() if s["session_id"] == child]
    assert sub["title"] == "look at the tests" and sub["msg_count"] == 2
    meta = kiro_sessions.read_meta(kiro_sessions.flat_files(child))
    assert meta is not None and (meta.parent_session_id, meta.created_reason) == (sid, "subagent")
    assert kiro_sessions.children(sid) == [child]
    assert kiro_sessions.session_tree(sid) == [sid, child]


def test_kiro_cli_history_reads_a_v3_session_and_deleting_it_takes_its_sub_executions(
        fake_kiro_cli, tmp_path, monkeypatch):
    sid, texts = asyncio.run(_session(fake_kiro_cli, tmp_path, ["Plan the release", "!subagent draft notes"],
                                      "--agent-engine", "v3"))
    assert sid.startswith("sess_")
    located = kiro_sessions.locate(sid)
    assert located is not None and located.layout == "v3" and located.directory is not None
    assert located.directory.parent.parent == kiro_sessions.sessions_root()
    child = texts[-1].removeprefix("subagent: ")
    assert [p.name for p in located.transcripts()] == ["messages.jsonl", f"{child}.jsonl"]

    reader = _reader(monkeypatch)
    (found,) = [s for s in reader.get_sessions() if s["session_id"] == sid]
    assert (found["title"], found["cwd"], found["source"], found["msg_count"]) == (
        "Plan the release", str(tmp_path), "v3", 4)
    assert found["credits_used"] == pytest.approx(0.02)
    assert reader.extract_messages(found)[0] == {"role": "you", "text": "Plan the release"}
    meta = kiro_sessions.read_meta(located)
    assert meta is not None and (meta.session_id, meta.title, meta.cwd) == (sid, "Plan the release", str(tmp_path))

    # A lock naming a live process keeps the whole directory; a dead owner's lock does not.
    located.lock.write_text(json.dumps({"pid": os.getpid(), "started_at": "now"}))
    assert kiro_sessions.session_in_use(sid) and kiro_sessions.lock_path(sid) == located.lock
    assert kiro_sessions.remove_session_tree(sid) == [sid] and located.directory.is_dir()
    located.lock.write_text(json.dumps({"pid": 2 ** 22 + 7, "started_at": "then"}))
    assert kiro_sessions.remove_session_tree(sid) == []
    assert not located.directory.exists() and list(located.directory.parent.iterdir()) == []
    assert kiro_sessions.locate(sid) is None


def test_a_session_holding_bad_media_fails_every_later_prompt_as_kiros_backend_does(fake_kiro_cli, tmp_path):
    from acp import image_block, text_block
    from acp.exceptions import RequestError

    small, huge = _png(8, 8), _png(2001, 4)

    async def scenario() -> tuple[str, list[str]]:
        async with start_fake_kiro(fake_kiro_cli.path, "acp", env=dict(os.environ)) as k:
            await k.initialize()
            sid = (await k.new_session(str(tmp_path)))["sessionId"]
            await k.conn.prompt(session_id=sid, prompt=[text_block("look"), image_block(small, "image/png")])
            errors = []
            for _ in range(2):  # the oversized image stays in the session: the next prompt fails too
                with pytest.raises(RequestError) as failed:
                    await k.conn.prompt(session_id=sid, prompt=[text_block("and this"),
                                                                image_block(huge, "image/png")])
                errors.append(str(failed.value.data or failed.value))
            with pytest.raises(RequestError) as again:
                await k.prompt(sid, "plain text")
            errors.append(str(again.value.data or again.value))
            return sid, errors

    sid, errors = asyncio.run(scenario())
    assert all("2000 pixels" in error for error in errors), errors
    lines = [json.loads(line) for line in kiro_sessions.flat_files(sid).transcript.read_text().splitlines()]
    images = [image for line in lines for image in line["data"].get("images", [])]
    assert [image["mimeType"] for image in images] == ["image/png"] * 3
    assert images[0]["data"] == small


def test_more_than_a_hundred_inline_images_fail_the_session(fake_kiro_cli, tmp_path):
    from acp import image_block, text_block
    from acp.exceptions import RequestError

    dot = _png(2, 2)

    async def scenario() -> str:
        async with start_fake_kiro(fake_kiro_cli.path, "acp", env=dict(os.environ)) as k:
            await k.initialize()
            sid = (await k.new_session(str(tmp_path)))["sessionId"]
            await k.conn.prompt(session_id=sid, prompt=[text_block("many"), *[image_block(dot, "image/png")] * 100])
            with pytest.raises(RequestError) as failed:
                await k.conn.prompt(session_id=sid, prompt=[text_block("one more"), image_block(dot, "image/png")])
            return str(failed.value.data or failed.value)

    assert "101 exceeds limit 100" in asyncio.run(scenario())


def test_layout_helpers_refuse_hostile_ids_and_ignore_junk_metadata(isolated_homes):
    for hostile in ("../x", "a/b", "", ".hidden", "x" * 200):
        with pytest.raises(Exception) as refused:
            kiro_sessions.locate(hostile)
        assert getattr(refused.value, "code", "") == "bad_session_id"
    flat = home.kiro_sessions_dir()
    flat.mkdir(parents=True)
    (flat / "junk.json").write_text("{not json")
    (flat / "list.json").write_text('["parent_session_id", "p"]')
    (flat / "kid.json").write_text(json.dumps({"session_id": "kid", "parent_session_id": "p"}))
    assert kiro_sessions.read_meta(kiro_sessions.flat_files("junk")) is None
    assert kiro_sessions.children("p") == ["kid"]
    assert kiro_sessions.locate("kid") is not None and kiro_sessions.locate("nobody") is None
