"""Session identity: the registry, the signed pid sidecar and the strict resolver, on real process trees.

Each tree is ``sh`` (what the key is bound to) with a ``sleep`` child standing for the relay
kiro-cli started; the resolver reads their relationship from ``/proc``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from kirocrew_core import proc
from kirocrew_core.coretools.identity import (
    KEY_PATTERN,
    SessionRegistry,
    fingerprint,
    is_ancestor,
    read_regular_nofollow,
    session_launch,
)
from kirocrew_core.host.caller import CallerContext
from kirocrew_testing.core_sessions import ProcessTree as Tree

SUBKEY = b"s" * 32


@pytest.fixture
def tree(process_tree: Callable[[], Tree]) -> Tree:
    return process_tree()


@pytest.fixture
def other_tree(process_tree: Callable[[], Tree]) -> Tree:
    return process_tree()


def registry(tmp_path: Path, subkey: bytes | None = SUBKEY) -> SessionRegistry:
    return SessionRegistry(tmp_path / "sidecars", signing_key=lambda: subkey)


def caller(relay_pid: int, key: str = "", *, host_pid_env: int | None = None, verified: bool = True) -> CallerContext:
    return CallerContext(session_key=key, session_type="relay", relay_pid=relay_pid, host_pid=None, raw={},
                         host_pid_env=host_pid_env, peer_verified=verified)


def test_a_key_is_unguessable_and_names_nothing_about_its_target(tmp_path: Path) -> None:
    reg = registry(tmp_path)
    keys = {reg.issue("conversation", "conv-1") for _ in range(50)}
    assert len(keys) == 50 and all(KEY_PATTERN.match(key) for key in keys)
    assert not any("conv" in key for key in keys)
    assert all(fingerprint(key) != key and key not in fingerprint(key) for key in keys)


def test_a_relay_under_the_bound_kiro_cli_resolves_to_its_session(tmp_path: Path, tree: Tree) -> None:
    reg = registry(tmp_path)
    key = reg.issue("conversation", "conv-1", agent="kirocrew", workspace="/w")
    assert reg.bind_pid(key, tree.parent)
    session = reg.resolve_strict(caller(tree.child, key))
    assert session is not None and (session.target_id, session.agent, session.workspace) == ("conv-1", "kirocrew", "/w")
    assert reg.resolve_lenient(caller(tree.child, key)) == session


def test_a_live_key_copied_into_a_process_that_is_not_a_descendant_resolves_to_nothing(
        tmp_path: Path, tree: Tree, other_tree: Tree) -> None:
    reg = registry(tmp_path)
    key = reg.issue("conversation", "conv-1")
    reg.bind_pid(key, tree.parent)
    assert reg.resolve_strict(caller(other_tree.child, key)) is None  # another tree holding the key
    assert reg.resolve_strict(caller(os.getpid(), key)) is None  # the process that issued it
    assert reg.resolve_lenient(caller(other_tree.child, key)) is None  # no weaker source either


def test_a_caller_whose_pid_the_kernel_did_not_confirm_resolves_to_nothing(tmp_path: Path, tree: Tree) -> None:
    reg = registry(tmp_path)
    key = reg.issue("conversation", "conv-1")
    reg.bind_pid(key, tree.parent)
    assert reg.resolve_strict(caller(tree.child, key, verified=False)) is None
    assert reg.resolve_strict(None) is None


def test_an_unbound_or_revoked_key_resolves_to_nothing_and_its_sidecar_is_gone(tmp_path: Path, tree: Tree) -> None:
    reg = registry(tmp_path)
    key = reg.issue("conversation", "conv-1")
    assert reg.resolve_strict(caller(tree.child, key)) is None  # issued, its kiro-cli not started yet
    reg.bind_pid(key, tree.parent)
    sidecar = tmp_path / "sidecars" / f"session_pid_{tree.parent}.txt"
    assert sidecar.read_text() == key and (sidecar.stat().st_mode & 0o777) == 0o600
    assert ((tmp_path / "sidecars").stat().st_mode & 0o777) == 0o700
    reg.revoke(key)
    assert reg.get(key) is None and not sidecar.exists()
    assert reg.resolve_strict(caller(tree.child, key)) is None
    assert reg.resolve_strict(caller(tree.child, host_pid_env=tree.parent)) is None
    assert not reg.bind_pid(key, tree.parent)  # a revoked key cannot be bound again


def test_a_key_bound_to_a_pid_that_now_runs_another_process_resolves_to_nothing(tmp_path: Path, tree: Tree) -> None:
    reg = registry(tmp_path)
    key = reg.issue("conversation", "conv-1")
    reg.bind_pid(key, tree.parent)
    # What a reused pid looks like: the bound start id no longer matches the process there.
    binding = reg._live[key]
    reg._live[key] = type(binding)(binding.session, binding.pid, "1")
    assert reg.resolve_strict(caller(tree.child, key)) is None


def test_the_host_pid_route_resolves_through_a_signed_sidecar_without_the_key(tmp_path: Path, tree: Tree) -> None:
    reg = registry(tmp_path)
    key = reg.issue("conversation", "conv-1")
    reg.bind_pid(key, tree.parent)
    session = reg.resolve_strict(caller(tree.child, host_pid_env=tree.parent))
    assert session is not None and session.target_id == "conv-1"


def test_an_unsigned_or_garbled_sidecar_is_refused(tmp_path: Path, tree: Tree) -> None:
    reg = registry(tmp_path)
    key = reg.issue("conversation", "conv-1")
    reg.bind_pid(key, tree.parent)
    sig = tmp_path / "sidecars" / f"session_pid_{tree.parent}.sig"
    good = sig.read_text()
    sig.write_text("0" * 64)
    assert reg.resolve_strict(caller(tree.child, host_pid_env=tree.parent)) is None
    sig.unlink()
    assert reg.resolve_strict(caller(tree.child, host_pid_env=tree.parent)) is None
    sig.symlink_to(tmp_path / "elsewhere.sig")
    (tmp_path / "elsewhere.sig").write_text(good)
    assert reg.resolve_strict(caller(tree.child, host_pid_env=tree.parent)) is None  # never through a link
    sig.unlink()
    sig.write_text(good)
    assert reg.resolve_strict(caller(tree.child, host_pid_env=tree.parent)) is not None
    # Signed with another key (a host whose SEL key differs) is refused too.
    assert registry(tmp_path, b"t" * 32).resolve_strict(caller(tree.child, host_pid_env=tree.parent)) is None


def test_a_sidecar_copied_to_another_pid_is_refused(tmp_path: Path, tree: Tree, other_tree: Tree) -> None:
    reg = registry(tmp_path)
    key = reg.issue("conversation", "conv-1")
    reg.bind_pid(key, tree.parent)
    sidecars = tmp_path / "sidecars"
    for suffix in ("txt", "sig"):
        shutil.copy(sidecars / f"session_pid_{tree.parent}.{suffix}",
                    sidecars / f"session_pid_{other_tree.parent}.{suffix}")
    assert reg.verified_sidecar(other_tree.parent) is None  # the MAC binds the pid
    assert reg.resolve_strict(caller(other_tree.child, host_pid_env=other_tree.parent)) is None


def test_without_the_signing_key_nothing_is_published_and_only_the_injected_key_resolves(
        tmp_path: Path, tree: Tree) -> None:
    reg = registry(tmp_path, subkey=None)
    key = reg.issue("conversation", "conv-1")
    reg.bind_pid(key, tree.parent)
    assert not (tmp_path / "sidecars").exists() or not any((tmp_path / "sidecars").iterdir())
    assert reg.resolve_strict(caller(tree.child, host_pid_env=tree.parent)) is None
    assert reg.resolve_strict(caller(tree.child, key)) is not None


def test_two_sessions_each_resolve_to_themselves_never_to_each_other(
        tmp_path: Path, tree: Tree, other_tree: Tree) -> None:
    reg = registry(tmp_path)
    parent, child = reg.issue("conversation", "parent"), reg.issue("conversation", "child")
    reg.bind_pid(parent, tree.parent)
    reg.bind_pid(child, other_tree.parent)
    assert reg.resolve_strict(caller(other_tree.child, child)).target_id == "child"  # type: ignore[union-attr]
    assert reg.resolve_strict(caller(tree.child, parent)).target_id == "parent"  # type: ignore[union-attr]
    assert reg.resolve_strict(caller(other_tree.child, parent)) is None  # the child holding its parent's key


def test_a_host_start_sweeps_every_sidecar_it_did_not_publish(tmp_path: Path, tree: Tree) -> None:
    old = registry(tmp_path)
    old.bind_pid(old.issue("conversation", "before"), tree.parent)
    (tmp_path / "sidecars" / "unrelated.txt").write_text("kept")
    fresh = registry(tmp_path)
    kept = fresh.issue("conversation", "now")
    fresh.bind_pid(kept, os.getpid())
    assert fresh.sweep_sidecars() == 2
    assert sorted(p.name for p in (tmp_path / "sidecars").iterdir()) == sorted(
        ["unrelated.txt", f"session_pid_{os.getpid()}.txt", f"session_pid_{os.getpid()}.sig"])


def test_the_hardened_read_refuses_links_large_files_and_non_utf8(tmp_path: Path) -> None:
    (tmp_path / "ok").write_text("kcs1-x")
    (tmp_path / "big").write_bytes(b"a" * 5000)
    (tmp_path / "bin").write_bytes(b"\xff\xfe")
    (tmp_path / "link").symlink_to(tmp_path / "ok")
    (tmp_path / "dir").mkdir()
    assert read_regular_nofollow(tmp_path / "ok") == "kcs1-x"
    for name in ("big", "bin", "link", "dir", "missing"):
        assert read_regular_nofollow(tmp_path / name) is None, name


def test_ancestry_is_read_from_the_kernel(tree: Tree) -> None:
    assert is_ancestor(tree.parent, tree.child)
    assert is_ancestor(os.getpid(), tree.child)
    assert not is_ancestor(tree.child, tree.parent)
    assert not is_ancestor(tree.child, tree.child)


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
    assert exported == own  # the process the sidecar names exports its own pid, through exec
