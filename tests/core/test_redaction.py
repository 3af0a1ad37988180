"""One vocabulary of secret names: the audit log, kirocrew-mcp's header guard, the conversations
server's error texts and the computer-use tree all redact by it."""

from __future__ import annotations

import pytest

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
