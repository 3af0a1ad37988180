"""What the benchmark scripts share: one results line, the CLI's argv, a throwaway fake-kiro environment.

Scripts run as ``python benchmarks/<name>.py``, so this directory is on ``sys.path`` and they
``from _bench import …``.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit


def row(label: str, samples: list[float], *, width: int = 34, fmt: str = "7.2f",
        extremes: Sequence[str] = ("min",)) -> str:
    """``label  median … ms   p90 … ms   min … ms`` (``extremes`` picks min and/or max)."""
    ordered = sorted(samples)
    p90 = ordered[int(0.9 * (len(ordered) - 1))]
    parts = [f"{label:<{width}} median {statistics.median(ordered):{fmt}} ms", f"p90 {p90:{fmt}} ms"]
    picks = {"min": ordered[0], "max": ordered[-1]}
    parts += [f"{name} {picks[name]:{fmt}} ms" for name in extremes]
    return "   ".join(parts)


def kirocrew_argv() -> list[str]:
    """The installed ``kirocrew`` next to this Python, or ``python -m`` from a bare checkout."""
    exe = Path(sys.executable).with_name("kirocrew")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "kirocrew_core"]


def fake_kiro_environment(root: Path, *, state_dir: bool = False) -> dict[str, str]:
    """A throwaway HOME, Kiro home and crew home under ``root`` with the fake kiro-cli as ``KIRO_CLI_PATH``."""
    fake = Path(sys.executable).with_name("fake-kiro-cli")
    if not fake.exists() or not Path(sys.executable).with_name("kirocrew").exists():
        raise SystemExit(f"no kirocrew/fake-kiro-cli next to {sys.executable}; run with the project's .venv python")
    (root / "home").mkdir()
    (root / "workspace").mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("KIRO_CONVERSATIONS_")}
    env.update(HOME=str(root / "home"), KIRO_HOME=str(root / "home" / ".kiro"), KIROCREW_HOME=str(root / "crew"),
               KIRO_CLI_PATH=str(fake))
    if state_dir:
        env["KIRO_CONVERSATIONS_STATE_DIR"] = str(root / "state")
    return env


class GatewayFailed(RuntimeError):
    """``kirocrew serve`` did not print its URL; the message holds its stderr."""


@contextlib.contextmanager
def serve_gateway(env: dict[str, str], root: Path, *, timeout: float = 60) -> Iterator[Any]:
    """A real ``kirocrew serve --port 0`` under ``env`` and an owner-authenticated httpx client to it."""
    import httpx

    from kirocrew_core import proc

    stderr_path = root / "serve.stderr"
    with stderr_path.open("w") as stderr:
        gateway = proc.spawn([*kirocrew_argv(), "serve", "--port", "0"], env=env, stderr=stderr, text=True)
        assert gateway.stdout is not None
        try:
            line = gateway.stdout.readline().strip()
            if "http://" not in line:
                raise GatewayFailed(f"serve printed no URL; stderr:\n{stderr_path.read_text()}")
            url = urlsplit(line[line.index("http://"):])
            token = parse_qs(url.query)["token"][0]
            with httpx.Client(base_url=f"{url.scheme}://{url.netloc}", headers={"Authorization": f"Bearer {token}"},
                              timeout=timeout) as client:
                yield client
        finally:
            proc.terminate(gateway, reason="benchmark done")


def time_gets(client: Any, path: str, count: int) -> list[float]:
    """``count`` sequential GETs of ``path``, in milliseconds each; any error status stops the run."""
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        response = client.get(path)
        samples.append((time.perf_counter() - start) * 1000)
        response.raise_for_status()
    return samples
