#!/usr/bin/env python3
"""Cost of one ``audit.record`` (append + fsync, then the head anchor's atomic replace) and of ``verify``.

    .venv/bin/python benchmarks/audit_record.py [--records 300]

Runs under a throwaway crew home. Prints the per-record latency (median/p90/max)
and the time ``audit.verify()`` takes over the whole log.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from _bench import row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kirocrew-bench-audit-") as tmp:
        os.environ["KIROCREW_HOME"] = str(Path(tmp) / "crew")
        from kirocrew_core import audit

        samples = []
        for i in range(args.records):
            start = time.perf_counter()
            audit.record("bench.audit", actor="owner", i=i, note="a typical small record")
            samples.append((time.perf_counter() - start) * 1000)
        print(row("audit.record (append + anchor)", samples, extremes=("max",)))
        verify_samples = []
        for _ in range(5):
            start = time.perf_counter()
            report = audit.verify()
            verify_samples.append((time.perf_counter() - start) * 1000)
        if not report.ok:
            sys.exit(f"verify failed: {report.reason}")
        print(row(f"audit.verify ({report.verified} records)", verify_samples))


if __name__ == "__main__":
    main()
