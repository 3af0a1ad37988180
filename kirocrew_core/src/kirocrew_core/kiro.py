"""The kiro-cli seam: find the binary and ask it what it is.

Not being installed is a state callers show, never a crash.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

BINARY_NAME = "kiro-cli"
PATH_ENV_VARS = ("KIRO_CLI_PATH", "KIROCREW_KIRO_BIN")
VERSION_TIMEOUT_SECS = 10.0
CACHE_TTL_SECS = 30.0


@dataclass(frozen=True)
class KiroBinary:
    """Where kiro-cli was found, or why it was not (``path`` is None then)."""

    path: Path | None
    source: str  # the env var that named it, "PATH", or "" when not found
    problem: str = ""

    @property
    def installed(self) -> bool:
        return self.path is not None


def resolve_kiro_cli() -> KiroBinary:
    """``KIRO_CLI_PATH``, then ``KIROCREW_KIRO_BIN``, then ``PATH``.

    An explicit variable that names a missing or non-executable file is
    reported as such rather than silently falling through to PATH: the user
    asked for that binary.
    """
    for var in PATH_ENV_VARS:
        value = os.environ.get(var, "").strip()
        if not value:
            continue
        candidate = Path(value).expanduser()
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return KiroBinary(candidate, var)
        found = shutil.which(value)
        if found:
            return KiroBinary(Path(found), var)
        return KiroBinary(None, var, f"{var}={value} is not an executable file")
    found = shutil.which(BINARY_NAME)
    if found:
        return KiroBinary(Path(found), "PATH")
    return KiroBinary(None, "", f"{BINARY_NAME} is not installed (not on PATH; set KIRO_CLI_PATH)")


_version_cache: dict[Path, tuple[float, str]] = {}


def kiro_cli_version(binary: KiroBinary | None = None) -> str:
    """The version ``kiro-cli --version`` reports, e.g. ``1.22.0`` (cached briefly).

    kiro-cli prints ``kiro-cli 1.22.0``; the program name is dropped.

    Raises :class:`FileNotFoundError` when kiro-cli is not installed and
    :class:`RuntimeError` when it does not answer sensibly.
    """
    binary = binary or resolve_kiro_cli()
    if binary.path is None:
        raise FileNotFoundError(binary.problem)
    cached = _version_cache.get(binary.path)
    now = time.monotonic()
    if cached and now - cached[0] < CACHE_TTL_SECS:
        return cached[1]
    try:
        done = subprocess.run(
            [str(binary.path), "--version"],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_SECS,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"{binary.path} --version did not answer in {VERSION_TIMEOUT_SECS:g}s") from exc
    except OSError as exc:
        raise RuntimeError(f"{binary.path} could not run: {exc.strerror or exc}") from exc
    first_line = (done.stdout or "").strip().splitlines()[:1]
    if done.returncode != 0 or not first_line:
        raise RuntimeError(f"{binary.path} --version exited {done.returncode}: {(done.stderr or '').strip()[:200]}")
    words = first_line[0].split()
    version = words[-1] if len(words) > 1 and words[0].startswith("kiro") else first_line[0]
    _version_cache[binary.path] = (now, version)
    return version
