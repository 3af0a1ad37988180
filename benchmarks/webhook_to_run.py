#!/usr/bin/env python3
"""An inbound webhook's POST → its run queued in the conversation, against a real ``kirocrew serve``.

    .venv/bin/python benchmarks/webhook_to_run.py [--runs 60]

Runs under a throwaway HOME with the fake kiro-cli as ``KIRO_CLI_PATH``: one conversation is
started through the owner's route and run once (its worker warm), hooks are registered for it in
the store (one per 15 deliveries, so no delivery meets the per-hook rate limit), then ``--runs``
deliveries are posted one after another. ``POST → 202`` is the figure: the route answers 202 only
once the run is in the conversations store (token check, body, duplicate window, bucket, the
``conversation_deliver`` hook, the SEL record and the store's count included), and each run is
checked to be there afterwards. Next to it, interleaved: a refused POST (wrong token, 401: the
token check alone), a duplicate (200: everything but the queueing) and ``GET /api/health`` (the
owner's round trip floor). Prints median/p90/min.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import tempfile
import time
from pathlib import Path

from _bench import fake_kiro_environment, row, serve_gateway

PER_HOOK = 15  # under the bucket's burst of 20: nothing here is rate-limited


def _run_rows(state: Path, conversation_id: str) -> list[tuple[str, str]]:
    with sqlite3.connect(f"file:{state / 'orchestrator-v1.sqlite'}?mode=ro", uri=True) as db:
        return db.execute("SELECT id, status FROM runs WHERE conversation_id = ? ORDER BY seq",
                          (conversation_id,)).fetchall()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args()
    import httpx

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = fake_kiro_environment(root, state_dir=True)
        os.environ.update({k: env[k] for k in ("HOME", "KIRO_HOME", "KIROCREW_HOME")})
        from kirocrew_core.webhooks import store

        with serve_gateway(env, root) as owner:
            started = owner.post("/api/conversations", json={"name": "bench", "workspace": str(root / "workspace"),
                                                             "message": "!say ready"})
            if started.status_code != 200:
                raise SystemExit(f"starting the conversation failed: {started.text}")
            conversation = started.json()["conversationId"]
            while _run_rows(root / "state", conversation)[-1][1] in ("queued", "running"):
                time.sleep(0.05)
            hooks = [store.register(f"bench-{n}", conversation, "benchmark")
                     for n in range(-(-args.runs // PER_HOOK))]
            base = str(owner.base_url)
            samples: dict[str, list[float]] = {"accepted": [], "refused": [], "duplicate": [], "health": []}
            with httpx.Client(base_url=base, timeout=60) as client:
                for n in range(args.runs):
                    hook = hooks[n // PER_HOOK]
                    body = json.dumps({"message": f"delivery {n}", "name": "bench"}).encode()
                    auth = {"Authorization": f"Bearer {hook.token}", "Content-Type": "application/json"}
                    start = time.perf_counter()
                    answer = client.post(f"/webhooks/{hook.hook.hook_id}", content=body, headers=auth)
                    samples["accepted"].append((time.perf_counter() - start) * 1000)
                    if answer.status_code != 202 or answer.json()["queued_as"] != "run":
                        raise SystemExit(f"delivery {n} was not queued: {answer.status_code} {answer.text}")
                    start = time.perf_counter()
                    again = client.post(f"/webhooks/{hook.hook.hook_id}", content=body, headers=auth)
                    samples["duplicate"].append((time.perf_counter() - start) * 1000)
                    start = time.perf_counter()
                    refused = client.post(f"/webhooks/{hook.hook.hook_id}", content=body,
                                          headers={**auth, "Authorization": "Bearer wrong"})
                    samples["refused"].append((time.perf_counter() - start) * 1000)
                    start = time.perf_counter()
                    owner.get("/api/health")
                    samples["health"].append((time.perf_counter() - start) * 1000)
                    if again.status_code != 200 or refused.status_code != 401:
                        raise SystemExit(f"duplicate {again.status_code}, refused {refused.status_code}")
            runs = _run_rows(root / "state", conversation)
            if len(runs) != 1 + args.runs:
                raise SystemExit(f"{len(runs) - 1} runs queued for {args.runs} deliveries")
    print(f"{args.runs} deliveries to one warm conversation over loopback; load average {os.getloadavg()[0]:.1f}")
    print(row("POST -> 202, run queued", samples["accepted"], width=36))
    print(row("POST duplicate -> 200", samples["duplicate"], width=36))
    print(row("POST wrong token -> 401", samples["refused"], width=36))
    print(row("GET /api/health (owner, floor)", samples["health"], width=36))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
