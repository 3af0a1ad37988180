"""The owner's knowledge and skills routes on one real ``kirocrew serve`` shared by the module.

Scripts reach them with the owner's Bearer token, as the Knowledge page's script does with its
cookie; a request without it is refused. Folders are real files the host reads in the background;
every refusal has its stable code, a source that does not exist is 404, and a refused change leaves
the library as it was. The registry is a real HTTP fixture on 127.0.0.1.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kirocrew_testing.browser import ServedGateway
from kirocrew_testing.homes import IsolatedHomes, isolate_homes
from kirocrew_testing.servers.skills_registry import skills_registry

SECRET = "ghp_" + "Zq8rT2vW9xY4bN6mK1pL3sD5fG7hJ0aC2eE4"


@pytest.fixture
def owner(module_owner: httpx.Client, module_homes: IsolatedHomes) -> Iterator[httpx.Client]:
    with pytest.MonkeyPatch.context() as patch:
        isolate_homes(patch, module_homes.root)
        yield module_owner


def refusal(answer: httpx.Response) -> tuple[int, str, str | None]:
    body = answer.json()
    return answer.status_code, body["code"], body.get("field")


def ready(owner: httpx.Client, source: int) -> dict[str, Any]:
    """The source once the host has read it (its ingestion runs in the background)."""
    deadline = time.monotonic() + 15
    while True:
        found = {s["id"]: s for s in owner.get("/api/knowledge/sources").json()["sources"]}[source]
        if found["progress"]["state"] == "ready" and found["indexed"]:
            return found
        assert time.monotonic() < deadline, found
        time.sleep(0.1)


def test_every_route_is_the_owners(module_served: ServedGateway) -> None:
    with httpx.Client(base_url=module_served.url) as stranger:
        for method, path in (("GET", "/knowledge"), ("GET", "/api/knowledge/sources"),
                             ("POST", "/api/knowledge/sources"), ("GET", "/api/skills"),
                             ("POST", "/api/skills/install")):
            answer = stranger.request(method, path, json={"lessons": True})
            assert answer.status_code == 401, (method, path)


def test_a_folder_is_added_read_in_the_background_searched_and_one_document_removed(
        owner: httpx.Client, tmp_path: Path) -> None:
    root = tmp_path / "notes"
    (root / "sub").mkdir(parents=True)
    (root / "keep.md").write_text(f"# Keep\nharbour lights and the token {SECRET}\n")
    (root / "sub" / "drop.md").write_text("# Drop\nharbour fog\n")
    (root / "blob.bin").write_bytes(b"\x00\x01\x02")
    added = owner.post("/api/knowledge/sources", json={"path": str(root)})
    assert added.status_code == 200, added.text
    source = added.json()["source"]["id"]
    assert ready(owner, source)["documents"] == 2

    hits = owner.get("/api/knowledge/search", params={"q": "harbour"}).json()["hits"]
    assert sorted(h["name"] for h in hits) == ["keep.md", "sub/drop.md"]
    assert SECRET not in str(hits) and "<redacted>" in str(hits)
    detail = owner.get(f"/api/knowledge/sources/{source}/documents").json()
    assert [d["name"] for d in detail["documents"]] == ["keep.md", "sub/drop.md"]
    assert detail["skipped"] == {"blob.bin": "binary (holds NUL bytes)"}
    named = owner.get(f"/api/knowledge/sources/{source}/documents", params={"named": "SUB/"}).json()
    assert ([d["name"] for d in named["documents"]], named["total"]) == (["sub/drop.md"], 1)
    assert owner.get(f"/api/knowledge/sources/{source}/documents", params={"named": "%"}).json()["total"] == 0
    assert owner.get(f"/api/knowledge/sources/{source}/documents", params={"page": "99999999"}).json()[
        "documents"] == []

    stamp = owner.get("/api/knowledge-changes").json()["stamp"]
    assert owner.post(f"/api/knowledge/sources/{source}/exclude", json={"document": "sub/drop.md"}).json() == {
        "excluded": "sub/drop.md"}
    assert owner.get("/api/knowledge-changes").json()["stamp"] != stamp
    assert owner.post(f"/api/knowledge/sources/{source}/reindex").status_code == 200
    time.sleep(0.5)
    ready(owner, source)
    assert [h["name"] for h in owner.get("/api/knowledge/search", params={"q": "harbour"}).json()["hits"]] == [
        "keep.md"]
    assert owner.get(f"/api/knowledge/sources/{source}/documents").json()["excluded"].keys() == {"sub/drop.md"}

    before = owner.get(f"/api/knowledge/sources/{source}/documents").json()
    for body, expected in (({"document": "../../etc/passwd"}, (400, "document_not_found", "document")),
                           ({"document": ""}, (400, "bad_request", "document")),
                           ({"document": 7}, (400, "bad_request", "document")),
                           ({"name": "x"}, (400, "bad_request", "name")),
                           ({}, (400, "bad_request", "document"))):
        assert refusal(owner.post(f"/api/knowledge/sources/{source}/exclude", json=body)) == expected, body
    assert refusal(owner.post(f"/api/knowledge/sources/{source}/include", json={"document": "keep.md"})) == (
        400, "excluded_not_found", "document")
    assert refusal(owner.post(f"/api/knowledge/sources/{source}/exclude", content=b"[[[")) [:2] == (400, "bad_json")
    assert owner.get(f"/api/knowledge/sources/{source}/documents").json() == before  # nothing changed

    assert owner.post(f"/api/knowledge/sources/{source}/include", json={"document": "sub/drop.md"}).status_code == 200
    deadline = time.monotonic() + 15
    while len(owner.get("/api/knowledge/search", params={"q": "harbour"}).json()["hits"]) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert owner.delete(f"/api/knowledge/sources/{source}").json()["removed"]["id"] == source
    assert refusal(owner.delete(f"/api/knowledge/sources/{source}"))[:2] == (404, "source_not_found")
    assert root.joinpath("keep.md").exists()  # the files are untouched


def test_bad_sources_and_queries_are_refused_with_their_codes(owner: httpx.Client, tmp_path: Path) -> None:
    tmp_path.joinpath("added").mkdir()
    known = owner.get("/api/knowledge/sources").json()["sources"]
    for body, expected in (({"path": "relative/path"}, (400, "path_not_absolute", "path")),
                           ({"path": "/tmp/\x00evil"}, (400, "path_not_absolute", "path")),
                           ({"path": str(tmp_path / "missing")}, (400, "source_unreadable", "path")),
                           ({"artifact": "Not A Slug"}, (400, "invalid_slug", "artifact")),
                           ({"artifact": "no-such-artifact"}, (400, "artifact_not_found", "artifact")),
                           ({"path": str(tmp_path), "lessons": True}, (400, "bad_request", "lessons")),
                           ({}, (400, "bad_request", "path")),
                           ({"lessons": "yes"}, (400, "bad_request", "lessons"))):
        assert refusal(owner.post("/api/knowledge/sources", json=body)) == expected, body
    assert refusal(owner.post("/api/knowledge/sources", content=b"x" * (64 * 1024 + 1)))[:2] == (400, "body_too_large")
    assert owner.get("/api/knowledge/sources").json()["sources"] == known
    first = owner.post("/api/knowledge/sources", json={"path": str(tmp_path / "added")})
    assert first.status_code == 200
    assert refusal(owner.post("/api/knowledge/sources", json={"path": str(tmp_path / "added")}))[:2] == (
        400, "source_exists")

    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER

    store.save(store.NewArtifact("Harbour guide", "# Harbour guide\nmoor at the north quay\n", "markdown",
                                 slug="harbour-guide"), OWNER)
    artifact = owner.post("/api/knowledge/sources", json={"artifact": "harbour-guide"}).json()["source"]
    assert (artifact["kind"], artifact["location"]) == ("artifact", "artifact:harbour-guide")
    lessons = owner.post("/api/knowledge/sources", json={"lessons": True}).json()["source"]
    assert lessons["kind"] == "lessons"
    assert refusal(owner.post("/api/knowledge/sources", json={"lessons": True}))[:2] == (400, "source_exists")
    ready(owner, artifact["id"])
    assert refusal(owner.post(f"/api/knowledge/sources/{artifact['id']}/exclude", json={"document": "harbour-guide"})
                   ) == (400, "source_single_document", "document")
    assert [h["kind"] for h in owner.get("/api/knowledge/search", params={"q": "north quay"}).json()["hits"]] == [
        "artifact"]

    assert refusal(owner.get("/api/knowledge/sources/999999/documents"))[:2] == (404, "source_not_found")
    assert refusal(owner.post("/api/knowledge/sources/999999/reindex"))[:2] == (404, "source_not_found")
    assert owner.get("/api/knowledge/sources/abc/documents").status_code == 404
    assert refusal(owner.get("/api/knowledge/search", params={"q": "x" * 501}))[:2] == (400, "invalid_arguments")
    assert refusal(owner.get("/api/knowledge/search", params={"q": "a", "limit": "0"})) == (400, "bad_request",
                                                                                           "limit")
    fts = '"NEAR(a b) OR * ^col: AND (' * 20
    assert owner.get("/api/knowledge/search", params={"q": fts[:500]}).status_code == 200
    assert refusal(owner.get("/api/knowledge-changes", params={"source": "x;1"})) == (400, "bad_request", "source")
    assert owner.get("/knowledge/sources/999999").status_code == 404
    for added in (artifact["id"], lessons["id"]):  # the module's host is shared: leave its library as it was
        assert owner.delete(f"/api/knowledge/sources/{added}").json()["removed"]["id"] == added


def test_the_skills_and_a_registry_install_only_what_was_shown(owner: httpx.Client,
                                                               module_homes: IsolatedHomes) -> None:
    from kirocrew_core.config import set_value
    from kirocrew_testing.skill_folders import write_skill

    crew = module_homes.crew_home / "skills"
    write_skill(crew, "notes", "Take meeting notes", always=True)
    (crew / "bad").mkdir(parents=True)
    (crew / "bad" / "SKILL.md").write_text("---\nname: bad\n---\n")
    listed = owner.get("/api/skills").json()
    assert [(s["key"], s["always"], s["source"]) for s in listed["skills"]] == [("notes", True, "crew")]
    assert [(p["key"], p["state"], p["reason"]) for p in listed["problems"]] == [
        ("bad", "broken", "'description' is required and must be a non-empty string")]

    set_value("skills.registry_url", "")
    assert refusal(owner.get("/api/skills/registry", params={"q": "pdf"}))[:2] == (409, "registry_unconfigured")
    assert "No skills registry is configured" in owner.get("/knowledge").text
    skills = {"acme/tools/pdf-forms": {"SKILL.md": "---\nname: pdf-forms\ndescription: Fill PDF forms\n---\nUse it.\n",
                                       "scripts/fill.sh": "#!/bin/sh\n"},
              "acme/tools/broken": {"SKILL.md": "no front matter\n"}}
    with skills_registry(skills) as registry:
        set_value("skills.registry_url", registry.url)
        set_value("skills.registry_allow_private", "true")
        found = owner.get("/api/skills/registry", params={"q": "pdf"}).json()["skills"]
        assert [s["id"] for s in found] == ["acme/tools/pdf-forms"]
        shown = owner.get("/api/skills/registry/acme/tools/pdf-forms").json()
        assert [(f["path"], f["size"]) for f in shown["files"]] == [
            ("SKILL.md", len(skills["acme/tools/pdf-forms"]["SKILL.md"])), ("scripts/fill.sh", 10)]
        assert shown["problem"] is None and not (crew / "pdf-forms").exists()  # shown, not installed
        assert refusal(owner.get("/api/skills/registry/acme/tools/nothing"))[:2] == (404, "not_found")
        assert refusal(owner.get("/api/skills/registry/..%2F..%2Fetc/x/y"))[:2] == (400, "invalid_arguments")
        assert owner.get("/api/skills/registry/acme/tools/broken").json()["problem"].startswith(
            "acme/tools/broken's SKILL.md is broken")

        assert refusal(owner.post("/api/skills/install", json={"id": "acme/tools/pdf-forms", "digest": "0" * 64}))[
            :2] == (409, "skill_changed")
        assert refusal(owner.post("/api/skills/install", json={"id": "acme/tools/pdf-forms"})) == (
            400, "bad_request", "digest")
        assert not (crew / "pdf-forms").exists()
        done = owner.post("/api/skills/install", json={"id": "acme/tools/pdf-forms", "digest": shown["digest"]})
        assert done.status_code == 200, done.text
        assert (crew / "pdf-forms" / "scripts" / "fill.sh").read_text() == "#!/bin/sh\n"
        again = owner.post("/api/skills/install", json={"id": "acme/tools/pdf-forms", "digest": shown["digest"]})
        assert refusal(again)[:2] == (409, "install_refused")
        broken = owner.get("/api/skills/registry/acme/tools/broken").json()
        assert refusal(owner.post("/api/skills/install", json={"id": "acme/tools/broken", "digest": broken["digest"]}))[
            :2] == (409, "install_refused")
    assert not (crew / "broken").exists()
    set_value("skills.registry_url", f"https://someone:{SECRET}@registry.invalid/?token={SECRET}")
    page = owner.get("/knowledge").text
    assert "registry.invalid" in page and SECRET not in page and "someone" not in page
    set_value("skills.registry_url", "")
