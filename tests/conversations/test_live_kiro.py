"""The scenario flows against a real, signed-in kiro-cli (marker ``live_kiro``).

Skipped, with the reason shown, unless a real kiro-cli is installed and signed in. They may
spend model quota; prompts are short and ask for exact answers. Everything else (state,
workspaces) lives under the test's temporary directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest



def ref(out: dict[str, str]) -> dict[str, str]:
    return {"conversationId": out["conversationId"], "runId": out["runId"]}


def _real_kiro_cli() -> tuple[str | None, str]:
    path = shutil.which("kiro-cli", path=os.environ.get("PATH"))
    if path is None:
        return None, "no kiro-cli on PATH"
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"kiro-cli does not run: {type(exc).__name__}"
    if "fake" in (version.stdout + version.stderr).lower() or version.returncode != 0:
        return None, "the kiro-cli on PATH is not a real one"
    try:
        whoami = subprocess.run([path, "whoami"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None, "kiro-cli whoami did not answer"
    if whoami.returncode != 0:
        return None, "kiro-cli is not signed in (kiro-cli login)"
    return path, ""


REAL_KIRO, WHY_NOT = _real_kiro_cli()
pytestmark = [
    pytest.mark.live_kiro,
    pytest.mark.skipif(REAL_KIRO is None, reason=f"live_kiro: needs a real, signed-in kiro-cli ({WHY_NOT})"),
]


@pytest.fixture
def live_env(fake_kiro_env: dict[str, str]) -> dict[str, str]:
    return {**fake_kiro_env, "KIRO_CLI_PATH": str(REAL_KIRO)}


def test_live_parallel_runs_a_context_dependent_follow_up_and_idempotent_results(conversations_client, run_async,
                                                                                tmp_path: Path, live_env):
    async def main() -> None:
        async with conversations_client(env=live_env) as client:
            caps = await client.call("kiro_capabilities", refresh=True)
            assert caps["kiroCli"]["version"] and caps["models"]
            a = await client.call("kiro_spawn", conversation="new", name="live-a", workspace=str(tmp_path),
                                  message="Reply with exactly the word: apricot")
            b = await client.call("kiro_spawn", conversation="new", name="live-b", workspace=str(tmp_path),
                                  message="Reply with exactly the word: blueberry")
            while True:
                done = await client.call("kiro_wait", targets=[ref(a), ref(b)], mode="all")
                if not done["waitExpired"]:
                    break
            assert [r["status"] for r in done["runs"]] == ["completed", "completed"]
            follow = await client.call("kiro_send", conversationId=a["conversationId"],
                                       message="Which word did you reply with last time? Answer with the word only.")
            while (waited := await client.call("kiro_wait", targets=[ref(follow)], mode="all"))["waitExpired"]:
                pass
            assert "apricot" in waited["runs"][0]["reply"]["text"].lower()
            first = await client.call("kiro_result", **ref(follow))
            assert first == await client.call("kiro_result", **ref(follow))

    run_async(main(), timeout=600)


def test_live_cancel_and_restart_recovery(conversations_client, run_async, tmp_path: Path, live_env):
    async def main() -> None:
        async with conversations_client(env=live_env) as client:
            run = await client.call("kiro_spawn", conversation="new", name="live-stop", workspace=str(tmp_path),
                                    message="Count slowly from 1 to 500, one number per line.")
            cancelled = await client.call("kiro_cancel", **ref(run))
            assert cancelled["status"] == "cancelled"
        async with conversations_client(env=live_env) as client:
            assert (await client.call("kiro_result", **ref(run)))["status"] == "cancelled"
            again = await client.call("kiro_delegate", conversation=run["conversationId"],
                                      message="Reply with exactly the word: done")
            assert again["run"]["status"] in ("completed", "needs_attention") or again["waitExpired"]

    run_async(main(), timeout=600)
