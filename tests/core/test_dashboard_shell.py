"""The dashboard shell without a browser: templates, navigation, static files, the Content-Security-Policy."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.testclient import TestClient

from kirocrew_core.contributions import DashboardPage
from kirocrew_core.gateway.app import create_app
from kirocrew_core.gateway.auth import SESSION_COOKIE, load_or_create_token
from kirocrew_core.gateway.shell import CONTENT_SECURITY_POLICY, render_page
from kirocrew_core.plugins import PluginRecord, PluginWarning
from kirocrew_testing.plugins import register_plugin

BASE = "http://127.0.0.1"
HOSTILE = '<script>alert("x")</script>'


def _third_party(pm: Any, name: str, **impls: Any) -> None:
    """Register ``name`` as an installed third-party plugin (so its faults are warnings, not errors)."""
    pm.records[name] = PluginRecord(name, name, "1.0", f"{name}:plugin", "loaded")
    register_plugin(pm, name, **impls)


def _client(pm: Any, *, signed_in: bool = True) -> TestClient:
    client = TestClient(create_app(pm), base_url=BASE, follow_redirects=False)
    if signed_in:
        client.cookies.set(SESSION_COOKIE, load_or_create_token())
    return client


@pytest.fixture
def widgets_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An importable package ``shell_widgets`` shipping templates/ and static/ like a plugin's."""
    root = tmp_path / "site" / "shell_widgets"
    (root / "templates").mkdir(parents=True)
    (root / "static" / "img").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "templates" / "widgets.html").write_text(textwrap.dedent("""\
        {% extends "core/base.html" %}
        {% block content %}<h1>{{ title }}</h1><p id="name">{{ name }}</p>{% endblock %}
        {% block scripts %}
        <script type="module" src="{{ static('shell_widgets', 'widgets.js') }}"></script>
        {% endblock %}
        """))
    (root / "static" / "widgets.js").write_text('import { api } from "/static/core/shell.js";\n')
    (root / "static" / "widgets.css").write_text(".widget { color: red; }\n")
    (root / "static" / "img" / "logo.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"/>')
    (root / "static" / "notes.py").write_text("SECRET = 1\n")
    (root / "static" / ".hidden.js").write_text("hidden\n")
    (tmp_path / "site" / "outside.js").write_text("outside the static folder\n")
    (root / "static" / "escape.js").symlink_to(tmp_path / "site" / "outside.js")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return root


async def _widgets(request: Request) -> HTMLResponse:
    return render_page(request, "shell_widgets/widgets.html", title="Widgets", name=HOSTILE)


@pytest.fixture
def widgets_client(plugin_manager, widgets_package) -> Iterator[TestClient]:
    _third_party(plugin_manager, "widgets",
                 dashboard_pages=lambda: [DashboardPage("/widgets", "Widgets", _widgets, package="shell_widgets")])
    with _client(plugin_manager) as client:
        yield client


# --- templates and navigation ---------------------------------------------------------


def test_a_hostile_plugin_title_is_escaped_in_the_navigation_and_the_overview(plugin_manager):
    async def page(request: Request) -> HTMLResponse:
        return HTMLResponse("<p>hi</p>")

    _third_party(plugin_manager, "hostile", dashboard_pages=lambda: [DashboardPage("/hostile", HOSTILE, page, HOSTILE)])
    with _client(plugin_manager) as client:
        html = client.get("/").text
    assert HOSTILE not in html
    escaped = "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;"
    nav = html[html.index('<nav aria-label="Dashboard">'):html.index("</nav>")]
    assert f'<a href="/hostile">{escaped}</a>' in nav
    assert html.count(escaped) == 3  # the link in the navigation, the overview's link and its description


def test_a_plugin_page_renders_its_own_template_inside_the_shell_layout_with_values_escaped(widgets_client):
    response = widgets_client.get("/widgets")
    assert response.status_code == 200 and response.headers["cache-control"] == "no-store"
    html = response.text
    assert "<title>Widgets · kirocrew</title>" in html
    assert '<a href="/widgets" aria-current="page">Widgets</a>' in html
    assert '<a href="/">Overview</a>' in html
    assert '<main id="main" tabindex="-1">' in html and 'href="#main">Skip to main content</a>' in html
    assert f'<p id="name">{HOSTILE}</p>' not in html and "&lt;script&gt;" in html
    assert '<script type="module" src="/static/shell_widgets/widgets.js"></script>' in html.replace("\n", "")
    assert 'role="status"' in html and 'role="alert"' in html  # the announcer's live regions


def test_pages_of_third_party_plugins_appear_in_the_navigation_after_the_overview_in_order(plugin_manager):
    async def page(request: Request) -> HTMLResponse:
        return HTMLResponse("")

    _third_party(plugin_manager, "alpha", dashboard_pages=lambda: [DashboardPage("/alpha", "Alpha", page)])
    _third_party(plugin_manager, "beta", dashboard_pages=lambda: [DashboardPage("/beta", "Beta", page),
                                                                   DashboardPage("/beta/more", "More beta", page)])
    with _client(plugin_manager) as client:
        html = client.get("/").text
    nav = html[html.index('<nav aria-label="Dashboard">'):html.index("</nav>")]
    # Core's own pages (Artifacts, History, Knowledge, the notification feed, the Policy page, Hooks) come from
    # builtin plugins, called first; an artifact's own page (/artifacts/{slug}) has parameters, so it is not listed.
    assert re.findall(r'<a href="([^"]+)"', nav) == ["/", "/artifacts", "/history", "/knowledge", "/notifications",
                                                     "/policy", "/hooks", "/alpha", "/beta", "/beta/more"]
    assert '<a href="/" aria-current="page">Overview</a>' in nav


def test_a_page_with_path_parameters_is_served_but_not_listed(plugin_manager):
    async def thing(request: Request) -> HTMLResponse:
        return render_page(request, "core/refusal.html", title="Thing", status=200, code="-",
                           message=f"thing {request.path_params['id']}")

    _third_party(plugin_manager, "things", dashboard_pages=lambda: [DashboardPage("/things", "Things", thing),
                                                                     DashboardPage("/things/{id}", "A thing", thing)])
    with _client(plugin_manager) as client:
        overview = client.get("/").text
        page = client.get("/things/42")
    assert "A thing" not in overview and "/things/{id}" not in overview and "/things/42" not in overview
    assert page.status_code == 200 and "thing 42" in page.text
    # The shell's navigation is still there, and marks the list the page belongs to.
    assert '<a href="/">Overview</a>' in page.text
    assert '<a href="/things" aria-current="true">Things</a>' in page.text


@pytest.mark.parametrize("package", ["no_such_package_anywhere", "textwrap", "core", ""])
def test_a_page_naming_a_package_without_folders_is_skipped_with_a_warning(plugin_manager, package):
    async def page(request: Request) -> HTMLResponse:
        return HTMLResponse("")

    _third_party(plugin_manager, "odd", dashboard_pages=lambda: [DashboardPage("/odd", "Odd", page, package=package)])
    if not package:  # no package is fine: a page without files of its own
        pages = create_app(plugin_manager).state.kirocrew.pages
        assert [c.value.path for c in pages if c.plugin == "odd"] == ["/odd"]
        return
    with pytest.warns(PluginWarning, match="odd"):
        app = create_app(plugin_manager)
    assert [c for c in app.state.kirocrew.pages if c.plugin == "odd"] == []


# --- static files ---------------------------------------------------------------------


def test_a_plugin_static_file_is_served_with_its_type_and_revalidated_by_etag(widgets_client):
    script = widgets_client.get("/static/shell_widgets/widgets.js")
    assert script.status_code == 200
    assert script.headers["content-type"] == "text/javascript; charset=utf-8"
    assert script.headers["cache-control"] == "no-cache"
    assert script.text.startswith("import { api }")
    again = widgets_client.get("/static/shell_widgets/widgets.js", headers={"If-None-Match": script.headers["etag"]})
    assert (again.status_code, again.content) == (304, b"")
    assert widgets_client.get("/static/shell_widgets/widgets.css").headers["content-type"] == "text/css; charset=utf-8"
    assert widgets_client.get("/static/shell_widgets/img/logo.svg").headers["content-type"] == "image/svg+xml"
    core = widgets_client.get("/static/core/shell.js")
    assert core.status_code == 200 and "export async function api" in core.text
    assert core.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("path", [
    "/static/shell_widgets/%2e%2e/__init__.py",
    "/static/shell_widgets/..%2f__init__.py",
    "/static/shell_widgets/img/%2e%2e/%2e%2e/%2e%2e/outside.js",
    "/static/shell_widgets/escape.js",  # a symlink out of the folder
    "/static/shell_widgets/notes.py",  # not a type a static folder serves
    "/static/shell_widgets/.hidden.js",
    "/static/shell_widgets/img",
    "/static/shell_widgets/missing.js",
    "/static/not_a_page_package/x.js",
    "/static/core/%2e%2e/shell.py",
    "/static/core/..%5cshell.py",
])
def test_a_path_outside_a_static_folder_or_of_an_unknown_type_is_not_served(widgets_client, path):
    response = widgets_client.get(path)
    assert response.status_code == 404, response.text
    assert "SECRET" not in response.text and "outside the static folder" not in response.text


def test_static_files_need_the_owner_except_the_sign_in_pages_stylesheet(plugin_manager, widgets_package):
    _third_party(plugin_manager, "widgets",
                 dashboard_pages=lambda: [DashboardPage("/widgets", "Widgets", _widgets, package="shell_widgets")])
    with _client(plugin_manager, signed_in=False) as client:
        assert client.get("/static/core/shell.js").status_code == 401
        assert client.get("/static/shell_widgets/widgets.js").status_code == 401
        css = client.get("/static/core/shell.css")
        assert css.status_code == 200 and css.headers["content-type"] == "text/css; charset=utf-8"
        assert client.get("/static/core/favicon.svg").status_code == 200
        assert client.get("/static/core/shell.css", headers={"Host": "evil.example"}).status_code == 421
        assert client.post("/static/core/shell.css", headers={"Origin": BASE}).status_code == 401


# --- the Content-Security-Policy ------------------------------------------------------


def test_every_answer_carries_the_strict_policy_and_no_html_has_inline_script_or_style(widgets_client):
    signed_out = TestClient(widgets_client.app, base_url=BASE)
    answers = {
        "overview": widgets_client.get("/"),
        "plugin page": widgets_client.get("/widgets"),
        "sign-in page": signed_out.get("/"),
        "wrong token": signed_out.get("/?token=" + "x" * 43),
        "missing page": widgets_client.get("/no-such-page"),
        "api": widgets_client.get("/api/health"),
        "static": widgets_client.get("/static/core/shell.css"),
    }
    for name, response in answers.items():
        assert response.headers.get("content-security-policy") == CONTENT_SECURITY_POLICY, name
        if response.headers["content-type"].startswith("text/html"):
            html = response.text
            assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), name  # every script is a file
            assert "<style" not in html and not re.search(r"\sstyle=", html), name
            assert not re.search(r"\son[a-z]+=", html), name  # no inline event handlers
    for directive in ("default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'",
                      "base-uri 'none'", "form-action 'self'", "object-src 'none'"):
        assert directive in CONTENT_SECURITY_POLICY
    assert "unsafe" not in CONTENT_SECURITY_POLICY


def test_a_page_that_sends_its_own_policy_is_held_to_the_gateways_as_well(plugin_manager):
    async def loose(request: Request) -> HTMLResponse:
        return HTMLResponse("<p>loose</p>", headers={"Content-Security-Policy": "script-src *"})

    _third_party(plugin_manager, "loose", dashboard_pages=lambda: [DashboardPage("/loose", "Loose", loose)])
    with _client(plugin_manager) as client:
        policies = client.get("/loose").headers.get_list("content-security-policy")
    assert sorted(policies) == sorted(["script-src *", CONTENT_SECURITY_POLICY])


def test_a_path_under_the_home_folder_is_shown_with_a_tilde_and_others_as_they_are(tmp_path: Path,
                                                                                     monkeypatch: Any) -> None:
    from kirocrew_core.gateway.shell import _environment, home_relative

    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    assert home_relative(str(tmp_path / "me" / ".kiro" / "settings" / "mcp.json")) == "~/.kiro/settings/mcp.json"
    assert home_relative(str(tmp_path / "mine" / "x.json")) == str(tmp_path / "mine" / "x.json")
    assert home_relative("/etc/passwd") == "/etc/passwd"
    template = _environment(()).from_string("{{ path | home_relative }}")
    assert template.render(path=str(tmp_path / "me" / "a<b>.json")) == "~/a&lt;b&gt;.json"
