"""Session identity: the registry and the resolver, on real process trees.

Each tree is ``sh`` (what a key is bound to; it leads its own kernel session, as a kiro-cli does)
with a ``sleep`` child standing for a relay the kiro-cli started. The resolver reads their
relationship from the kernel (:mod:`kirocrew_core.processes`); the key a caller's block claims
never decides. The end-to-end attacks (a real host, real relays, the fake kiro-cli) are in
``test_identity_e2e.py``.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kirocrew_core import proc, processes
from kirocrew_core.coretools.identity import (
    KEY_PATTERN,
    SessionRegistry,
    contradiction,
    fingerprint,
    session_launch,
)
from kirocrew_core.host.caller import CallerContext
from kirocrew_core.processes import ProcessRef
from kirocrew_testing.core_sessions import ProcessTree as Tree
from kirocrew_testing.core_sessions import verified_caller as caller

# A host that is no ancestor of anything here: callers outside every session are the person.
ELSEWHERE = ProcessRef(pid=2**22 + 1, started=0.0)


@pytest.fixture
def tree(process_tree: Callable[[], Tree]) -> Tree:
    return process_tree()


@pytest.fixture
def other_tree(process_tree: Callable[[], Tree]) -> Tree:
    return process_tree()


def registry() -> SessionRegistry:
    return SessionRegistry(host=ELSEWHERE)


def until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture
def shell_pids() -> Iterator[Callable[[str, int], list[int]]]:
    """``shell_pids(script, n)``: run ``script`` under ``sh`` in a kernel session of its own (as a kiro-cli
    runs) and read the ``n`` pids it prints, one per line; every process it left is killed after the test."""
    started: list[tuple[subprocess.Popen[str], list[int]]] = []

    def run(script: str, count: int) -> list[int]:
        shell = proc.spawn(["/bin/sh", "-c", script], env=dict(os.environ), stdin=proc.DEVNULL, text=True)
        assert shell.stdout is not None
        pids = [int(shell.stdout.readline()) for _ in range(count)]
        started.append((shell, pids))
        return [shell.pid, *pids]

    yield run
    for shell, pids in started:
        proc.kill_pids(pids)
        proc.terminate(shell, reason="identity test shell")


def test_a_key_is_unguessable_and_names_nothing_about_its_target() -> None:
    reg = registry()
    keys = {reg.issue("conversation", "conv-1") for _ in range(50)}
    assert len(keys) == 50 and all(KEY_PATTERN.match(key) for key in keys)
    assert not any("conv" in key for key in keys)
    assert all(fingerprint(key) != key and key not in fingerprint(key) for key in keys)


def test_a_descendant_of_the_bound_kiro_cli_is_its_session_with_or_without_the_key(tree: Tree) -> None:
    reg = registry()
    key = reg.issue("conversation", "conv-1", agent="kirocrew", workspace="/w")
    assert reg.bind_pid(key, tree.parent)
    for claimed in (key, "", "kcs1-" + "0" * 32):  # the key it was given, none at all, a made-up one
        resolved = reg.resolve(caller(tree.child, claimed))
        assert resolved.origin == "session" and resolved.session is not None, claimed
        assert (resolved.session.target_id, resolved.session.agent, resolved.session.workspace) == (
            "conv-1", "kirocrew", "/w")
    assert reg.resolve_lenient(caller(tree.child)) == reg.resolve_strict(caller(tree.child))


def test_a_live_key_held_by_a_process_outside_the_session_proves_nothing(tree: Tree, other_tree: Tree) -> None:
    reg = registry()
    key = reg.issue("conversation", "conv-1")
    reg.bind_pid(key, tree.parent)
    thief = caller(other_tree.child, key)
    resolved = reg.resolve(thief)
    assert resolved.origin == "person" and resolved.session is None
    assert contradiction(thief, resolved) is not None  # what the host logs and audits
    assert contradiction(caller(tree.child, key), reg.resolve(caller(tree.child, key))) is None


def test_two_sessions_each_resolve_to_themselves_whatever_key_they_claim(tree: Tree, other_tree: Tree) -> None:
    reg = registry()
    first, second = reg.issue("conversation", "first"), reg.issue("conversation", "second")
    reg.bind_pid(first, tree.parent)
    reg.bind_pid(second, other_tree.parent)
    forged = caller(other_tree.child, first)  # the second session claiming the first one's key
    resolved = reg.resolve(forged)
    assert resolved.session is not None and resolved.session.target_id == "second"
    assert fingerprint(first) in (contradiction(forged, resolved) or "")
    assert reg.resolve_strict(caller(tree.child, second)).target_id == "first"  # type: ignore[union-attr]


def test_the_nearest_bound_ancestor_decides(shell_pids: Callable[[str, int], list[int]]) -> None:
    """A kiro-cli (bound) that a process of another session's tree started: its descendants are its own."""
    outer, inner, leaf = shell_pids('sh -c \'sleep 60 & echo $$; echo $!; wait\' & wait', 2)
    reg = registry()
    outer_key, inner_key = reg.issue("conversation", "outer"), reg.issue("conversation", "inner")
    reg.bind_pid(outer_key, outer)
    reg.bind_pid(inner_key, inner)
    assert reg.resolve_strict(caller(leaf)).target_id == "inner"  # type: ignore[union-attr]
    reg.revoke(inner_key)
    assert reg.resolve_strict(caller(leaf)).target_id == "outer"  # type: ignore[union-attr]


def test_a_process_re_parented_out_of_the_tree_is_still_its_session_while_it_runs(
        shell_pids: Callable[[str, int], list[int]]) -> None:
    """``(cmd &)``: the subshell exits and ``cmd`` is re-parented away, but stays in the kiro-cli's kernel session."""
    leader, orphan = shell_pids("(sleep 60 & echo $!); sleep 60", 1)
    until(lambda: not processes.is_ancestor(leader, orphan))  # out of the tree once the subshell exits...
    assert processes.session_id(orphan) == leader  # ...not out of the session
    reg = registry()
    key = reg.issue("conversation", "conv-1")
    reg.bind_pid(key, leader)
    resolved = reg.resolve(caller(orphan))
    assert resolved.origin == "session" and resolved.session is not None and resolved.session.key == key


def test_a_process_that_leaves_both_its_tree_and_its_kernel_session_is_the_person(
        shell_pids: Callable[[str, int], list[int]]) -> None:
    """The documented limit: ``setsid`` and a re-parent (a daemon) keep no trace of the session they came from."""
    leader, daemon = shell_pids("(setsid sleep 60 & echo $!); sleep 60", 1)
    until(lambda: processes.session_id(daemon) == daemon and not processes.is_ancestor(leader, daemon))
    reg = registry()
    reg.bind_pid(reg.issue("conversation", "conv-1"), leader)
    assert reg.resolve(caller(daemon)).origin == "person"


def test_a_descendant_of_the_host_through_no_session_is_nobody_not_the_person(tree: Tree) -> None:
    reg = SessionRegistry(host=processes.ref(os.getpid()))  # this test process stands for the host
    resolved = reg.resolve(caller(tree.child))
    assert resolved.origin == "host" and resolved.session is None
    key = reg.issue("conversation", "conv-1")
    reg.bind_pid(key, tree.parent)
    assert reg.resolve(caller(tree.child)).origin == "session"  # the nearer bound process decides


def test_a_caller_the_kernel_did_not_confirm_is_unverified(tree: Tree) -> None:
    reg = registry()
    reg.bind_pid(reg.issue("conversation", "conv-1"), tree.parent)
    unconfirmed = CallerContext("", "relay", tree.child, None, {}, peer_verified=False)
    assert reg.resolve(unconfirmed).origin == "unverified"
    assert reg.resolve(None).origin == "unverified"


def test_a_caller_whose_pinned_process_exited_or_whose_pid_names_another_is_gone(tree: Tree) -> None:
    reg = registry()
    reg.bind_pid(reg.issue("conversation", "conv-1"), tree.parent)
    pinned = caller(tree.child)
    assert pinned.relay_started is not None
    reused = CallerContext("", "relay", tree.child, None, {}, peer_verified=True,
                           relay_started=pinned.relay_started - 1)  # what a reused pid looks like
    assert reg.resolve(reused).origin == "gone" and reg.resolve_strict(reused) is None
    short = proc.spawn(["sleep", "0.2"], env=dict(os.environ), stdin=proc.DEVNULL, stdout=proc.DEVNULL,
                       stderr=proc.DEVNULL)  # no pipes left open when it is reaped
    pinned_short = caller(short.pid)
    assert reg.resolve(pinned_short).origin == "person"
    short.wait()
    assert reg.resolve(pinned_short).origin == "gone"


def test_an_unbound_revoked_or_reused_binding_resolves_to_no_session(tree: Tree) -> None:
    reg = registry()
    key = reg.issue("conversation", "conv-1")
    assert reg.resolve(caller(tree.child)).origin == "person"  # issued, its kiro-cli not bound yet
    reg.bind_pid(key, tree.parent)
    binding = reg._live[key]
    assert binding.process is not None
    reg._live[key] = type(binding)(binding.session, ProcessRef(binding.process.pid, binding.process.started - 5))
    assert reg.resolve(caller(tree.child)).origin == "person"  # bound to a pid that now runs another process
    reg._live[key] = binding
    assert reg.resolve(caller(tree.child)).origin == "session"
    reg.revoke(key)
    assert reg.get(key) is None and reg.resolve(caller(tree.child)).origin == "person"
    assert not reg.bind_pid(key, tree.parent)  # a revoked key cannot be bound again


def test_a_starting_host_removes_the_pid_sidecars_an_earlier_version_published(tmp_path: Path) -> None:
    directory = tmp_path / "session-pids"
    directory.mkdir()
    for name in ("session_pid_12.txt", "session_pid_12.sig", "unrelated.txt"):
        (directory / name).write_text("x")
    assert SessionRegistry.remove_legacy_sidecars(directory) == 2
    assert [p.name for p in directory.iterdir()] == ["unrelated.txt"]


def test_ancestry_and_start_times_are_read_from_the_kernel(tree: Tree) -> None:
    assert processes.is_ancestor(tree.parent, tree.child)
    assert processes.is_ancestor(os.getpid(), tree.child)
    assert not processes.is_ancestor(tree.child, tree.parent)
    assert not processes.is_ancestor(tree.child, tree.child)
    lineage = processes.lineage(tree.child)
    chain = lineage.links
    assert lineage.complete and processes.parent(chain[-1].pid) is None  # read up to a process with no parent
    assert [link.pid for link in chain[:3]] == [tree.child, tree.parent, os.getpid()]
    assert not processes.lineage(tree.child, depth=2).complete  # cut short: "could not see far enough"
    assert all(a.started >= b.started for a, b in zip(chain, chain[1:], strict=False))
    assert processes.parent(tree.child) == tree.parent
    token = processes.start_token(tree.child)
    assert token is not None and processes.same_process(tree.child, token) is True
    assert processes.same_process(tree.child, "1.00") is False
    assert processes.same_process(tree.child, "12345") is None  # an older marker's format: cannot tell


def test_the_launch_injects_the_key_and_the_host_pid_prefix_before_any_authority_launcher() -> None:
    from kirocrew_core.acp_runtime import AcpOptions

    base = AcpOptions(agent="kirocrew", launcher=("bwrap", "--", ), env={"KIROCREW_HOST_PID": "1", "A": "b"})
    launched = session_launch(base, "kcs1-" + "0" * 32)
    assert launched.env == {"A": "b", "KIROCREW_SESSION_KEY": "kcs1-" + "0" * 32}
    argv = launched.argv("kiro-cli")
    assert argv[:2] == ["/bin/sh", "-c"] and argv[3:] == ["sh", "bwrap", "--", "kiro-cli", "acp", "--agent", "kirocrew"]
    done = proc.run([*launched.argv("/bin/sh")[:4], "/bin/sh", "-c", 'echo "$KIROCREW_HOST_PID $$"'],
                    env={"PATH": os.environ.get("PATH", "")}, timeout=10, reason="prefix check")
    exported, own = done.stdout.decode().split()
    assert exported == own  # the process the key is bound to exports its own pid, through exec
