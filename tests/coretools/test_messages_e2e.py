"""Messages end to end: a conversation's kiro-cli calls send_message, file_send and delete_message through the
relay and the host; the owner sets a channel's secret, mutes the session and fetches the outbox copy with the
real ``kirocrew messages`` command and the gateway; a plain MCP client and a session's own shell are refused.

One host (the harness starts it on the first relay), one webhook server on 127.0.0.1 (a real HTTP server).
"""

from __future__ import annotations

import asyncio
import json
import shlex
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from kirocrew_core.config import set_entry
from kirocrew_core.coretools.contract import CrewSession, ToolCall
from kirocrew_core.messages import store, tools
from kirocrew_core.notifications import store as feed
from kirocrew_testing.core_sessions import CrewHarness
from kirocrew_testing.fixtures import kirocrew_argv, run_kirocrew

HOOK_TOKEN = "B0T" + "x9Kq" * 6


def _mcp(tool: str, args: dict[str, Any]) -> str:
    return f"!mcp kirocrew-core {tool} {json.dumps(args)}\n!result"


@pytest.fixture
def posts() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A webhook on 127.0.0.1: its URL and the JSON bodies it received."""
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/hooks/{HOOK_TOKEN}", received
    server.shutdown()
    server.server_close()


def test_a_session_messages_its_owner_through_a_channel_sends_a_file_and_the_owner_mutes_it(
        crew: CrewHarness, run_async: Any, posts: Any) -> None:
    url, received = posts
    set_entry("channels", "team", {"kind": "webhook"})
    secret = run_kirocrew("messages", "secret", "team", env=crew.env, input=url + "\n")
    assert secret.returncode == 0 and "Saved channel team's secret" in secret.stdout, secret.stderr
    other = CrewSession("kcs1-" + "8" * 32, "conversation", "someone-else", agent="kirocrew")
    asyncio.run(tools.send_message({"text": "not yours"}, ToolCall("send_message", other, None, "strict", "session")))
    [theirs] = store.all_messages()
    (crew.workspace / "report.txt").write_text("All 42 checks passed.\n")
    unmute = shlex.join(kirocrew_argv("messages", "unmute", "cron:abc"))
    script = "\n".join([
        _mcp("send_message", {"text": "Build green on main.", "title": "CI", "channel": "team"}),
        _mcp("file_send", {"path": str(crew.workspace / "report.txt"), "description": "the test report",
                           "channel": "team"}),
        _mcp("file_send", {"path": "/etc/passwd"}),
        _mcp("delete_message", {"message_id": theirs.id}),
        _mcp("send_message", {"text": "x" * (store.TEXT_MAX_CHARS + 1), "channel": "team"}),
        f'!shell {unmute} > twin.txt 2>&1; echo "exit $?" >> twin.txt',
        "!say done"])

    async def main() -> dict[str, Any]:
        async with crew.conversations() as conv:
            first = await crew.delegate(conv, script, name="reporter")
            muted = run_kirocrew("messages", "mute", first["conversationId"], env=crew.env)
            assert muted.returncode == 0, muted.stderr
            again = await crew.wait(conv, await conv.structured(
                "kiro_spawn", conversation=first["conversationId"],
                message=_mcp("send_message", {"text": "Still here.", "channel": "team"}) + "\n!say again"))
        async with crew.core() as plain:
            spoofed = await plain.call("send_message", text="from nowhere")
        async with crew.core(session_key="kcs1-" + "0" * 32) as claiming:  # a key claimed, not proven
            forged = await claiming.call("send_message", text="trust me", channel="team")
        return {"first": first, "again": again, "spoofed": spoofed, "forged": forged}

    out = run_async(main())
    conversation = out["first"]["conversationId"]
    sent, filed, outside, not_mine, oversized = out["first"]["reply"]["text"].split("result: ")[1:6]
    assert sent.startswith("Message m") and "sent to channel team and recorded in the owner's feed." in sent
    assert filed.startswith("File sent: report.txt (the test report).") and "sent to channel team" in filed
    assert outside.startswith("error[path_outside_workspace]: ")
    assert not_mine.startswith("error[message_not_yours]: ")
    assert oversized.startswith("error[invalid_arguments]: text: ")
    twin = (crew.workspace / "twin.txt").read_text()
    assert "error[person_only_command]" in twin and twin.rstrip().endswith("exit 1"), twin
    assert "recorded in the owner's feed only: the owner has muted this session, so it was not sent to channel " \
           "team." in out["again"]["reply"]["text"]
    assert out["spoofed"][1] == "caller_unverified" and out["forged"][1] == "caller_unverified"

    assert [body["title"] for body in received] == ["CI", "File: report.txt"]
    assert f"_Sent by kirocrew session conversation {conversation} (agent kirocrew)_" in received[0]["text"]
    muted_message, file_message, message, _ = store.all_messages()
    assert (muted_message.outcome, file_message.outcome, message.outcome) == ("muted", "channel", "channel")
    assert message.sender == store.Sender("conversation", conversation, "kirocrew")
    cards = {card.id: card for card in feed.all_notifications()}
    assert cards[str(muted_message.notification)].priority == "passive"
    assert HOOK_TOKEN not in store.store_file().read_text() + feed.store_file().read_text()

    listed = run_kirocrew("messages", "list", env=crew.env)
    assert f"{message.id}" in listed.stdout and "[to team]" in listed.stdout and "[muted]" in listed.stdout
    assert "[secret set]" in run_kirocrew("messages", "channels", env=crew.env).stdout
    with crew.owner_http() as http:
        download = http.get(f"/api/messages/outbox/{file_message.file}")
        assert download.status_code == 200 and download.content == b"All 42 checks passed.\n"
        assert download.headers["content-disposition"] == 'attachment; filename="report.txt"'
        stranger = httpx.get(http.base_url.join(f"/api/messages/outbox/{file_message.file}"), timeout=30)
        assert stranger.status_code == 401 and b"42 checks" not in stranger.content  # the owner's only
        assert http.get("/api/messages/outbox/..%2Fmessages.json").status_code in (400, 404)
        bad = http.post("/api/messages/unmute", json={"sender": "everyone"})
        assert (bad.status_code, bad.json()["code"]) == (400, "bad_mute")
        assert http.post("/api/messages/unmute", json={"sender": f"conversation:{conversation}"}).json()["changed"]
        listing = http.get("/api/messages").json()
        assert listing["muted"] == [] and listing["messages"][0]["id"] == muted_message.id
    deleted = run_kirocrew("messages", "delete", file_message.id, env=crew.env)
    assert "deleted from the owner's feed; team cannot withdraw" in deleted.stdout, deleted.stderr
    assert file_message.id not in [m.id for m in store.all_messages()]
