"""Skip a test whose system prerequisite is missing — except where the prerequisite is promised.

Locally a missing package (bubblewrap, Xvfb, AT-SPI) is a visible skip. ``.ci/run`` installs
every one of them and sets ``KIROCREW_REQUIRE_SYSTEM_DEPS=1``, so there the same gap fails
loudly instead of silently skipping a feature that should work.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIRE_ENV = "KIROCREW_REQUIRE_SYSTEM_DEPS"


def unavailable(reason: str) -> NoReturn:
    """Skip with ``reason``, or fail with it when the environment promises the prerequisite."""
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1: this environment must provide it)", pytrace=False)
    pytest.skip(reason)


def executable(name: str, *, apt: str, also: tuple[str, ...] = ()) -> str:
    """The path of the system program ``name`` (or of the first of ``also`` found), or :func:`unavailable`.

    Every test that needs a program from a Debian package asks through here, so a missing one is a
    visible skip on a bare machine and a failure under ``.ci/run`` — never a silent pass or a wrong verdict.
    """
    import shutil

    for candidate in (name, *also):
        found = shutil.which(candidate)
        if found:
            return found
    unavailable(f"needs {name} (apt: {apt}; .ci/run installs it)")


def without_file_privileges(argv: list[str]) -> list[str]:
    """``argv`` run so that file permissions apply to it, even when the tests run as root.

    As root it runs under ``setpriv`` with ``CAP_DAC_OVERRIDE`` and ``CAP_DAC_READ_SEARCH`` dropped
    from the bounding set: still uid 0 (so it can reach the checkout wherever it lives), but a
    mode-000 file or directory is denied as it would be to any user. Otherwise ``argv`` unchanged.
    """
    if os.geteuid() != 0:
        return list(argv)
    setpriv = executable("setpriv", apt="util-linux")
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--", *argv]


NOBODY = 65534


def as_another_user(argv: list[str]) -> list[str]:
    """``argv`` run as uid/gid 65534 (``nobody``) through ``setpriv``, for tests of uid checks on sockets.

    Changing uid needs root: ``.ci/run`` runs as root (it installs packages with apt-get), so under
    ``KIROCREW_REQUIRE_SYSTEM_DEPS=1`` a non-root run fails instead of skipping, like a missing
    ``setpriv`` does.
    """
    setpriv = executable("setpriv", apt="util-linux")
    if os.geteuid() != 0:
        unavailable("acting as another user needs root (setpriv --reuid); .ci/run runs as root")
    return [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]
