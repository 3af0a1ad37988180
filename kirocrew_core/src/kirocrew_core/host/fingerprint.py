"""The code fingerprint: which kirocrew code a process runs (standard library only: the relay computes it).

A relay compares its fingerprint with the host's; a host started from other code (an
upgrade, an edit in a source checkout) retires once idle instead of being mixed silently
with new relays. The fingerprint digests the interpreter and, for every ``kirocrew*``
package on ``sys.path``, each ``.py`` file's path, size and modification time: a stat per
file, no reads. ``KIROCREW_CODE_FINGERPRINT`` replaces it (a packager that knows its build
id, or a test that needs two codes).
"""

from __future__ import annotations

import os
import sys

try:  # the C digest alone: ``hashlib`` loads OpenSSL, ~2 ms of every relay start
    from _sha2 import sha256  # type: ignore[import-not-found,unused-ignore]  # Python 3.12+
except ImportError:
    try:
        from _sha256 import sha256  # type: ignore[import-not-found,no-redef,unused-ignore]  # Python 3.11
    except ImportError:
        from hashlib import sha256  # type: ignore[assignment,unused-ignore]

TYPE_CHECKING = False
if TYPE_CHECKING:
    from hashlib import _Hash

FINGERPRINT_ENV = "KIROCREW_CODE_FINGERPRINT"
PACKAGE_PREFIX = "kirocrew"


def code_fingerprint() -> str:
    """A short hex digest of the running interpreter and the kirocrew code it would import."""
    override = os.environ.get(FINGERPRINT_ENV, "").strip()
    if override:
        return override
    digest = sha256()
    digest.update(f"{os.path.realpath(sys.executable)}|{sys.version}\n".encode())
    seen: set[str] = set()
    for entry in sys.path:
        base = os.path.abspath(entry or ".")
        try:
            names = sorted(n for n in os.listdir(base) if n.startswith(PACKAGE_PREFIX) and "." not in n)
        except OSError:
            continue
        for name in names:
            if name in seen or not os.path.isfile(os.path.join(base, name, "__init__.py")):
                continue
            seen.add(name)  # the first on sys.path is the one imported
            _digest_tree(digest, os.path.join(base, name), name)
    return digest.hexdigest()[:24]


def _digest_tree(digest: _Hash, root: str, label: str) -> None:
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            try:
                info = os.stat(path)
            except OSError:
                continue
            relative = os.path.relpath(path, root)
            digest.update(f"{label}/{relative}|{info.st_size}|{info.st_mtime_ns}\n".encode())
