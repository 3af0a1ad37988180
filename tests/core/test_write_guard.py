"""The suite's write guard really catches writes outside the temporary directories."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path



OUTSIDE = Path("/var/kirocrew-write-guard-probe")



def test_a_write_outside_the_tmp_dirs_is_recorded(write_guard, tmp_path):
    target = OUTSIDE / "x.txt"
    with contextlib.suppress(OSError):
        open(target, "w")  # noqa: SIM115 - the attempt is what is audited
    found = [v for v in write_guard.violations if str(OUTSIDE) in v]
    write_guard.violations.clear()  # handled here: do not fail this test
    assert found == [f"open {target}"]


def test_reads_and_writes_inside_tmp_are_allowed(write_guard, tmp_path):
    (tmp_path / "a.txt").write_text("fine")
    os.mkdir(tmp_path / "d")
    os.replace(tmp_path / "a.txt", tmp_path / "d" / "b.txt")
    sqlite3.connect(tmp_path / "db.sqlite").close()
    with tempfile.NamedTemporaryFile() as fh:
        fh.write(b"x")
    shutil.rmtree(tmp_path / "d")  # removes relative names under an open dir fd
    open("/etc/hostname").close() if os.path.exists("/etc/hostname") else None
    assert write_guard.violations == []


def test_a_sqlite_database_outside_tmp_is_recorded(write_guard):
    with contextlib.suppress(sqlite3.Error):
        sqlite3.connect(OUTSIDE / "state.sqlite").close()
    found = [v for v in write_guard.violations if "state.sqlite" in v]
    write_guard.violations.clear()
    assert found == [f"sqlite3.connect {OUTSIDE / 'state.sqlite'}"]


def test_a_read_only_sqlite_uri_is_allowed_and_a_writable_one_outside_tmp_is_recorded(write_guard, tmp_path):
    database = tmp_path / "db.sqlite"
    sqlite3.connect(database).close()
    sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True).close()
    assert write_guard.violations == []
    with contextlib.suppress(sqlite3.Error):
        sqlite3.connect(f"{(OUTSIDE / 'uri.sqlite').as_uri()}?mode=rwc", uri=True).close()
    found = [v for v in write_guard.violations if "uri.sqlite" in v]
    write_guard.violations.clear()
    assert len(found) == 1
