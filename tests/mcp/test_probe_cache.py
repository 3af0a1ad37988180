"""The probe cache and probe_all, against real fixture servers, with an injected clock."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kirocrew_testing.mcp_fixtures import stdio_server_argv
from kirocrew_mcp import probe
from kirocrew_mcp.probe import ProbeResult
from kirocrew_mcp.probe_cache import PROBE_TTL_SECS, ProbeCache, probe_all, probe_identity

TIMEOUT = 20.0
STDIO_MODULE = "kirocrew_testing.servers.stdio_server"


class Clock:
    """A monotonic clock a test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def _fresh_ledger() -> Iterator[None]:
    probe.reset_unresolvable_warnings()
    yield
    probe.reset_unresolvable_warnings()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cache(clock: Clock) -> ProbeCache:
    return ProbeCache(clock=clock)


def stdio_spec(*options: str, **extra: Any) -> dict[str, Any]:
    argv = stdio_server_argv(*options)
    return {"command": argv[0], "args": argv[1:], **extra}


def shell_spec(script: str, **extra: Any) -> dict[str, Any]:
    prelude = f'PY="{sys.executable}"; MOD={STDIO_MODULE}; '
    return {"command": "/bin/sh", "args": ["-c", prelude + script], **extra}


def one(cache: ProbeCache, name: str, spec: dict[str, Any], **kwargs: Any) -> ProbeResult:
    [(got, result)] = probe_all({name: spec}, cache=cache, timeout=kwargs.pop("timeout", TIMEOUT), **kwargs)
    assert got == name
    return result


def test_a_result_is_served_until_the_ttl_then_reads_outdated_with_its_tools(
    cache: ProbeCache, clock: Clock,
) -> None:
    spec = stdio_spec("--tools", "3")
    stored = one(cache, "fx", spec)
    assert stored.status == "ok"

    clock.now += PROBE_TTL_SECS - 1
    assert cache.get("fx", spec) == stored

    clock.now += 2
    outdated = cache.get("fx", spec)
    assert outdated is not None
    assert outdated.status == "outdated"
    assert outdated.tools == ("tool_1", "tool_2", "tool_3")
    assert outdated.probed_at == stored.probed_at


def test_a_failed_probe_of_the_same_spec_keeps_the_last_tools(cache: ProbeCache, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    spec = shell_spec(f'if [ -e "{broken}" ]; then echo "cannot start" >&2; exit 1; fi; exec "$PY" -m $MOD --tools 2')
    good = one(cache, "fx", spec)
    assert good.status == "ok"

    broken.touch()
    failed = one(cache, "fx", spec)

    assert failed.status == "error"
    assert "cannot start" in failed.error
    assert failed.tools == ("tool_1", "tool_2")
    assert failed.server_info == good.server_info
    assert failed.probed_at == good.probed_at  # when those tools were last seen
    assert cache.get("fx", spec) == failed


def test_needs_auth_also_keeps_the_last_tools(
    cache: ProbeCache, start_mcp_http_server: Callable[..., str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = start_mcp_http_server("--require-header", "X-Tenant=acme", "--names", "search,fetch")
    spec = {"url": url, "headers": {"X-Tenant": "${FIXTURE_TENANT}"}}
    monkeypatch.setenv("FIXTURE_TENANT", "acme")
    assert one(cache, "web", spec).status == "ok"

    monkeypatch.delenv("FIXTURE_TENANT")
    refused = one(cache, "web", spec)

    assert refused.status == "needs_auth"
    assert refused.tools == ("search", "fetch")


def test_a_failure_under_an_edited_spec_does_not_inherit_the_old_tools(cache: ProbeCache) -> None:
    one(cache, "fx", stdio_spec("--tools", "2"))

    failed = one(cache, "fx", stdio_spec("--exit-during-handshake"))

    assert failed.status == "error"
    assert failed.tools == ()


def test_an_edited_spec_reads_as_never_probed(cache: ProbeCache) -> None:
    spec = stdio_spec("--tools", "1")
    one(cache, "fx", spec)

    assert cache.get("fx", stdio_spec("--tools", "2")) is None
    assert cache.get("other", spec) is None
    assert cache.get("fx", spec) is not None


def test_fields_that_do_not_launch_the_server_keep_the_result(cache: ProbeCache) -> None:
    spec = stdio_spec("--tools", "1")
    one(cache, "fx", spec)

    edited = {**spec, "autoApprove": ["tool_1"], "disabledTools": ["x"], "timeout": 5, "disabled": False}

    assert probe_identity(edited) == probe_identity(spec)
    assert cache.get("fx", edited) is not None


def test_a_binary_that_appears_invalidates_the_cached_not_found(
    cache: ProbeCache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    spec = {"command": "late-mcp-server"}
    assert one(cache, "late", spec).status == "error"
    assert cache.get("late", spec) is not None

    script = bin_dir / "late-mcp-server"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m {STDIO_MODULE}\n')
    script.chmod(0o755)

    assert cache.get("late", spec) is None  # reads "unknown", so the dashboard re-probes it
    assert one(cache, "late", spec).status == "ok"


def test_a_missing_command_warns_once_across_probe_all_runs_and_again_once_dropped_and_re_added(
    cache: ProbeCache, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="kirocrew_mcp")
    missing = {"command": "kirocrew-absent-binary"}

    def warned() -> int:
        return len([r for r in caplog.records if "command not found: kirocrew-absent-binary" in r.getMessage()])

    probe_all({"gone": missing}, cache=cache, timeout=TIMEOUT)
    probe_all({"gone": missing}, cache=cache, timeout=TIMEOUT)
    assert warned() == 1

    probe_all({"fx": stdio_spec("--tools", "1")}, cache=cache, timeout=TIMEOUT)  # the config no longer names it
    probe_all({"gone": missing}, cache=cache, timeout=TIMEOUT)
    assert warned() == 2


def test_a_disabled_server_is_never_spawned_and_shows_its_last_tools(cache: ProbeCache, tmp_path: Path) -> None:
    marker = tmp_path / "spawned"
    spec = shell_spec(f'echo x >> "{marker}"; exec "$PY" -m $MOD --tools 2')
    one(cache, "fx", spec)
    marker.unlink()

    result = one(cache, "fx", {**spec, "disabled": True})

    assert result.status == "disabled"
    assert result.tools == ("tool_1", "tool_2")
    assert not marker.exists()
    stored = cache.get("fx", spec)
    assert stored is not None and stored.status == "ok"  # the disabled answer was not stored


def test_results_come_back_in_input_order(cache: ProbeCache) -> None:
    servers = [(f"s{i}", stdio_spec("--names", f"only_{i}")) for i in range(6)]

    results = probe_all(servers, cache=cache, concurrency=3, timeout=TIMEOUT)

    assert [name for name, _ in results] == [f"s{i}" for i in range(6)]
    assert [r.tools for _, r in results] == [(f"only_{i}",) for i in range(6)]


@pytest.mark.parametrize("concurrency", [1, 2, 3])
def test_probe_all_runs_at_most_concurrency_servers_at_once(
    cache: ProbeCache, tmp_path: Path, concurrency: int,
) -> None:
    live = tmp_path / "live"
    live.mkdir()
    counts = tmp_path / "counts"
    # Each server notes how many servers are alive as it starts, then hangs until the probe
    # gives up. The first wave all overlap, so the largest count is exactly the bound.
    spec = shell_spec(
        f'touch "{live}/$$"; ls "{live}" | wc -l >> "{counts}"; "$PY" -m $MOD --hang; rm -f "{live}/$$"'
    )

    results = probe_all([(f"s{i}", spec) for i in range(6)], cache=cache, concurrency=concurrency, timeout=1.0)

    assert all(r.error == "initialize: timed out after 1s" for _, r in results)
    seen = [int(line) for line in counts.read_text().split()]
    assert len(seen) == 6
    assert max(seen) == concurrency


def test_concurrency_below_one_is_refused(cache: ProbeCache) -> None:
    with pytest.raises(ValueError):
        probe_all({}, cache=cache, concurrency=0)


def test_a_probe_in_flight_is_reported_and_the_flag_clears(cache: ProbeCache) -> None:
    import asyncio

    from kirocrew_mcp.probe_cache import probe_all_async

    spec = stdio_spec("--tools", "1")
    seen: list[bool] = []

    async def run() -> None:
        task = asyncio.create_task(probe_all_async({"fx": spec}, cache=cache, timeout=TIMEOUT))
        while not task.done():
            seen.append(cache.is_probing("fx"))
            await asyncio.sleep(0.01)
        await task

    asyncio.run(run())

    assert True in seen
    assert cache.is_probing("fx") is False
