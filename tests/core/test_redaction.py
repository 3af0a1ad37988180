"""One vocabulary of secret names: the audit log, kirocrew-mcp's header guard, the conversations
server's error texts and the computer-use tree all redact by it."""

from __future__ import annotations

import pytest
from kirocrew_testing.requirements import executable

from kirocrew_core import audit
from kirocrew_core.redaction import SECRET_NAME_WORDS, is_credential_name, is_secret_name

SECRET = "v4lue-that-must-not-leak"


@pytest.mark.parametrize("word", SECRET_NAME_WORDS)
def test_a_value_named_by_any_secret_word_is_redacted_by_every_redactor(word: str, isolated_homes) -> None:
    from kirocrew_computer.redact import redact
    from kirocrew_conversations.redact import redact_text

    key = f"my_{word}"
    assert is_secret_name(key) and is_credential_name(key.upper())
    assert audit.record("test.redaction", **{key: SECRET})["fields"][key] == "[redacted]"
    assert SECRET not in redact_text(f"{key}={SECRET}")
    assert SECRET not in redact(f"{key}: {SECRET}")


def test_ordinary_names_are_not_secret_and_hints_only_keep_values_from_leaving() -> None:
    for name in ("PATH", "HOME", "LANG", "server", "toolName", "status"):
        assert not is_secret_name(name) and not is_credential_name(name)
    for name in ("SESSION_ID", "OAUTH_URL", "GPG_KEY", "GH_PAT", "KIROCREW_HOME"):
        assert is_credential_name(name) and not is_secret_name(name)


def test_credential_shaped_values_are_redacted_from_conversation_errors_whatever_they_are_called() -> None:
    from kirocrew_conversations.redact import redact_text

    for value in ("ghp_" + "a" * 36, "xoxb-" + "1" * 12, "AKIA" + "A" * 16, "sk-" + "b" * 20):
        assert value not in redact_text(f"the tool said {value} and stopped", limit=500)


# -- the known values: kirocrew's own, the environment's, the session keys' shape ----------------------


def _printed(argv: list[str]) -> str:
    """What a command prints, as the cron runner turns its raw output into a stored result."""
    import subprocess

    from kirocrew_core.redaction import redact_secret_bytes, redact_secrets

    raw = subprocess.run(argv, capture_output=True, check=True, timeout=30).stdout
    return redact_secrets(redact_secret_bytes(raw).decode("utf-8", "replace"))


@pytest.mark.parametrize("tool", [["cat"], ["xxd", "-p"], ["xxd"], ["od", "-An", "-tx1"], ["hexdump", "-C"],
                                  ["base64"], ["base32"], ["grep", "-a", "."]])
def test_the_sel_key_and_the_owner_token_never_come_back_however_a_command_prints_them(tool, isolated_homes) -> None:
    from kirocrew_core import home
    from kirocrew_core.gateway.auth import load_or_create_token

    # od, base64, base32 (coreutils) and grep are essential packages; .ci/run installs xxd and hexdump.
    if tool[0] == "xxd":
        executable("xxd", apt="xxd")
    elif tool[0] == "hexdump":
        executable("hexdump", apt="bsdextrautils")
    token = load_or_create_token()
    audit.record("test.redaction")  # the log's first record makes its key
    key = home.audit_key_file().read_bytes()
    for path, value in ((home.audit_key_file(), key), (home.gateway_token_file(), token.encode())):
        shown = _printed([*tool, str(path)])
        flat = shown.replace(" ", "").replace("\n", "").lower()
        assert token not in shown and token[:16] not in shown
        for piece in (value.hex()[i:i + 16] for i in range(0, len(value.hex()) - 16, 8)):
            assert piece not in flat, (tool, shown)
        assert "<redacted>" in shown


def test_a_secret_named_variables_value_is_redacted_wherever_it_appears(isolated_homes, monkeypatch) -> None:
    from kirocrew_core.redaction import redact_secrets

    monkeypatch.setenv("ACME_DEPLOY_TOKEN", "s3cr3t-deploy-value-9")
    monkeypatch.setenv("ACME_CREDENTIALS_FILE", "/home/someone/.acme/credentials")  # a path: where, not what
    monkeypatch.setenv("SHORT_PASSWORD", "abc")  # too short to be told apart from ordinary text
    text = "ACME=s3cr3t-deploy-value-9 from /home/someone/.acme/credentials; abc"
    assert redact_secrets(text) == "ACME=<redacted> from /home/someone/.acme/credentials; abc"
    monkeypatch.setenv("ACME_DEPLOY_TOKEN", "another-deploy-value-7")  # the environment is read again
    assert redact_secrets("another-deploy-value-7") == "<redacted>"


def test_a_session_key_the_host_issues_is_redacted_by_its_shape() -> None:
    from kirocrew_core.coretools.identity import SessionRegistry
    from kirocrew_core.redaction import redact_secrets

    key = SessionRegistry().issue("conversation", "c1")
    assert redact_secrets(f"KIROCREW_SESSION_KEY={key}; then {key}") == (
        "KIROCREW_SESSION_KEY=<redacted>; then <redacted>")


def test_ordinary_text_and_hex_are_left_alone(isolated_homes) -> None:
    from kirocrew_core.gateway.auth import load_or_create_token
    from kirocrew_core.redaction import known_secrets, redact_secrets

    token = load_or_create_token()
    audit.record("test.redaction")
    text = ("commit 3f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f70 merged; sha256 " + "ab" * 32
            + "\n00000000: 0000 0000 0000 0000 0000 0000 0000 0000  ................")
    assert redact_secrets(text) == text
    assert token not in repr(known_secrets())  # a traceback or a log line never carries a value
