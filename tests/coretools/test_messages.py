"""send_message, delete_message and file_send as their handlers see a call, against real peers.

The channels are real: a webhook is an HTTP server on 127.0.0.1, e-mail goes to aiosmtpd's SMTP
server on 127.0.0.1, and a hanging SMTP server is a socket that accepts and never answers. The
feed is the real notification store; the config, the secrets and the outbox are real files in the
test's crew home. (Through the host with a real session and MCP client: test_messages_e2e.py.)
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core.config import set_entry, set_value
from kirocrew_core.coretools.contract import CrewSession, ToolCall
from kirocrew_core.errors import KirocrewError
from kirocrew_core.messages import outbox, settings, store, tools
from kirocrew_core.notifications import store as feed

KEY = "kcs1-" + "5" * 32
HOOK_TOKEN = "T0KEN" + "q7Rz" * 6


def session(target: str = "conv-7", workspace: Path | None = None) -> CrewSession:
    return CrewSession(KEY, "conversation", target, agent="kirocrew", workspace=str(workspace) if workspace else None)


def call(handler: Any, args: dict[str, Any], who: CrewSession | None, origin: str = "session") -> str:
    name = handler.__name__
    result: str = asyncio.run(handler(args, ToolCall(name, who, None, "strict", origin)))  # type: ignore[arg-type]
    return result


def refused(handler: Any, args: dict[str, Any], who: CrewSession | None, origin: str = "session") -> KirocrewError:
    with pytest.raises(KirocrewError) as caught:
        call(handler, args, who, origin)
    return caught.value


# -- real peers -------------------------------------------------------------------------------------


class Webhook:
    """An HTTP server on 127.0.0.1 that records each POST and answers ``status``."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.status = 200
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                hook.posts.append((self.path, json.loads(body)))
                self.send_response(hook.status)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/services/{HOOK_TOKEN}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def webhook() -> Iterator[Webhook]:
    server = Webhook()
    yield server
    server.close()


@pytest.fixture
def hook(webhook: Webhook) -> Webhook:
    webhook.posts.clear()
    webhook.status = 200
    return webhook


@pytest.fixture(scope="module")
def smtp_server() -> Iterator[Any]:
    from aiosmtpd.controller import Controller
    from aiosmtpd.handlers import Message

    class Inbox(Message):
        def __init__(self) -> None:
            super().__init__()
            self.mails: list[Any] = []

        def handle_message(self, message: Any) -> None:
            self.mails.append(message)

    inbox = Inbox()
    with socket.socket() as probe:  # aiosmtpd's controller cannot listen on port 0: find a free one
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    controller.inbox = inbox  # type: ignore[attr-defined]
    yield controller
    controller.stop()


@pytest.fixture
def hanging_smtp() -> Iterator[int]:
    """A TCP socket on 127.0.0.1 that accepts connections and never says a word."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    yield listener.getsockname()[1]
    listener.close()


def webhook_channel(name: str, url: str, **fields: Any) -> None:
    set_entry("channels", name, {"kind": "webhook", **fields})
    settings.write_secret(name, url)


def smtp_channel(name: str, port: int, **fields: Any) -> None:
    set_entry("channels", name, {"kind": "email", "smtp_host": "127.0.0.1", "smtp_port": port, "security": "plain",
                                 "from_addr": "crew@example.org", "to": ["owner@example.org"], **fields})


# -- the feed, attribution, identity, governance --------------------------------------------------


def test_a_message_lands_in_the_feed_naming_its_session_and_never_its_key(isolated_homes):
    result = call(tools.send_message, {"text": "Build **green** on main.", "title": "CI"}, session())
    [message] = store.all_messages()
    assert result == f"Message {message.id} delivered to the owner's feed."
    assert (message.title, message.outcome, message.sender) == (
        "CI", "feed", store.Sender("conversation", "conv-7", "kirocrew"))
    [card] = feed.all_notifications()
    assert card.id == message.notification and card.title == "CI"
    assert card.source == feed.Source("conversation", "conv-7", "kirocrew")
    assert "Build **green** on main." in card.body
    assert f"Sent by kirocrew session conversation conv-7 (agent kirocrew) (message {message.id})" in card.body
    assert KEY not in store.store_file().read_text() and KEY not in feed.store_file().read_text()
    assert stat.S_IMODE(store.store_file().stat().st_mode) == 0o600


def test_a_message_without_a_title_is_titled_by_its_first_line_and_a_title_is_one_line(isolated_homes, smtp_server):
    call(tools.send_message, {"text": "\n  Deploy finished in 4 minutes\nDetails follow"}, session())
    assert store.all_messages()[0].title == "Deploy finished in 4 minutes"
    smtp_channel("mail", smtp_server.port)
    smtp_server.inbox.mails.clear()
    sent = call(tools.send_message, {"text": "x", "title": "Hi\r\nBcc: victim@example.org", "channel": "mail"},
                session())
    assert "sent to channel mail" in sent
    [mail] = smtp_server.inbox.mails
    assert mail["Subject"] == "[kirocrew] Hi Bcc: victim@example.org" and mail["Bcc"] is None


def test_an_unverified_caller_is_refused_and_nothing_is_recorded(isolated_homes):
    for handler, args in ((tools.send_message, {"text": "hi"}), (tools.file_send, {"path": "/etc/hostname"})):
        error = refused(handler, args, None, origin="person")
        assert error.code == "caller_unverified"
    assert not store.store_file().exists() and not feed.store_file().exists()


def test_governance_denying_messaging_refuses_and_an_unreadable_config_refuses_too(isolated_homes, tmp_path):
    from kirocrew_core import home

    (tmp_path / "note.txt").write_text("hello")
    set_value("governance.messaging", "deny")
    assert refused(tools.send_message, {"text": "blocked"}, session()).code == "governance_denied"
    assert refused(tools.file_send, {"path": str(tmp_path / "note.txt")},
                   session(workspace=tmp_path)).code == "governance_denied"
    home.config_file().write_text("governance = [broken\n")
    assert refused(tools.send_message, {"text": "blocked"}, session()).code == "governance_denied"
    assert not store.store_file().exists() and not feed.store_file().exists()


BAD = [
    ({"text": "x" * (store.TEXT_MAX_CHARS + 1)}, "text_too_long"),
    ({"text": "   "}, "text_required"),
    ({"text": "hi", "title": "t" * (store.TITLE_MAX_CHARS + 1)}, "title_too_long"),
    ({"text": "hi", "channel": "nowhere"}, "unknown_channel"),
    ({"text": "hi", "channel": "feed", "session": "origin"}, "bad_destination"),
]


@pytest.mark.parametrize("args, code", BAD)
def test_bad_input_is_refused_with_a_stable_code_and_changes_nothing(isolated_homes, args, code):
    import jsonschema

    assert refused(tools.send_message, args, session()).code == code
    assert not store.store_file().exists() and not feed.store_file().exists()
    if code in ("text_too_long", "title_too_long"):
        assert not jsonschema.Draft202012Validator(tools.SEND_MESSAGE_SCHEMA).is_valid(args)


def test_the_schemas_bound_every_field_and_refuse_unknown_ones():
    import jsonschema

    check = jsonschema.Draft202012Validator(tools.SEND_MESSAGE_SCHEMA).is_valid
    assert check({"text": "hi", "title": "t", "channel": "team", "session": "origin"})
    assert not check({"text": "hi", "session": "slack"})
    assert not check({"text": "hi", "channel": "../etc"})
    assert not check({"text": "hi", "caller_session": "cron:1"})
    assert not jsonschema.Draft202012Validator(tools.DELETE_MESSAGE_SCHEMA).is_valid({"message_id": "n1"})
    assert not jsonschema.Draft202012Validator(tools.FILE_SEND_SCHEMA).is_valid({"path": "x" * 4097})


# -- channels --------------------------------------------------------------------------------------


def test_a_webhook_channel_gets_a_slack_shaped_post_and_its_url_is_never_shown(isolated_homes, hook):
    webhook_channel("team", hook.url)
    result = call(tools.send_message, {"text": f"see {hook.url}", "title": "Nightly", "channel": "team"}, session())
    [message] = store.all_messages()
    assert result == f"Message {message.id} sent to channel team and recorded in the owner's feed."
    [(path, body)] = hook.posts
    assert path.endswith(HOOK_TOKEN) and set(body) == {"text", "title"} and body["title"] == "Nightly"
    assert body["text"].startswith("*Nightly*\nsee ")
    assert "_Sent by kirocrew session conversation conv-7" in body["text"]
    assert message.deliveries == (store.Delivery("team", message.id),)
    for text in (body["text"], result, store.store_file().read_text(), feed.store_file().read_text()):
        assert HOOK_TOKEN not in text  # the URL is the channel's secret: redacted wherever it is shown
    assert stat.S_IMODE(settings.secret_file("team").stat().st_mode) == 0o600


def test_the_default_channel_is_used_when_a_call_names_none_and_feed_keeps_it_home(isolated_homes, hook):
    webhook_channel("team", hook.url)
    set_value("messages.default_channel", "team")
    assert "sent to channel team" in call(tools.send_message, {"text": "one"}, session())
    assert "delivered to the owner's feed." in call(tools.send_message, {"text": "two", "channel": "feed"}, session())
    assert [body["text"].splitlines()[1] for _, body in hook.posts] == ["one"]


def test_a_failing_webhook_falls_back_to_the_feed_and_says_so_plainly(isolated_homes, hook):
    webhook_channel("team", hook.url)
    hook.status = 500
    result = call(tools.send_message, {"text": "disk full", "channel": "team"}, session())
    [message] = store.all_messages()
    assert result == (f"\u26a0\ufe0f Channel team unavailable (webhook channel team answered HTTP 500): message "
                      f"{message.id} delivered to the owner's feed only (NOT to channel team).")
    assert message.outcome == "fallback" and message.deliveries == ()
    assert "Not delivered beyond this feed: webhook channel team answered HTTP 500." in feed.all_notifications()[0].body


def test_a_webhook_channel_without_its_url_falls_back_naming_the_command_that_sets_it(isolated_homes):
    set_entry("channels", "team", {"kind": "webhook"})
    result = call(tools.send_message, {"text": "x", "channel": "team"}, session())
    assert "NOT to channel team" in result and "kirocrew messages secret team" in result


def test_an_email_channel_delivers_through_a_real_smtp_server(isolated_homes, smtp_server):
    smtp_channel("mail", smtp_server.port)
    smtp_server.inbox.mails.clear()
    result = call(tools.send_message, {"text": "Weekly report is ready.", "title": "Report", "channel": "mail"},
                  session())
    [message] = store.all_messages()
    assert result == f"Message {message.id} sent to channel mail and recorded in the owner's feed."
    [mail] = smtp_server.inbox.mails
    assert mail["Subject"] == "[kirocrew] Report" and mail["To"] == "owner@example.org"
    assert mail["X-Kirocrew-Message"] == message.id
    assert message.deliveries[0].delivery_id == mail["Message-ID"].strip()
    body = mail.get_payload(decode=True).decode()
    assert "Weekly report is ready." in body and "Sent by kirocrew session conversation conv-7" in body


def test_starttls_is_required_unless_the_owner_chose_plain_and_a_password_never_goes_in_the_clear(
        isolated_homes, smtp_server):
    smtp_channel("tls", smtp_server.port, security="starttls")
    smtp_channel("leaky", smtp_server.port, username="crew")
    smtp_server.inbox.mails.clear()
    tls = call(tools.send_message, {"text": "x", "channel": "tls"}, session())
    assert "NOT to channel tls" in tls and "SMTPNotSupportedError" in tls
    leaky = call(tools.send_message, {"text": "x", "channel": "leaky"}, session())
    assert "NOT to channel leaky" in leaky and "without TLS" in leaky
    assert smtp_server.inbox.mails == []


def test_starttls_and_a_login_with_the_channel_secret_reach_a_real_tls_smtp_server(isolated_homes, tmp_path,
                                                                                  monkeypatch):
    """A server that requires STARTTLS and authentication: the certificate is verified (its CA trusted through
    SSL_CERT_FILE, as a system root would be), the password comes from the channel's secret file, and a wrong
    one or an untrusted certificate falls back without the password in any text."""
    import ssl
    import subprocess

    from aiosmtpd.controller import Controller
    from aiosmtpd.handlers import Message
    from aiosmtpd.smtp import AuthResult
    from kirocrew_testing.requirements import executable

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([executable("openssl", apt="openssl"), "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=60)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    mails: list[Any] = []
    logins: list[tuple[bytes, bytes]] = []

    class Inbox(Message):
        def handle_message(self, message: Any) -> None:
            mails.append(message)

    def authenticator(server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> Any:
        logins.append((auth_data.login, auth_data.password))
        return AuthResult(success=auth_data.password == b"hunter2-smtp-pass")

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(Inbox(), hostname="127.0.0.1", port=port, tls_context=context, require_starttls=True,
                            authenticator=authenticator, auth_require_tls=True)
    controller.start()
    try:
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        smtp_channel("secure", port, security="starttls", username="crew", timeout_secs=3)
        assert "no password" in call(tools.send_message, {"text": "x", "channel": "secure"}, session())
        settings.write_secret("secure", "hunter2-smtp-pass")
        sent = call(tools.send_message, {"text": "over TLS", "channel": "secure"}, session())
        assert "sent to channel secure" in sent
        [mail] = mails
        assert "over TLS" in mail.get_payload(decode=True).decode()
        settings.write_secret("secure", "wrong-smtp-pass")
        refused_login = call(tools.send_message, {"text": "x", "channel": "secure"}, session())
        # (after the 535, smtplib tries AUTH LOGIN, which this server never answers: the timeout ends it)
        assert "NOT to channel secure" in refused_login and "wrong-smtp-pass" not in refused_login
        assert logins == [(b"crew", b"hunter2-smtp-pass"), (b"crew", b"wrong-smtp-pass")]
        monkeypatch.delenv("SSL_CERT_FILE")  # an untrusted certificate is refused, not sent to anyway
        untrusted = call(tools.send_message, {"text": "x", "channel": "secure"}, session())
        assert "NOT to channel secure" in untrusted and "SSLCertVerificationError" in untrusted
        assert len(mails) == 1
    finally:
        controller.stop()
    for text in (store.store_file().read_text(), feed.store_file().read_text()):
        assert "hunter2" not in text and "wrong-smtp-pass" not in text


def test_an_smtp_server_that_never_answers_does_not_hold_the_call_past_its_timeout(isolated_homes, hanging_smtp):
    smtp_channel("slow", hanging_smtp, timeout_secs=1)
    result = call(tools.send_message, {"text": "anyone?", "channel": "slow"}, session())
    assert "NOT to channel slow" in result and "timed out" in result
    assert store.all_messages()[0].outcome == "fallback"


# -- mute ------------------------------------------------------------------------------------------


def test_a_muted_session_is_recorded_in_the_feed_but_pushed_nowhere_and_is_told(isolated_homes, hook):
    webhook_channel("team", hook.url)
    store.mute("conversation:conv-7")
    result = call(tools.send_message, {"text": "spam", "channel": "team"}, session())
    [message] = store.all_messages()
    assert result == (f"Message {message.id} recorded in the owner's feed only: the owner has muted this session, "
                      "so it was not sent to channel team.")
    assert hook.posts == [] and message.outcome == "muted"
    assert feed.all_notifications()[0].priority == "passive"
    other = call(tools.send_message, {"text": "fine", "channel": "team"}, session(target="conv-8"))
    assert "sent to channel team" in other and len(hook.posts) == 1
    store.unmute("conversation:conv-7")
    assert "sent to channel team" in call(tools.send_message, {"text": "back", "channel": "team"}, session())


def test_a_mute_names_a_conversation_or_a_cron_job_and_nothing_else(isolated_homes):
    for bad in ("conv-7", "conversation:", "cron:XYZ", "session:a", "conversation:a/b"):
        with pytest.raises(KirocrewError) as caught:
            store.mute(bad)
        assert caught.value.code == "bad_mute"
    assert not store.store_file().exists()


# -- delete_message --------------------------------------------------------------------------------


def test_a_session_deletes_only_its_own_message_and_the_owner_any(isolated_homes):
    call(tools.send_message, {"text": "mine"}, session())
    call(tools.send_message, {"text": "theirs"}, session(target="conv-8"))
    theirs, mine = store.all_messages()
    error = refused(tools.delete_message, {"message_id": theirs.id}, session())
    assert error.code == "message_not_yours"
    assert refused(tools.delete_message, {"message_id": "m" + "0" * 16}, session()).code == "message_not_found"
    assert call(tools.delete_message, {"message_id": mine.id}, session()) == \
        f"Message {mine.id} deleted from the owner's feed."
    assert [m.id for m in store.all_messages()] == [theirs.id]
    assert [n.id for n in feed.all_notifications()] == [theirs.notification]
    assert "deleted" in call(tools.delete_message, {"message_id": theirs.id}, None, origin="person")
    assert store.all_messages() == [] and feed.all_notifications() == []
    stranger = refused(tools.delete_message, {"message_id": theirs.id}, None, origin="host")
    assert stranger.code == "caller_unverified"


def test_deleting_a_channel_message_says_the_channel_cannot_withdraw_it(isolated_homes, hook):
    webhook_channel("team", hook.url)
    call(tools.send_message, {"text": "oops", "channel": "team"}, session())
    [message] = store.all_messages()
    said = call(tools.delete_message, {"message_id": message.id}, session())
    assert said == f"Message {message.id} deleted from the owner's feed; team cannot withdraw what it delivered; " \
                   "that copy stays."


# -- file_send -------------------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


@pytest.fixture
def workspace(isolated_homes, tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def test_a_file_of_the_workspace_is_copied_owner_only_into_the_outbox_and_linked_from_the_feed(workspace, hook):
    (workspace / "chart.png").write_bytes(PNG)
    result = call(tools.file_send, {"path": str(workspace / "chart.png"), "description": "the weekly chart"},
                  session(workspace=workspace))
    [message] = store.all_messages()
    assert result == (f"File sent: chart.png (the weekly chart). Message {message.id} delivered to the owner's feed.")
    copy = outbox.outbox_dir() / f"{message.id}-chart.png"
    assert message.file == copy.name and copy.read_bytes() == PNG
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600 and stat.S_IMODE(outbox.outbox_dir().stat().st_mode) == 0o700
    [card] = feed.all_notifications()
    assert card.url == f"/api/messages/outbox/{copy.name}" and card.title == "File: chart.png"
    call(tools.delete_message, {"message_id": message.id}, session())
    assert not copy.exists()


def test_file_send_refuses_what_it_must_and_copies_nothing(workspace, tmp_path, monkeypatch):
    outside = tmp_path / "outside.txt"
    outside.write_text("not yours")
    (workspace / "link.txt").symlink_to(outside)
    (workspace / ".env").write_text("A=1")
    (workspace / ".ssh").mkdir()
    (workspace / ".ssh" / "config").write_text("Host x")
    (workspace / "db_password.txt").write_text("x")
    (workspace / "tool").write_bytes(b"\x7fELF\x02\x01\x01" + b"\x00" * 100)
    (workspace / "logo.png").write_text('<svg xmlns="http://www.w3.org/2000/svg"><script>x()</script></svg>')
    (workspace / "notes.md").write_text("token=" + "s3cr3t-" * 4)
    (workspace / "big.pdf").write_bytes(b"%PDF-1.7\n" + b"0" * 2048)
    (workspace / "dir").mkdir()
    monkeypatch.setattr(outbox, "FILE_MAX_BYTES", 1024)
    cases = {
        "relative.txt": "bad_path",
        str(outside): "path_outside_workspace",
        str(workspace / "link.txt"): "path_outside_workspace",
        str(workspace / ".env"): "path_sensitive",
        str(workspace / ".ssh" / "config"): "path_sensitive",
        str(workspace / "db_password.txt"): "path_sensitive",
        str(workspace / "tool"): "file_kind_refused",
        str(workspace / "logo.png"): "file_kind_refused",
        str(workspace / "notes.md"): "file_flagged",
        str(workspace / "big.pdf"): "file_too_large",
        str(workspace / "missing.txt"): "file_not_found",
        str(workspace / "dir"): "not_a_file",
    }
    got = {path: refused(tools.file_send, {"path": path}, session(workspace=workspace)).code for path in cases}
    assert got == cases
    assert refused(tools.file_send, {"path": str(outside)}, session()).code == "no_workspace"
    assert not outbox.outbox_dir().exists() and not store.store_file().exists()


def test_a_file_sent_by_e_mail_is_attached(workspace, smtp_server):
    smtp_channel("mail", smtp_server.port)
    smtp_server.inbox.mails.clear()
    (workspace / "chart.png").write_bytes(PNG)
    (workspace / "notes.txt").write_text("plain notes\n")
    for name in ("chart.png", "notes.txt"):
        sent = call(tools.file_send, {"path": str(workspace / name), "channel": "mail"}, session(workspace=workspace))
        assert sent.startswith(f"File sent: {name}.") and "sent to channel mail" in sent
    attached = [[(part.get_filename(), part.get_payload(decode=True)) for part in mail.walk() if part.get_filename()]
                for mail in smtp_server.inbox.mails]
    assert attached == [[("chart.png", PNG)], [("notes.txt", b"plain notes\n")]]


def test_kirocrew_own_files_are_fenced_even_inside_a_workspace(isolated_homes):
    from kirocrew_core import home

    home.ensure_crew_home()
    token = home.gateway_token_file()
    token.write_text("tok")
    error = refused(tools.file_send, {"path": str(token)}, session(workspace=home.crew_home()))
    assert error.code == "path_sensitive"


def test_flagged_content_goes_through_once_the_owner_approves_that_exact_content(workspace):
    notes = workspace / "notes.md"
    notes.write_text("api_key = " + "k" * 24 + "\n")
    error = refused(tools.file_send, {"path": str(notes)}, session(workspace=workspace))
    digest = error.message.split("approve ")[1].split("`")[0]
    assert error.code == "file_flagged" and len(digest) == 64
    store.approve(digest)
    assert call(tools.file_send, {"path": str(notes)}, session(workspace=workspace)).startswith("File sent: notes.md")
    notes.write_text("api_key = " + "j" * 24 + "\n")  # other content: a new approval is needed
    assert refused(tools.file_send, {"path": str(notes)}, session(workspace=workspace)).code == "file_flagged"


def test_content_decides_the_kind_not_the_name(tmp_path):
    assert outbox.kind_of(PNG) == "image" and outbox.kind_of(b"%PDF-1.4") == "pdf"
    assert outbox.kind_of(b"RIFF\x00\x00\x00\x00WAVEfmt ") == "audio"
    assert outbox.kind_of(b"\x00\x00\x00\x18ftypmp42") == "video"
    assert outbox.kind_of("plain text, ünïcode".encode()) == "text"
    assert outbox.kind_of(b"PK\x03\x04zip") is None and outbox.kind_of(b"\xff\xfe\x00\x00") is None
    assert outbox.kind_of(b"<?xml version='1.0'?><svg>") is None


def test_a_secret_value_never_reaches_a_store_even_when_a_session_sends_it(isolated_homes, hook):
    webhook_channel("team", hook.url)
    result = call(tools.send_message, {"text": f"the hook is {hook.url}", "channel": "team"}, session())
    assert HOOK_TOKEN not in result
    assert HOOK_TOKEN not in json.dumps([body for _, body in hook.posts])
    assert HOOK_TOKEN not in os.fspath(store.store_file().read_text())
