"""Install the TypeScript MCP SDK the conformance tests drive our servers with, once, and reuse it.

``package.json`` and ``package-lock.json`` beside this file pin the SDK; ``npm ci`` installs
exactly that into ``node_modules/`` here (gitignored), with npm's download cache in
``.npm-cache/`` (gitignored too), so nothing touches the user's own npm files. A stamp holding the
lock file's hash marks a finished install: later runs reuse it, and a changed lock reinstalls.
An exclusive file lock makes pytest-xdist workers (and ``.ci/run``) take turns, so exactly one of
them installs and the others wait and reuse.

Standard library only: ``.ci/run`` calls it before the virtualenv exists::

    python3 tests/conformance/node_sdk.py

Tests call :func:`ensure_installed`, which returns why the SDK cannot be had (no node, no npm, a
failed install) instead of raising, so the caller can skip or fail through the requirement gate.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCK_FILE = HERE / "package-lock.json"
NODE_MODULES = HERE / "node_modules"
STAMP = NODE_MODULES / ".kirocrew-installed"
INSTALL_LOCK = HERE / ".npm-install.lock"
NPM_CACHE = HERE / ".npm-cache"
# Generous: it only stops a hung registry, it never measures anything.
INSTALL_TIMEOUT_SECS = 600


def _lock_digest() -> str:
    return hashlib.sha256(LOCK_FILE.read_bytes()).hexdigest()


def _installed(digest: str) -> bool:
    try:
        return STAMP.read_text(encoding="utf-8").strip() == digest
    except FileNotFoundError:
        return False


def ensure_installed() -> str | None:
    """``None`` once the pinned SDK is in ``node_modules/``; otherwise the reason it is not."""
    if shutil.which("node") is None:
        return "the TypeScript MCP client conformance tests need node (Node.js)"
    npm = shutil.which("npm")
    if npm is None:
        return "the TypeScript MCP client conformance tests need npm"
    digest = _lock_digest()
    if _installed(digest):
        return None
    with INSTALL_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be installing: wait, then reuse its work
        if _installed(digest):
            return None
        env = {**os.environ, "npm_config_cache": str(NPM_CACHE), "npm_config_update_notifier": "false"}
        try:
            done = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=HERE, env=env,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=INSTALL_TIMEOUT_SECS)
        except subprocess.TimeoutExpired:
            return f"npm ci for the conformance clients did not finish in {INSTALL_TIMEOUT_SECS} s"
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            return "npm ci for the conformance clients failed: " + " | ".join(tail)
        STAMP.write_text(digest + "\n", encoding="utf-8")
    return None


if __name__ == "__main__":
    problem = ensure_installed()
    if problem:
        sys.exit(f"node_sdk: {problem}")
    print("node_sdk: the TypeScript MCP SDK for the conformance tests is installed")
