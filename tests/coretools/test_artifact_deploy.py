"""``deploy_artifact`` and the owner's confirmation: the scan, the pending entries, the local web root.

Sessions and the person are real callers resolved by ancestry (:mod:`test_artifact_tools`'s ``Crew``);
the owner's decisions go through the ``kirocrew-artifacts-admin`` tools as the owner's CLI would call them.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kirocrew_core import config, home
from kirocrew_core.artifacts import deploy
from kirocrew_core.artifacts.admin import admin_tools
from kirocrew_core.coretools.server import CoreToolsServer
from kirocrew_core.errors import KirocrewError
from kirocrew_testing.core_sessions import ProcessTree, verified_caller

from .test_artifact_tools import TOKEN, Crew


@pytest.fixture
def crew(process_tree: Callable[[], ProcessTree], plugin_manager: Any) -> Crew:
    return Crew(process_tree, plugin_manager)


@pytest.fixture
def web_root(tmp_path: Path) -> Path:
    root = tmp_path / "www"
    root.mkdir()
    config.set_value(deploy.DEPLOY_DIR_KEY, str(root))
    return root


def _admin(crew: Crew, who: str, tool: str, **args: Any) -> tuple[str, str | None]:
    server = CoreToolsServer(registry=crew.registry, tool_source=admin_tools, server_name="kirocrew-artifacts-admin")
    caller = crew.callers[who]
    if who == "person":
        caller = verified_caller(caller.relay_pid, session_type="cli")  # the owner's own kirocrew command
    return asyncio.run(server.call(tool, args, caller))


def _pending_file() -> Path:
    return home.pending_deploys_file()


def _request(crew: Crew, site: str = "notes", slug: str = "page") -> str:
    text = crew.ok("conv-a", "deploy_artifact", site_id=site, artifact_slug=slug)
    return text.split("id=", 1)[1].split(",", 1)[0]


def test_a_credential_in_the_content_blocks_the_deploy_and_queues_nothing(crew: Crew, web_root: Path) -> None:
    crew.ok("conv-a", "artifact_save", name="Page", content=f"<p>hi</p>\n<!-- {TOKEN} -->", slug="page", kind="html")
    text, code = crew("conv-a", "deploy_artifact", site_id="notes", artifact_slug="page")
    assert code == "deploy_blocked" and text.startswith("Deploy BLOCKED by scan (1 finding(s)):")
    assert "line(s) 2" in text and TOKEN not in text
    assert not _pending_file().exists()


def test_a_destination_that_is_not_there_or_not_configured_is_refused_before_anything_is_queued(crew: Crew) -> None:
    crew.ok("conv-a", "artifact_save", name="Page", content="<p>hi</p>", slug="page", kind="html")
    text, code = crew("conv-a", "deploy_artifact", site_id="notes", artifact_slug="page")
    assert code == "deploy_not_configured" and deploy.DEPLOY_DIR_KEY in text
    assert crew("conv-a", "deploy_artifact", site_id="notes", artifact_slug="page", profile="s3")[1] == (
        "deploy_destination_unknown")
    assert not _pending_file().exists()


def test_a_clean_deploy_waits_for_the_owner_who_alone_confirms_it_into_the_web_root(crew: Crew,
                                                                                     web_root: Path) -> None:
    crew.ok("conv-a", "artifact_save", name="Page", content="<p>v1</p>", slug="page", kind="html")
    text = crew.ok("conv-a", "deploy_artifact", site_id="notes", artifact_slug="page")
    assert text.startswith("Deploy pending the owner's confirmation (id=d-")
    assert "WARNING: once confirmed it is public" in text and "kirocrew deploy confirm d-" in text
    pending_id = text.split("id=", 1)[1].split(",", 1)[0]
    assert not (web_root / "notes").exists()
    crew.ok("conv-a", "artifact_update", slug="page", content="<p>v2 after the request</p>")
    for who, code in (("conv-a", "person_only_command"), ("conv-b", "person_only_command")):
        assert _admin(crew, who, "deploy_confirm", id=pending_id)[1] == code
    mcp_person = asyncio.run(CoreToolsServer(registry=crew.registry, tool_source=admin_tools).call(
        "deploy_confirm", {"id": pending_id}, crew.callers["person"]))
    assert mcp_person[1] == "caller_unverified"  # the owner's MCP client is not the owner's command
    listed, _ = _admin(crew, "person", "deploy_list")
    assert listed.startswith(f"{pending_id}  page v1 -> local:notes  by conversation:conv-a  expires in ")
    published, failed = _admin(crew, "person", "deploy_confirm", id=pending_id)
    assert failed is None and str(web_root / "notes" / "index.html") in published
    assert (web_root / "notes" / "index.html").read_text() == "<p>v1</p>"  # the version that was asked for
    assert _admin(crew, "person", "deploy_confirm", id=pending_id)[1] == "deploy_not_found"  # claimed once
    assert _admin(crew, "person", "deploy_list")[0] == "No deploys wait for confirmation."


def test_a_pending_deploy_is_claimed_once_however_many_confirm_it_at_the_same_moment(crew: Crew,
                                                                                     web_root: Path) -> None:
    crew.ok("conv-a", "artifact_save", name="Page", content="# hi", slug="page")
    pending_id = _request(crew)
    outcomes: list[str] = []

    def claim() -> None:
        try:
            deploy.claim(pending_id)
            outcomes.append("claimed")
        except KirocrewError as exc:
            outcomes.append(exc.code)

    threads = [threading.Thread(target=claim) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["claimed"] + ["deploy_not_found"] * 5


def test_at_most_20_wait_an_expired_one_neither_counts_nor_confirms_and_discard_drops_one(crew: Crew,
                                                                                          web_root: Path) -> None:
    crew.ok("conv-a", "artifact_save", name="Page", content="# hi", slug="page")
    ids = [_request(crew, site=f"site-{n}") for n in range(deploy.MAX_PENDING)]
    text, code = crew("conv-a", "deploy_artifact", site_id="one-more", artifact_slug="page")
    assert code == "deploy_pending_full"
    entries = json.loads(_pending_file().read_text())
    assert len(entries) == deploy.MAX_PENDING and all(e["expires_at"] - e["created_at"] == 3600 for e in entries)
    entries[0]["expires_at"] = entries[0]["created_at"] - 1  # as it is an hour later
    _pending_file().write_text(json.dumps(entries))
    assert _admin(crew, "person", "deploy_confirm", id=ids[0])[1] == "deploy_expired"
    assert not (web_root / "site-0").exists()
    assert crew("conv-a", "deploy_artifact", site_id="one-more", artifact_slug="page")[1] is None
    assert _admin(crew, "person", "deploy_discard", id=ids[1])[0].startswith(f"Discarded deploy {ids[1]} (page v1")
    assert len(deploy.pending()) == deploy.MAX_PENDING - 1


def test_the_local_destination_never_writes_into_a_folder_it_did_not_make(crew: Crew, web_root: Path) -> None:
    (web_root / "mine").mkdir()
    (web_root / "mine" / "index.html").write_text("the owner's own page")
    crew.ok("conv-a", "artifact_save", name="Page", content="# hi", slug="page")
    text, code = _admin(crew, "person", "deploy_confirm", id=_request(crew, site="mine"))
    assert code == "deploy_target_foreign"
    assert (web_root / "mine" / "index.html").read_text() == "the owner's own page"
    assert _admin(crew, "person", "deploy_confirm", id=_request(crew, site="fresh"))[1] is None
    crew.ok("conv-a", "artifact_update", slug="page", content="# again")
    assert _admin(crew, "person", "deploy_confirm", id=_request(crew, site="fresh"))[1] is None  # its own: replaced
    assert sorted(p.name for p in (web_root / "fresh").iterdir()) == [".kirocrew-deploy.json", "index.md"]
    assert (web_root / "fresh" / "index.md").read_text() == "# again"


def test_an_image_is_published_as_its_bytes(crew: Crew, web_root: Path) -> None:
    png = "iVBORw0KGgo="
    crew.ok("conv-a", "artifact_save", name="Logo", content=f"data:image/png;base64,{png}", slug="logo",
            kind="image")
    assert _admin(crew, "person", "deploy_confirm", id=_request(crew, site="logo", slug="logo"))[1] is None
    assert (web_root / "logo" / "index.png").read_bytes() == b"\x89PNG\r\n\x1a\n"
    assert os.stat(web_root / "logo" / "index.png").st_mode & 0o777 == 0o644


def test_the_scan_names_each_line_holding_a_credential_once() -> None:
    key = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----"
    content = f"clean\ntoken={TOKEN} and {TOKEN}\nclean\n{key}\nAKIA{'A' * 16} after the key\n"
    assert deploy.scan(content) == [2, 4, 5]
    assert deploy.scan("nothing to see\n" * 1000) == []


def test_a_malformed_pending_file_is_reported_and_left_as_it_was(crew: Crew, web_root: Path) -> None:
    crew.ok("conv-a", "artifact_save", name="Page", content="# hi", slug="page")
    _pending_file().parent.mkdir(parents=True, exist_ok=True)
    _pending_file().write_text("[{broken")
    assert crew("conv-a", "deploy_artifact", site_id="s", artifact_slug="page")[1] == "deploy_store_unreadable"
    assert _admin(crew, "person", "deploy_list")[1] == "deploy_store_unreadable"
    assert _pending_file().read_text() == "[{broken"


def test_the_scan_runs_again_at_confirmation_and_a_secret_known_since_blocks_the_publication(
        crew: Crew, web_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    crew.ok("conv-a", "artifact_save", name="Page", content="the passphrase is zephyr-mango-basalt-42", slug="page")
    pending_id = _request(crew)
    monkeypatch.setenv("DEPLOY_TEST_TOKEN", "zephyr-mango-basalt-42")  # a secret this machine holds now
    text, code = _admin(crew, "person", "deploy_confirm", id=pending_id)
    assert code == "deploy_blocked" and "zephyr" not in text
    assert not (web_root / "notes").exists() and deploy.pending() == []
