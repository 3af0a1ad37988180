"""The owner's artifact routes on one real ``kirocrew serve`` shared by the module.

Scripts reach them with the owner's Bearer token, as the Artifacts page's script does with its
cookie. Each test saves artifacts of its own (through the store, in the served homes, as the
host would) and asserts on the answers and on the files: every refusal has its stable code, what
does not exist is 404, and a refused change leaves the artifact's files byte for byte as they were.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kirocrew_testing.browser import ServedGateway
from kirocrew_testing.homes import IsolatedHomes, isolate_homes

SECRET = "ghp_" + "Zq8rT2vW9xY4bN6mK1pL3sD5fG7hJ0aC2eE4"


@pytest.fixture
def owner(module_owner: httpx.Client, module_homes: IsolatedHomes) -> Iterator[httpx.Client]:
    """The owner's client, with this process in the served homes (so the store writes what the host reads)."""
    with pytest.MonkeyPatch.context() as patch:
        isolate_homes(patch, module_homes.root)
        yield module_owner


def save(slug: str, content: str, *, kind: str = "markdown", tags: tuple[str, ...] = (), folder: str | None = None,
         name: str | None = None, actor: Any = None) -> dict[str, Any]:
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER

    new = store.NewArtifact(name=name or slug.replace("-", " ").title(), content=content, kind=kind, slug=slug,
                            tags=tags, folder=folder)
    return store.save(new, actor or OWNER).meta


def update(slug: str, content: str) -> None:
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER

    store.update(slug, OWNER, content=content)


def files(module_homes: IsolatedHomes, slug: str) -> dict[str, bytes]:
    folder = module_homes.crew_home / "artifacts" / slug
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def refusal(answer: httpx.Response) -> tuple[int, str, str | None]:
    body = answer.json()
    return answer.status_code, body["code"], body.get("field")


def slugs(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 200, answer.text
    return sorted(a["slug"] for a in answer.json()["artifacts"])


def test_the_list_filters_by_words_folder_tag_kind_source_and_star(owner: httpx.Client,
                                                                   module_homes: IsolatedHomes) -> None:
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER, Actor

    save("lf-weekly", "# Weekly\ngrew 5%", tags=("lf-report",), name="Weekly growth report")
    save("lf-proto", "<p>hi</p>", kind="html", folder="/lf/protos")
    save("lf-data", '{"a": 1}', kind="json", actor=Actor(tree="lf-conv", conversation="lf-conv", source="chat"))
    store.set_pinned("lf-data", OWNER, True)

    assert {"lf-weekly", "lf-proto", "lf-data"} <= set(slugs(owner.get("/api/artifacts")))
    assert slugs(owner.get("/api/artifacts", params={"q": "weekly GROWTH"})) == ["lf-weekly"]
    assert slugs(owner.get("/api/artifacts", params={"tag": "lf-report"})) == ["lf-weekly"]
    assert "lf-proto" in slugs(owner.get("/api/artifacts", params={"kind": "html"}))
    assert slugs(owner.get("/api/artifacts", params={"folder": "/lf/protos"})) == ["lf-proto"]
    assert "lf-proto" not in slugs(owner.get("/api/artifacts", params={"folder": "root"}))
    assert "lf-data" in slugs(owner.get("/api/artifacts", params={"starred": "true"}))
    assert "lf-data" not in slugs(owner.get("/api/artifacts", params={"starred": "false"}))
    chat = owner.get("/api/artifacts", params={"source": "chat", "q": "lf"}).json()["artifacts"]
    assert [(a["slug"], a["conversation"]) for a in chat] == [("lf-data", "lf-conv")]
    library = owner.get("/api/artifacts").json()["library"]
    assert "/lf/protos" in [f["path"] for f in library["folders"]] and "lf-report" in library["tags"]

    bad = {"kind": ("widget", "kind_unsupported"), "source": ("nowhere", "invalid_source"),
           "starred": ("maybe", "invalid_arguments"), "folder": ("/lf/none", "folder_not_found"),
           "q": ("x" * 201, "invalid_arguments"), "tag": ("a\nb", "invalid_tags")}
    for field, (value, code) in bad.items():
        assert refusal(owner.get("/api/artifacts", params={field: value}))[:2] == (400, code), field


def test_one_artifact_its_versions_and_a_diff_redacted(owner: httpx.Client) -> None:
    save("gd-note", f"line one\nthe token {SECRET}\nline three\n")
    update("gd-note", "line one\nline two\nline three\n")

    live = owner.get("/api/artifacts/gd-note").json()
    assert (live["version"], live["versions"], live["shown_version"]) == (2, [1, 2], 2)
    assert live["content"] == "line one\nline two\nline three\n"
    first = owner.get("/api/artifacts/gd-note", params={"version": "1"}).json()
    assert "<redacted>" in first["content"] and SECRET not in first["content"]

    diff = owner.get("/api/artifacts/gd-note/diff", params={"from": "1", "to": "2"}).json()
    assert (diff["added"], diff["removed"]) == (1, 1)
    assert {"op": "+", "text": "line two"} in diff["lines"]
    assert {"op": "-", "text": "the token <redacted>"} in diff["lines"]
    assert SECRET not in str(diff)

    assert refusal(owner.get("/api/artifacts/gd-note", params={"version": "9"}))[:2] == (404, "version_not_found")
    assert refusal(owner.get("/api/artifacts/gd-none"))[:2] == (404, "artifact_not_found")
    assert refusal(owner.get("/api/artifacts/Not_A_Slug"))[:2] == (400, "invalid_slug")
    assert refusal(owner.get("/api/artifacts/gd-note/diff", params={"from": "1"})) == (400, "bad_request", "to")
    assert refusal(owner.get("/api/artifacts/gd-note/diff", params={"from": "x", "to": "2"})) == (
        400, "bad_request", "from")
    assert refusal(owner.get("/api/artifacts/gd-note/diff", params={"from": "1", "to": "7"}))[:2] == (
        404, "version_not_found")


def test_comments_anchor_reply_and_resolve_and_every_malformed_body_changes_nothing(
        owner: httpx.Client, module_homes: IsolatedHomes) -> None:
    save("cm-report", "Revenue grew 5% this week.\n")
    posted = owner.post("/api/artifacts/cm-report/comments", json={"text": "cite the source", "quote": "grew 5%"})
    assert posted.status_code == 200, posted.text
    comment = posted.json()["comment"]
    assert (comment["quote"], comment["status"], comment["is_agent"], comment["orphaned"]) == (
        "grew 5%", "open", False, False)
    reply = owner.post("/api/artifacts/cm-report/comments", json={"text": "and the date", "parent_id": comment["id"]})
    assert reply.json()["comment"]["parent_id"] == comment["id"]

    before = files(module_homes, "cm-report")
    refused = [
        (owner.post("/api/artifacts/cm-report/comments", content=b"{not json"), (400, "bad_json", None)),
        (owner.post("/api/artifacts/cm-report/comments", json=["text"]), (400, "bad_json", None)),
        (owner.post("/api/artifacts/cm-report/comments", json={}), (400, "bad_request", "text")),
        (owner.post("/api/artifacts/cm-report/comments", json={"text": 5}), (400, "bad_request", "text")),
        (owner.post("/api/artifacts/cm-report/comments", json={"text": "x", "color": "red"}),
         (400, "bad_request", "color")),
        (owner.post("/api/artifacts/cm-report/comments", json={"text": "x", "quote": "shrank"}),
         (400, "quote_not_found", None)),
        (owner.post("/api/artifacts/cm-report/comments", json={"text": ""}), (400, "invalid_comment", None)),
        (owner.post("/api/artifacts/cm-report/comments", json={"text": "x", "parent_id": "c-000000000000"}),
         (404, "comment_not_found", None)),
        (owner.post("/api/artifacts/cm-none/comments", json={"text": "x"}), (404, "artifact_not_found", None)),
        (owner.post(f"/api/artifacts/cm-report/comments/{comment['id']}/resolve", json={"x": 1}),
         (400, "bad_request", "x")),
        (owner.post("/api/artifacts/cm-report/comments/c-000000000000/resolve"), (404, "comment_not_found", None)),
    ]
    for answer, expected in refused:
        assert refusal(answer) == expected, answer.text
    assert files(module_homes, "cm-report") == before

    resolved = owner.post(f"/api/artifacts/cm-report/comments/{comment['id']}/resolve")
    assert resolved.json()["comment"]["status"] == "resolved"
    again = owner.post(f"/api/artifacts/cm-report/comments/{comment['id']}/resolve")
    assert refusal(again) == (400, "comment_resolved", None)
    listed = owner.get("/api/artifacts/cm-report/comments").json()["comments"]
    assert [(c["id"], c["status"]) for c in listed] == [(comment["id"], "resolved"),
                                                         (reply.json()["comment"]["id"], "open")]

    update("cm-report", "Revenue is flat.\n")
    assert owner.get("/api/artifacts/cm-report/comments").json()["comments"][0]["orphaned"] is True


def test_revert_move_star_and_delete_and_their_refusals_change_nothing(owner: httpx.Client,
                                                                        module_homes: IsolatedHomes) -> None:
    from kirocrew_core.artifacts import store
    from kirocrew_core.artifacts.access import OWNER

    save("rm-doc", "first\n")
    update("rm-doc", "second\n")
    store.folder_create("rm-archive", None, OWNER)

    before = files(module_homes, "rm-doc")
    refused = [
        (owner.post("/api/artifacts/rm-doc/revert", json={"version": "1"}), (400, "bad_request", "version")),
        (owner.post("/api/artifacts/rm-doc/revert", json={"version": True}), (400, "bad_request", "version")),
        (owner.post("/api/artifacts/rm-doc/revert", json={"version": 0}), (400, "bad_request", "version")),
        (owner.post("/api/artifacts/rm-doc/revert", json={"version": 7}), (404, "version_not_found", None)),
        (owner.post("/api/artifacts/rm-doc/move", json={"folder": "/rm-missing"}), (400, "folder_not_found", None)),
        (owner.post("/api/artifacts/rm-doc/move", json={}), (400, "bad_request", "folder")),
        (owner.post("/api/artifacts/rm-doc/star", json={"starred": "yes"}), (400, "bad_request", "starred")),
        (owner.post("/api/artifacts/rm-doc/star", content=b"x" * (65 * 1024)), (400, "body_too_large", None)),
        (owner.delete("/api/artifacts/rm-none"), (404, "artifact_not_found", None)),
    ]
    for answer, expected in refused:
        assert refusal(answer) == expected, answer.text
    assert files(module_homes, "rm-doc") == before

    reverted = owner.post("/api/artifacts/rm-doc/revert", json={"version": 1}).json()
    assert reverted == {"slug": "rm-doc", "version": 3, "reverted_to": 1}
    assert owner.get("/api/artifacts/rm-doc").json()["content"] == "first\n"
    moved = owner.post("/api/artifacts/rm-doc/move", json={"folder": "/rm-archive"}).json()
    assert moved["folder"] == "/rm-archive"
    assert owner.post("/api/artifacts/rm-doc/move", json={"folder": None}).json()["folder_id"] is None
    assert owner.post("/api/artifacts/rm-doc/star", json={"starred": True}).json()["starred"] is True
    assert owner.get("/api/artifacts/rm-doc").json()["starred"] is True

    assert owner.delete("/api/artifacts/rm-doc").json() == {"deleted": "rm-doc"}
    assert refusal(owner.get("/api/artifacts/rm-doc"))[:2] == (404, "artifact_not_found")
    assert not (module_homes.crew_home / "artifacts" / "rm-doc").exists()


def test_a_pending_deploy_is_confirmed_once_into_the_web_root_or_discarded(owner: httpx.Client,
                                                                            module_homes: IsolatedHomes) -> None:
    from kirocrew_core.artifacts import deploy
    from kirocrew_core.artifacts.access import Actor
    from kirocrew_core.config import set_value

    web_root = module_homes.root / "web-root"
    web_root.mkdir(exist_ok=True)
    set_value(deploy.DEPLOY_DIR_KEY, str(web_root))
    session = Actor(tree="dp-conv", conversation="dp-conv", source="chat")
    save("dp-page", "<h1>Launch</h1>", kind="html", actor=session)
    first, _ = deploy.request(session, "dp-page", "dp-site", "local", 1)
    second, _ = deploy.request(session, "dp-page", "dp-other", "local", 1)

    waiting = owner.get("/api/deploys").json()["pending"]
    assert {first.id, second.id} <= {p["id"] for p in waiting}
    assert refusal(owner.post(f"/api/deploys/{first.id}/confirm", json={"now": True})) == (400, "bad_request", "now")
    assert refusal(owner.post("/api/deploys/not-an-id/confirm"))[:2] == (404, "deploy_not_found")
    assert not (web_root / "dp-site").exists()

    published = owner.post(f"/api/deploys/{first.id}/confirm")
    assert published.status_code == 200, published.text
    assert "Published dp-page v1" in published.json()["published"]
    assert (web_root / "dp-site" / "index.html").read_text() == "<h1>Launch</h1>"
    assert refusal(owner.post(f"/api/deploys/{first.id}/confirm"))[:2] == (404, "deploy_not_found")

    discarded = owner.post(f"/api/deploys/{second.id}/discard").json()["discarded"]
    assert discarded["site_id"] == "dp-other"
    assert refusal(owner.post(f"/api/deploys/{second.id}/discard"))[:2] == (404, "deploy_not_found")
    assert {first.id, second.id}.isdisjoint(p["id"] for p in owner.get("/api/deploys").json()["pending"])
    assert not (web_root / "dp-other").exists()


def test_the_sandbox_route_sends_only_its_own_strict_policy_and_the_pages_render_safely(
        owner: httpx.Client, module_served: ServedGateway) -> None:
    from kirocrew_core.gateway.shell import CONTENT_SECURITY_POLICY, SANDBOX_CONTENT_SECURITY_POLICY

    save("sb-proto", "<script>parent.document.title='x'</script><p>proto</p>", kind="html")
    save("sb-notes", "# Notes\n<script>alert(1)</script> <img src=x onerror=alert(2)>\n[link](javascript:alert(3))")
    framed = owner.get("/artifacts/sb-proto/sandbox")
    assert framed.status_code == 200 and framed.headers["content-type"].startswith("text/html")
    assert framed.headers.get_list("content-security-policy") == [SANDBOX_CONTENT_SECURITY_POLICY]
    assert "sandbox" in SANDBOX_CONTENT_SECURITY_POLICY.split("; ")
    assert framed.headers["x-frame-options"] == "SAMEORIGIN"
    assert owner.get("/artifacts/sb-notes/sandbox").status_code == 400  # Markdown is rendered, never framed
    assert owner.get("/artifacts/sb-none/sandbox").status_code == 404

    page = owner.get("/artifacts/sb-notes")
    assert page.status_code == 200
    assert page.headers.get_list("content-security-policy") == [CONTENT_SECURITY_POLICY]
    assert "<script>alert(1)</script>" not in page.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert 'href="javascript:' not in page.text and "<img src=x" not in page.text  # shown as text, never run
    assert '<iframe class="sandboxed" src="/artifacts/sb-proto/sandbox?version=1" sandbox ' in owner.get(
        "/artifacts/sb-proto").text
    assert owner.get("/artifacts/sb-none").status_code == 404
    with httpx.Client(base_url=module_served.url, timeout=30) as stranger:
        assert stranger.get("/api/artifacts").status_code == 401
        assert stranger.get("/artifacts/sb-proto/sandbox").status_code in (303, 401)
        assert stranger.post("/api/artifacts/sb-proto/star", json={"starred": True}).status_code == 401
    foreign = owner.post("/api/artifacts/sb-proto/star", json={"starred": True},
                         headers={"Origin": "http://evil.example"})
    assert refusal(foreign)[:2] == (403, "foreign_origin")
    assert owner.get("/api/artifacts/sb-proto").json()["starred"] is False


def test_the_change_stamp_moves_when_an_artifact_or_its_comments_change(owner: httpx.Client) -> None:
    save("st-doc", "text\n")
    library = owner.get("/api/artifact-changes").json()["stamp"]
    one = owner.get("/api/artifact-changes", params={"slug": "st-doc"}).json()["stamp"]
    assert owner.get("/api/artifact-changes", params={"slug": "st-doc"}).json()["stamp"] == one
    owner.post("/api/artifacts/st-doc/comments", json={"text": "hm"})
    assert owner.get("/api/artifact-changes", params={"slug": "st-doc"}).json()["stamp"] != one
    assert owner.get("/api/artifact-changes").json()["stamp"] != library
    assert refusal(owner.get("/api/artifact-changes", params={"slug": "../x"}))[:2] == (400, "invalid_slug")


def test_a_version_past_the_pages_share_is_cut_at_whitespace_with_its_length_and_the_secret_after_it_stays_out(
        owner: httpx.Client) -> None:
    from kirocrew_core.artifacts.views import PAGE_MAX_CHARS

    words = "lorem ipsum " * (PAGE_MAX_CHARS // 12 + 1000)
    save("cut-long", words + SECRET)
    shown = owner.get("/api/artifacts/cut-long").json()
    assert shown["cut"] == len(words) + len(SECRET) and len(shown["content"]) <= PAGE_MAX_CHARS
    assert shown["content"].endswith("ipsum") and SECRET not in shown["content"]
    assert "Only the first" in owner.get("/artifacts/cut-long").text
    assert owner.get("/api/artifacts/cut-long/diff",
                     params={"from": "1", "to": "1"}).json()["cut"] is True
