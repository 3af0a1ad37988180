"""Which messages count as Kiro slash commands, and the allowlist rule around them."""

from __future__ import annotations

import pytest
from kirocrew_core.errors import KirocrewError

from kirocrew_conversations.slash import check_allowed, check_announced, command_name, normalize_allowlist


@pytest.mark.parametrize(("text", "name"), [
    ("/clear", "clear"), ("  /model claude", "model"), ("\n\t/compact\nmore", "compact"), ("/", ""),
    ("//not-an-escape", "/not-an-escape"), ("\u2003/clear", "clear"),
    ("hello /clear", None), ("!say /clear", None), ("", None), ("   ", None),
])
def test_a_message_is_a_slash_command_when_its_first_non_whitespace_character_is_a_slash(text, name) -> None:
    assert command_name(text) == name


def test_only_an_allowed_command_passes_and_everything_else_is_refused() -> None:
    assert check_allowed("/compact now", ("compact",)) == "compact"
    assert check_allowed("plain text", ()) is None
    for text in ("/clear", " /compactx", "/", "//compact"):
        with pytest.raises(KirocrewError) as refused:
            check_allowed(text, ("compact",))
        assert refused.value.code == "slash_command_refused"


def test_the_allowlist_takes_only_commands_kiro_announced_and_a_command_must_still_be_announced() -> None:
    assert normalize_allowlist(["/compact", "help", "compact"], ["/compact", "/help"]) == ("compact", "help")
    for announced in (["/compact"], []):
        with pytest.raises(KirocrewError) as unknown:
            normalize_allowlist(["/clear"], announced)
        assert unknown.value.code == "unknown_slash_command"
    check_announced("compact", ["/compact"])
    with pytest.raises(KirocrewError) as gone:
        check_announced("compact", ["/help"])
    assert gone.value.code == "slash_command_refused"
