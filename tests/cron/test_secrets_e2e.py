"""Secrets a session's command job prints never come back: a real host, the fake kiro-cli, real files.

The attack (issue 27): a session's cron commands read the owner token (``grep -rh . ~/.kiro/*/gateway.t*``),
the security event log's key (hex and base64), the environment (``set``: a secret-named variable,
the job's own session key) and an octal-escaped script that vetting cannot read; their output was
the job's last result, in ``cron.db``, in ``cron_list {"verbose": true}``. Now every copy is redacted:
the tools, the Cron page and its API, the notification feed, and the bytes of the database files.
A run whose reply repeats the token (a model repeating what a tool showed it) is redacted in the
conversations store too.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import sys
from pathlib import Path
from typing import Any

import pytest
from kirocrew_testing.browser import owner_http_client, serving_gateway
from kirocrew_testing.core_sessions import CrewHarness
from kirocrew_testing.fixtures import kirocrew_argv

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cron_e2e import SESSION_AGENT, cron_harness, cron_line, eventually, person

BOUND_SECS = 150.0
#: A secret-named variable of the host's environment, which its commands inherit.
SECRET_VARIABLE = "ACME_DEPLOY_TOKEN"


@pytest.fixture
def crew(fake_kiro_cli: Any, tmp_path: Path) -> CrewHarness:
    """The harness, its host's environment holding a secret-named variable."""
    return cron_harness(fake_kiro_cli, tmp_path, **{SECRET_VARIABLE: "deploy-" + secrets.token_hex(12)})


def _octal(script: str) -> str:
    return "".join(f"\\{ord(ch):03o}" for ch in script)


#: What the attacker's session schedules: each prints a secret in its own way.
ATTACKS = {
    "token": "grep -rh . $HOME/.kiro/*/gateway.t*",
    "key": " && ".join(f"{tool} $HOME/.kiro/*/audit/sel.k*" for tool in ("od -An -tx1", "base64", "cat")),
    "environment": "set",
    # The path in octal: vetting reads the command's text, and the text names nothing.
    "octal": f"printf '{_octal('cat $HOME/.kiro/crew/gateway.token; xxd -p $HOME/.kiro/crew/audit/sel.key')}' > leak.sh"
             " && sh leak.sh",
}


class Secrets:
    """The values that must not come back, and where one was found."""

    def __init__(self, token: str, key: bytes, variable: str) -> None:
        self.texts = {"owner token": token, "owner token (a part)": token[5:25], "SEL key (hex)": key.hex(),
                      "SEL key (hex, a part)": key.hex()[8:40], "SEL key (base64)": base64.b64encode(key).decode(),
                      "secret variable": variable, "session key": "kcs1-"}
        self.key = key

    def found_in(self, data: str | bytes) -> list[str]:
        if isinstance(data, bytes):
            found = [name for name, value in self.texts.items() if value.encode() in data]
            return found + (["SEL key (raw)"] if self.key in data or self.key[4:20] in data else [])
        flat = data.replace(" ", "").replace("\\n", "").replace("\n", "")
        return [name for name, value in self.texts.items() if value in data or value in flat]


def _cron_files() -> list[Path]:
    from kirocrew_core import home

    directory = home.state_dir("cron")
    return [directory / name for name in ("cron.db", "cron.db-wal", "cron.db-shm") if (directory / name).exists()]


def _history(job_id: str) -> list[tuple[str, str, str]]:
    from kirocrew_core import home
    from kirocrew_testing.browser import sqlite_rows

    return [(status, summary, error) for status, summary, error in sqlite_rows(
        home.state_dir("cron") / "cron.db", "SELECT status, summary, error FROM history WHERE job_id = ?", job_id)]


def test_what_a_sessions_command_jobs_print_of_the_owner_token_sel_key_and_secret_variables_comes_back_nowhere(
        crew: CrewHarness, tmp_path: Path, conversations_rows: Any) -> None:
    from kirocrew_core import home
    from kirocrew_core.notifications.store import all_notifications, store_file

    with serving_gateway(crew.env, [], kirocrew_argv(), tmp_path / "logs") as gateway:
        token = home.gateway_token_file().read_text().strip()

        async def main() -> dict[str, Any]:
            out: dict[str, Any] = {}
            async with crew.conversations() as conv:
                added = await crew.delegate(conv, "\n".join(
                    [cron_line("cron_add", name=name, command=command, every=3600) for name, command in ATTACKS.items()]
                    + ["!say scheduled"]), name="attacker", mode=SESSION_AGENT)
                assert added["status"] == "completed", added
                async with person(crew) as owner:
                    listed = json.loads((await owner.call("cron_list", json=True))[0])["jobs"]
                    out["ids"] = ids = {job["name"]: job["id"] for job in listed}
                    assert set(ids) == set(ATTACKS), listed  # every attack passed vetting
                    for job_id in ids.values():
                        _, code = await owner.call("cron_trigger", job_id=job_id)
                        assert code is None
                    for name, job_id in ids.items():
                        await eventually(f"the {name} job's run", lambda job_id=job_id: [
                            row for row in _history(job_id) if row[0] != "running"])
                    out["verbose"], _ = await owner.call("cron_list", verbose=True)
                    out["json"], _ = await owner.call("cron_list", json=True)
                # The model repeats what a tool showed it: its reply, and a file it names after it.
                said = await crew.delegate(conv, f"!say the owner token is {token}\n!write saw-{token}.txt x",
                                           name="echo")
                out["said"] = said
                out["events"] = (await conv.structured("kiro_events", conversationId=said["conversationId"],
                                                       runId=said["runId"]))
            return out

        out = asyncio.run(asyncio.wait_for(main(), BOUND_SECS))
        with owner_http_client(gateway) as client:
            pages = [client.get("/cron").text, client.get("/api/cron/jobs").text]
            pages += [client.get(f"/cron/{job_id}").text for job_id in out["ids"].values()]
            pages += [client.get(f"/api/cron/jobs/{job_id}").text for job_id in out["ids"].values()]
            pages.append(client.get("/api/notifications").text)

    known = Secrets(token, home.audit_key_file().read_bytes(), crew.env[SECRET_VARIABLE])
    ids = out["ids"]
    # The commands did print the secrets: what is left of each is the marker, in its place.
    results = {name: _history(job_id)[0] for name, job_id in ids.items()}
    assert all(status == "success" for status, _, _ in results.values()), results
    assert results["token"][1] == "<redacted>" and "<redacted>" in results["octal"][1]
    assert f"{SECRET_VARIABLE}='<redacted>'" in out["verbose"] and "KIROCREW_SESSION_KEY='<redacted>'" in out["verbose"]
    # ...and come back nowhere: the tools, the database files' bytes, the feed, the pages, the run.
    assert known.found_in(out["verbose"]) == [] and known.found_in(out["json"]) == []
    for path in _cron_files():
        assert known.found_in(path.read_bytes()) == [], path.name
    notes = [note for note in all_notifications() if (note.group_key or "").startswith("cron:")]
    assert len(notes) == len(ATTACKS)
    assert known.found_in(json.dumps([note.as_dict() for note in notes])) == []
    assert known.found_in(store_file().read_bytes()) == []
    for page in pages:
        assert known.found_in(page) == []
    said = out["said"]
    assert said["status"] == "completed" and "the owner token is <redacted>" in json.dumps(said)
    assert known.found_in(json.dumps(said)) == [] and known.found_in(json.dumps(out["events"])) == []
    [(reply,)] = conversations_rows("SELECT reply_text FROM runs WHERE id = ?", said["runId"])
    assert reply == "the owner token is <redacted>"
    events = conversations_rows("SELECT payload_json FROM events WHERE run_id = ?", said["runId"])
    assert any("saw-<redacted>.txt" in payload for (payload,) in events)
    assert known.found_in(json.dumps(events)) == []
