#!/usr/bin/env python3
"""Set up a local virtual environment and run kirocrew: the README's two commands.

    python3 bootstrap.py serve [kirocrew serve options]   # install the open edition, start the gateway
    python3 bootstrap.py test  [pytest options]           # install everything + test extras, lint, run the suite

Both are idempotent: the venv (.venv) is created once, and the editable install
is redone only when a pyproject.toml changed or the other mode asked for more.
Test mode runs `ruff check`, `mypy` and import-linter's package contracts (configured in pyproject.toml)
before pytest and stops if one finds a problem; KIROCREW_SKIP_LINT=1 skips them for a quick local run.
Needs only Python 3.11+ with venv and pip.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
STAMP = VENV / ".kirocrew-install.json"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")

# The open edition is what the root pyproject.toml pins (kirocrew_core.plugins.OPEN_EDITION_MEMBERS in the code;
# a test keeps the two and the docs equal): bootstrap installs those members, found by their folders' names.
EXTRA_FOR_TESTS = ["kirocrew_testing", "kirocrew_plugins/companion"]
BUILD_TOOLS = ["hatchling>=1.25", "editables>=0.5"]


def open_edition() -> list[str]:
    """The open edition's member folders, in the order the root pyproject.toml's dependencies pin them."""
    import re
    import tomllib  # here: Python 3.11+ is checked before anything calls this

    folders = {}
    for pyproject in sorted([*ROOT.glob("*/pyproject.toml"), *ROOT.glob("kirocrew_plugins/*/pyproject.toml")]):
        name = tomllib.loads(pyproject.read_text())["project"]["name"]
        folders[name] = pyproject.parent.relative_to(ROOT).as_posix()
    pinned = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return [folders[re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0]] for requirement in pinned]


def _say(message: str) -> None:
    print(f"bootstrap: {message}", file=sys.stderr, flush=True)


def _fingerprint(mode: str) -> str:
    digest = hashlib.sha256(mode.encode())
    for pyproject in sorted(ROOT.glob("**/pyproject.toml")):
        if ".venv" in pyproject.parts:
            continue
        digest.update(str(pyproject.relative_to(ROOT)).encode())
        digest.update(pyproject.read_bytes())
    return digest.hexdigest()


def _installed_modes() -> dict[str, str]:
    try:
        return json.loads(STAMP.read_text())
    except (OSError, ValueError):
        return {}


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, cwd=ROOT)
    if done.returncode != 0:
        _say(f"failed ({done.returncode}): {' '.join(cmd)}")
        sys.exit(done.returncode)


def ensure_installed(mode: str) -> None:
    if sys.version_info < (3, 11):
        _say(f"Python 3.11+ is required, this is {sys.version.split()[0]}")
        sys.exit(2)
    if not PYTHON.exists():
        _say(f"creating {VENV.name}/")
        venv.EnvBuilder(with_pip=True, clear=False).create(VENV)
    modes = _installed_modes()
    wanted = _fingerprint(mode)
    if modes.get(mode) == wanted:
        return
    _say(f"installing ({mode}) into {VENV.name}/")
    pip = [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    _run(pip + BUILD_TOOLS)
    members = open_edition() + (EXTRA_FOR_TESTS if mode == "test" else [])
    args: list[str] = []
    for member in members:
        extra = "[testing]" if mode == "test" and member == "kirocrew_core" else ""
        args += ["-e", f"./{member}{extra}"]
    args += ["-e", "./[test]" if mode == "test" else "./"]
    # Build isolation off: every member builds with the hatchling just installed,
    # instead of seven throwaway build environments.
    _run(pip + ["--no-build-isolation"] + args)
    modes[mode] = wanted
    if mode == "test":
        modes["serve"] = _fingerprint("serve")  # the test install is a superset
    STAMP.write_text(json.dumps(modes))


# The linters test mode runs before pytest, in this order; each reads its configuration from pyproject.toml.
# (name, arguments to our interpreter, whether it reports on success: such output is shown only on a finding).
LINTERS = [
    ("ruff", ["-m", "ruff", "check", "--quiet"], False),
    ("mypy", ["-m", "mypy", "--no-error-summary"], False),
    # import-linter's package contracts (its console script's entry point, run with our interpreter).
    ("import-linter", ["-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
                       "--no-logo", "--cache-dir", ".venv/import_linter_cache"], True),
]


def lint() -> None:
    """Run each linter; on a finding, say which one failed and exit with its code (pytest does not run)."""
    if os.environ.get("KIROCREW_SKIP_LINT") == "1":
        _say("KIROCREW_SKIP_LINT=1: ruff, mypy and import-linter skipped")
        return
    for name, args, chatty in LINTERS:
        done = subprocess.run([str(PYTHON), *args], cwd=ROOT, capture_output=chatty, text=True)
        if done.returncode != 0:
            if chatty:
                sys.stdout.write(done.stdout)
                sys.stderr.write(done.stderr)
            _say(f"lint failed: {name} found problems (listed above); fix them before the tests run")
            sys.exit(done.returncode)


def precompile() -> None:
    """Byte-compile the members' sources (``__pycache__`` beside them, ignored by git) before the suite.

    The suite starts thousands of Python processes (hosts, relays, the fake kiro-cli, CLI twins).
    Under PYTHONDONTWRITEBYTECODE none of them writes a .pyc, so each compiles every kirocrew
    module it imports again (about 0.1 s of CPU per gateway start); on a clean clone the first
    workers all compile at once. compileall writes them regardless and skips what is up to date.
    """
    sources = [str(ROOT / member / "src") for member in open_edition() + EXTRA_FOR_TESTS
               if (ROOT / member / "src").is_dir()]
    subprocess.run([str(PYTHON), "-m", "compileall", "-q", *sources], cwd=ROOT, stdout=subprocess.DEVNULL)


def start_rewrite_warmup(pytest_args: list[str]) -> subprocess.Popen[bytes] | None:
    """Collect the tests once in the background while the linters run, so the workers load them rewritten.

    pytest rewrites every test module's asserts at import (about 10 s of CPU for this suite) and
    caches the result beside it only when bytecode may be written; under PYTHONDONTWRITEBYTECODE
    each xdist worker would rewrite the whole suite again. This one collection writes that cache
    (it is ignored by git, and pytest checks it against each source) on the core mypy leaves idle;
    the workers then only read it. Only the paths the run names are collected. Its outcome is not
    looked at: a collection error shows in the real run.
    """
    if os.environ.get("KIROCREW_SKIP_LINT") == "1":
        return None  # nothing to overlap with: the workers might as well rewrite for themselves
    paths = [arg for arg in pytest_args if not arg.startswith("-") and (ROOT / arg.split("::")[0]).exists()]
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    return subprocess.Popen([str(PYTHON), "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist", "-p",
                             "no:cacheprovider", *paths], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"serve", "test"}:
        print(__doc__, file=sys.stderr)
        return 2
    mode, rest = argv[0], argv[1:]
    ensure_installed(mode)
    if mode == "serve":
        cmd = [str(BIN / "kirocrew"), "serve", *rest]
    else:
        warmup = start_rewrite_warmup(rest)
        try:
            lint()
        except BaseException:  # a finding: no run follows
            if warmup is not None:
                warmup.kill()
                warmup.wait()
            raise
        precompile()
        if warmup is not None:
            warmup.wait()
        # Many tests wait on subprocesses, timers, sockets and browsers rather than compute: with one
        # worker more than the CPUs a 2-core machine still idled a fifth of the run, so two more keep
        # them busy; worksteal evens out the long tests at the end of the run.
        workers = os.environ.get("KIROCREW_TEST_WORKERS", str((os.cpu_count() or 1) + 2))
        cmd = [str(PYTHON), "-m", "pytest", "-n", workers, "--dist", "worksteal", *rest]
    os.chdir(ROOT)
    if os.name == "nt":  # pragma: no cover
        return subprocess.call(cmd)
    os.execv(cmd[0], cmd)
    return 0  # unreachable


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
