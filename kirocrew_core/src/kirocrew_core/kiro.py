"""The kiro-cli seam: find the binary and ask it what it is and which models it serves.

Not being installed is a state callers show, never a crash. The quick probes
here (``--version``, ``chat --list-models``) run synchronously with a timeout
and no stdin, in their own process group (kiro-cli is a launcher that forks),
and are cached briefly because the doctor, the dashboard and ``kiro_capabilities``
all ask at once. The long-lived ACP side lives in :mod:`kirocrew_core.acp_runtime`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kirocrew_core import home
from kirocrew_core.errors import KirocrewError

log = logging.getLogger(__name__)

BINARY_NAME = "kiro-cli"
PATH_ENV_VARS = ("KIRO_CLI_PATH", "KIROCREW_KIRO_BIN")
VERSION_TIMEOUT_SECS = 10.0
# Listing models may reach the service, so it gets longer than --version.
LIST_MODELS_TIMEOUT_SECS = 30.0
CACHE_TTL_SECS = 30.0
LIST_MODELS_ARGS = ("chat", "--list-models", "--format", "json")


class KiroNotInstalledError(KirocrewError, FileNotFoundError):
    """kiro-cli could not be found (a state to show; the message says where we looked)."""

    code = "kiro_cli_not_installed"


class KiroCliError(KirocrewError, RuntimeError):
    """kiro-cli ran but did not answer sensibly (exit status, timeout, unparseable output)."""

    code = "kiro_cli_failed"


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
    asked for that binary. Bare names are looked up on the augmented search
    path (:mod:`kirocrew_core.search_path`): kiro-cli installs to
    ``~/.local/bin``, which a host started by a launcher may not have on PATH.
    """
    from kirocrew_core.search_path import augmented_path

    search = augmented_path()
    for var in PATH_ENV_VARS:
        value = os.environ.get(var, "").strip()
        if not value:
            continue
        candidate = Path(value).expanduser()
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return KiroBinary(candidate, var)
        found = shutil.which(value, path=search)
        if found:
            return KiroBinary(Path(found), var)
        return KiroBinary(None, var, f"{var}={value} is not an executable file")
    found = shutil.which(BINARY_NAME, path=search)
    if found:
        return KiroBinary(Path(found), "PATH")
    return KiroBinary(None, "", f"{BINARY_NAME} is not installed (not on PATH; set KIRO_CLI_PATH)")


def require_kiro_cli(binary: KiroBinary | None = None) -> Path:
    """The binary's path, or :class:`KiroNotInstalledError` saying where we looked."""
    binary = binary or resolve_kiro_cli()
    if binary.path is None:
        raise KiroNotInstalledError(binary.problem)
    return binary.path


# -- running a quick probe ----------------------------------------------------


def _run_probe(path: Path, args: Sequence[str], timeout: float) -> subprocess.CompletedProcess[bytes]:
    """Run ``path args`` with the full environment (the augmented PATH), no stdin, killed as a group on timeout."""
    from kirocrew_core import proc
    from kirocrew_core.search_path import with_search_path

    argv = [str(path), *args]
    try:
        return proc.run(argv, env=with_search_path(os.environ), timeout=timeout, reason="probe")
    except subprocess.TimeoutExpired as exc:
        raise KiroCliError(f"{' '.join(argv)} did not answer in {timeout:g}s", code="kiro_cli_timeout") from exc


def _stderr_excerpt(done: subprocess.CompletedProcess[bytes]) -> str:
    return (done.stderr or b"").decode("utf-8", "replace").strip()[:200]


def _binary_signature(path: Path) -> tuple[str, int, int]:
    """Cache key part: a replaced binary (an upgrade) must not be reported from the cache."""
    try:
        st = path.stat()
    except OSError:
        return (str(path), -1, -1)
    return (str(path), st.st_mtime_ns, st.st_size)


_version_cache: dict[tuple[str, int, int], tuple[float, str]] = {}
_models_cache: dict[tuple[Any, ...], tuple[float, ModelCatalog]] = {}


def clear_caches() -> None:
    """Forget cached probe answers (after an upgrade or sign-in, and between tests)."""
    _version_cache.clear()
    _models_cache.clear()


# -- version --------------------------------------------------------------------


def kiro_cli_version(binary: KiroBinary | None = None) -> str:
    """The version ``kiro-cli --version`` reports, e.g. ``1.22.0`` (cached briefly).

    kiro-cli prints ``kiro-cli 1.22.0``; the program name is dropped.

    Raises :class:`KiroNotInstalledError` (a FileNotFoundError) when kiro-cli is
    not installed and :class:`KiroCliError` (a RuntimeError) when it does not
    answer sensibly.
    """
    path = require_kiro_cli(binary)
    key = _binary_signature(path)
    cached = _version_cache.get(key)
    now = time.monotonic()
    if cached and now - cached[0] < CACHE_TTL_SECS:
        return cached[1]
    done = _run_probe(path, ["--version"], VERSION_TIMEOUT_SECS)
    first_line = (done.stdout or b"").decode("utf-8", "replace").strip().splitlines()[:1]
    if done.returncode != 0 or not first_line:
        raise KiroCliError(f"{path} --version exited {done.returncode}: {_stderr_excerpt(done)}")
    words = first_line[0].split()
    version = words[-1] if len(words) > 1 and words[0].startswith("kiro") else first_line[0]
    _version_cache[key] = (now, version)
    return version


def version(binary: KiroBinary | None = None) -> str:
    """Alias of :func:`kiro_cli_version`."""
    return kiro_cli_version(binary)


# -- models ---------------------------------------------------------------------


@dataclass(frozen=True)
class KiroModel:
    """One entry of ``chat --list-models``; ``raw`` keeps every field kiro-cli sent."""

    model_id: str
    name: str = ""
    description: str = ""
    context_window_tokens: int | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)


@dataclass(frozen=True)
class ModelCatalog:
    """The models kiro-cli offers this account, and its default (None when not stated).

    The ids a live session advertises in ``models.availableModels`` remain the
    authority for what ``session/set_model`` accepts.
    """

    models: tuple[KiroModel, ...]
    default_model: str | None = None

    def ids(self) -> list[str]:
        return [m.model_id for m in self.models]


def _first_str(entry: Mapping[str, Any], *keys: str) -> str:
    for key in keys:
        value = entry.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def _parse_model(entry: Any) -> KiroModel | None:
    if isinstance(entry, str) and entry:
        return KiroModel(entry, entry)
    if not isinstance(entry, Mapping):
        return None
    model_id = _first_str(entry, "model_id", "modelId", "id")
    if not model_id:
        return None
    window = entry.get("context_window_tokens")
    return KiroModel(
        model_id=model_id,
        name=_first_str(entry, "model_name", "name", "modelName") or model_id,
        description=_first_str(entry, "description"),
        context_window_tokens=window if isinstance(window, int) and not isinstance(window, bool) else None,
        raw=dict(entry),
    )


def parse_model_list(payload: Any) -> ModelCatalog:
    """Both documented shapes: ``{"models": [...], "default_model": ...}`` and an older flat array.

    Entries without an id are skipped (logged); any other top-level shape is
    a :class:`KiroCliError`.
    """
    if isinstance(payload, Mapping) and isinstance(payload.get("models"), list):
        entries, default = payload["models"], payload.get("default_model")
    elif isinstance(payload, list):
        entries, default = payload, None
    else:
        raise KiroCliError("kiro-cli --list-models answered neither a model list nor {\"models\": [...]}",
                           code="kiro_cli_bad_output")
    models = []
    for entry in entries:
        model = _parse_model(entry)
        if model is None:
            log.warning("kiro-cli --list-models: skipping an entry without a model id: %.200r", entry)
            continue
        models.append(model)
    return ModelCatalog(tuple(models), default if isinstance(default, str) and default else None)


def list_models(binary: KiroBinary | None = None) -> ModelCatalog:
    """``kiro-cli chat --list-models --format json``, parsed (cached briefly).

    The cache is keyed on the binary and the Kiro home, since the answer depends
    on who is signed in there. Raises like :func:`kiro_cli_version`.
    """
    path = require_kiro_cli(binary)
    key = (*_binary_signature(path), str(home.kiro_home()))
    cached = _models_cache.get(key)
    now = time.monotonic()
    if cached and now - cached[0] < CACHE_TTL_SECS:
        return cached[1]
    done = _run_probe(path, LIST_MODELS_ARGS, LIST_MODELS_TIMEOUT_SECS)
    if done.returncode != 0:
        raise KiroCliError(f"{path} {' '.join(LIST_MODELS_ARGS)} exited {done.returncode}: {_stderr_excerpt(done)}")
    try:
        payload = json.loads(done.stdout or b"")
    except ValueError as exc:
        raise KiroCliError(f"{path} --list-models did not print JSON: {exc}", code="kiro_cli_bad_output") from exc
    catalog = parse_model_list(payload)
    _models_cache[key] = (now, catalog)
    return catalog
