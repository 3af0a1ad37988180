"""The hooks store: one owner-only file, every change under the ``hooks`` lock, tokens kept as hashes.

The original erased ``register_hook`` entries when two writers saved; here several real processes
register at once and every entry lands.
"""

from __future__ import annotations

import json
from typing import Any
import subprocess
import sys

import pytest

from kirocrew_core.errors import BadInputError, KirocrewError, MalformedFileError
from kirocrew_core.webhooks import store
from kirocrew_testing.processes import release_together

REGISTER_CHILD = """
import sys
from kirocrew_core.webhooks import store
sys.stdin.readline()
for n in range(int(sys.argv[2])):
    store.register(f"{sys.argv[1]}-{n}", f"conv-{sys.argv[1]}", "context")
    store.record_delivery("shared", 0.0)
"""


def test_registrations_from_several_processes_at_once_all_land_and_no_count_is_lost() -> None:
    store.register("shared", "conv-shared", "counted by every child")
    children = [subprocess.Popen([sys.executable, "-c", REGISTER_CHILD, f"p{i}", "15"], text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE) for i in range(4)]
    release_together(children)
    hooks = {h.hook_id: h for h in store.all_hooks()}
    assert set(hooks) == {"shared"} | {f"p{i}-{n}" for i in range(4) for n in range(15)}
    assert hooks["shared"].deliveries == 60
    assert store.store_file().stat().st_mode & 0o777 == 0o600


def test_a_token_authenticates_only_its_own_hook_and_is_stored_only_as_a_hash() -> None:
    first = store.register("deploys", "conv-a", "Wait for the deploy")
    other = store.register("builds", "conv-a", "Wait for the build")
    text = store.store_file().read_text()
    assert first.token not in text and other.token not in text
    assert store.authenticate("deploys", first.token) == first.hook
    for hook_id, token in (("deploys", other.token), ("deploys", None), ("deploys", ""), ("missing", first.token),
                           ("../deploys", first.token), ("deploys", first.token + "x")):
        assert store.authenticate(hook_id, token) is None, (hook_id, token)


def test_the_same_conversation_rotates_its_token_and_another_cannot_take_the_hook() -> None:
    first = store.register("ci", "conv-a", "first")
    again = store.register("ci", "conv-a", "second")
    assert again.rotated and again.hook.created == first.hook.created and again.hook.rotated is not None
    assert store.authenticate("ci", first.token) is None and store.authenticate("ci", again.token) is not None
    with pytest.raises(BadInputError) as taken:
        store.register("ci", "conv-b", "mine now")
    assert taken.value.code == "hook_taken"
    assert store.get("ci").conversation_id == "conv-a" and store.get("ci").context_summary == "second"


@pytest.mark.parametrize("hook_id", ["", "-leading-dash", "a/b", "a b", "x" * 501, "é", "a\nb", "%2e%2e", None])
def test_hostile_hook_ids_are_refused_and_nothing_is_written(hook_id: object) -> None:
    with pytest.raises(BadInputError) as refused:
        store.register(hook_id, "conv-a", "context")  # type: ignore[arg-type]
    assert refused.value.code == "invalid_hook_id"
    assert not store.store_file().exists()


def test_the_caps_and_the_context_bounds_refuse_with_codes() -> None:
    for n in range(store.MAX_PER_CONVERSATION):
        store.register(f"h{n}", "conv-a", "context")
    with pytest.raises(BadInputError) as many:
        store.register("one-more", "conv-a", "context")
    assert many.value.code == "too_many_hooks"
    store.register("h0", "conv-a", "rotating an existing one is not a new hook")
    for context in ("", "   ", "x" * (store.CONTEXT_MAX_CHARS + 1)):
        with pytest.raises(BadInputError) as bad:
            store.register("other", "conv-b", context)
        assert bad.value.code == "invalid_context"


def test_a_malformed_store_is_reported_and_never_overwritten() -> None:
    path = store.store_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    for content in ('{"version": 1, "hooks": {"a": {"conversation_id": "c"}}}', "{not json", '{"version": 9}'):
        path.write_text(content)
        with pytest.raises(MalformedFileError):
            store.register("new", "conv-a", "context")
        with pytest.raises(MalformedFileError):
            store.authenticate("a", "token")
        assert path.read_text() == content


def test_revoking_removes_only_that_hook_and_an_unknown_one_is_hook_not_found() -> None:
    kept = store.register("kept", "conv-a", "context")
    store.register("gone", "conv-a", "context")
    assert store.revoke("gone").hook_id == "gone"
    with pytest.raises(KirocrewError) as missing:
        store.revoke("gone")
    assert missing.value.code == "hook_not_found"
    assert [h.hook_id for h in store.all_hooks()] == ["kept"]
    assert store.authenticate("kept", kept.token) is not None
    assert store.record_delivery("gone", 1.0) is None
    document = json.loads(store.store_file().read_text())
    assert set(document["hooks"]) == {"kept"} and "token" not in json.dumps(document).replace("token_sha256", "")


def test_sessions_never_write_the_store_and_read_it_only_with_the_owners_say_so(plugin_manager: Any,
                                                                                  isolated_homes: Any) -> None:
    """A session that could rewrite the file would give itself another conversation's hook."""
    from kirocrew_core.gate.calls import Context, ToolCall
    from kirocrew_core.gate.engine import Policy
    from kirocrew_core.gate.rules import build_rule

    store.register("ci", "conv-a", "context")
    blanket = [build_rule(r, tier="owner", source="policy.toml") for r in (
        {"decision": "allow", "tool": "*"}, {"decision": "allow", "tool": "read", "path": "~/**"},
        {"decision": "allow", "tool": "write", "path": "~/**"}, {"decision": "allow", "tool": "shell"})]
    policy = Policy.build(blanket, None, pm=plugin_manager)
    where = Context("unrestricted", "kirocrew", str(isolated_homes.user_home), str(isolated_homes.user_home))
    path = str(store.store_file())
    read = policy.decide(ToolCall("read", None, {"path": path}), where, ())
    write = policy.decide(ToolCall("write", None, {"path": path}), where, ())
    shell = policy.decide(ToolCall("shell", None, {"command": f"cat {path}"}), where, ())
    assert (read.decision, write.decision, shell.decision) == ("ask", "deny", "ask")


def test_registered_hooks_keep_a_host_started_on_demand_busy_so_it_stays_up_to_receive_them() -> None:
    from kirocrew_core.webhooks import service

    assert service.busy() is None
    store.register("ci", "conv-a", "context")
    store.register("deploys", "conv-b", "context")
    assert service.busy() == "2 webhook(s) registered"
    store.revoke("ci")
    store.revoke("deploys")
    assert service.busy() is None
    store.store_file().write_text("{broken")
    assert service.busy() is None  # a store that cannot be read keeps nothing up
