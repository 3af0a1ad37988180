"""The dashboard's own HTML: the home page and the refusal page. Every value is escaped.

Plain HTML and a little CSS, no template engine and no script: the home page
is a status report (plugins, doctor results, links to plugin pages), readable
with a screen reader or a text browser.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from typing import TYPE_CHECKING

from kirocrew_core.contributions import Contribution, DashboardPage

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import HTMLResponse

    from kirocrew_core.doctor import DoctorOutcome
    from kirocrew_core.plugins import PluginRecord

_CSS = """
body { font: 16px/1.5 system-ui, sans-serif; margin: 2rem auto; max-width: 60rem; padding: 0 1rem;
       color: #1b1b1b; background: #fff; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2rem; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; vertical-align: top; padding: .35rem .6rem; border-bottom: 1px solid #ddd; }
code, pre { font: 14px/1.4 ui-monospace, monospace; }
pre { margin: .25rem 0 0; white-space: pre-wrap; }
.status { font-weight: 600; }
.ok { color: #17632a; } .warn { color: #7a5200; } .fail, .skipped { color: #a1131a; }
@media (prefers-color-scheme: dark) {
  body { color: #e8e8e8; background: #161616; } th, td { border-color: #333; }
  .ok { color: #6fd58a; } .warn { color: #f2c14e; } .fail, .skipped { color: #ff7b7b; }
}
"""


def _document(title: str, body: str) -> str:
    return (
        "<!doctype html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="referrer" content="no-referrer">\n'
        f"<title>{escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n"
        f"<body>\n<main>\n{body}</main>\n</body>\n</html>\n"
    )


def _status(status: str) -> str:
    return f'<span class="status {escape(status)}">{escape(status)}</span>'


def _pages_section(pages: Sequence[Contribution]) -> str:
    if not pages:
        return "<p>No plugin adds a dashboard page yet.</p>\n"
    items = []
    for contribution in pages:
        page: DashboardPage = contribution.value
        description = f" — {escape(page.description)}" if page.description else ""
        items.append(
            f'<li><a href="{escape(page.path)}">{escape(page.title)}</a>{description} '
            f"<small>({escape(contribution.plugin)})</small></li>"
        )
    return "<ul>\n" + "\n".join(items) + "\n</ul>\n"


def _plugins_section(records: Iterable[PluginRecord]) -> str:
    rows = []
    for record in records:
        error = f"<pre>{escape(record.error)}</pre>" if record.error else ""
        hooks = ", ".join(f"<code>{escape(h)}</code>" for h in record.hooks) or "—"
        rows.append(
            f"<tr><td><code>{escape(record.name)}</code></td><td>{escape(record.distribution)}</td>"
            f"<td>{escape(record.version)}</td><td>{_status(record.status)}{error}</td><td>{hooks}</td></tr>"
        )
    if not rows:
        return "<p>No plugins are installed.</p>\n"
    return (
        "<table>\n"
        '<thead><tr><th scope="col">Plugin</th><th scope="col">Distribution</th>'
        '<th scope="col">Version</th><th scope="col">Status</th><th scope="col">Hooks</th></tr></thead>\n'
        "<tbody>\n" + "\n".join(rows) + "\n</tbody>\n</table>\n"
    )


def _doctor_section(outcomes: Iterable[DoctorOutcome]) -> str:
    rows = []
    for outcome in outcomes:
        result = outcome.result
        detail = f"<pre>{escape(result.detail)}</pre>" if result.detail else ""
        rows.append(
            f"<tr><td><code>{escape(outcome.check.name)}</code></td><td>{_status(result.status)}</td>"
            f"<td>{escape(result.summary)}{detail}</td><td>{escape(outcome.plugin)}</td></tr>"
        )
    if not rows:
        return "<p>No checks are registered.</p>\n"
    return (
        "<table>\n"
        '<thead><tr><th scope="col">Check</th><th scope="col">Status</th>'
        '<th scope="col">Result</th><th scope="col">From</th></tr></thead>\n'
        "<tbody>\n" + "\n".join(rows) + "\n</tbody>\n</table>\n"
    )


def render_home(
    *,
    version: str,
    records: Iterable[PluginRecord],
    outcomes: Iterable[DoctorOutcome],
    pages: Sequence[Contribution],
) -> str:
    """The home page: plugin pages, doctor results, installed plugins."""
    body = (
        f"<h1>kirocrew <small>{escape(version)}</small></h1>\n"
        '<section aria-labelledby="pages"><h2 id="pages">Pages</h2>\n'
        f"{_pages_section(pages)}</section>\n"
        '<section aria-labelledby="doctor"><h2 id="doctor">Doctor</h2>\n'
        f"{_doctor_section(outcomes)}</section>\n"
        '<section aria-labelledby="plugins"><h2 id="plugins">Plugins</h2>\n'
        f"{_plugins_section(records)}</section>\n"
    )
    return _document("kirocrew", body)


_REFUSAL_TITLES = {401: "Sign in to kirocrew", 403: "Request refused", 421: "Wrong address"}


def render_refusal(status: int, code: str, message: str) -> str:
    """The page a browser sees instead of a dashboard page it may not open."""
    title = _REFUSAL_TITLES.get(status, "Request refused")
    body = (
        f"<h1>{escape(title)}</h1>\n<p>{escape(message)}</p>\n"
        "<p>The gateway only serves its owner: the person who ran <code>kirocrew serve</code>. "
        "That command prints an address ending in <code>?token=…</code>; opening it signs you in "
        "for this browser session.</p>\n"
        f"<p><small>error code: <code>{escape(code)}</code></small></p>\n"
    )
    return _document(title, body)


async def home(request: Request) -> HTMLResponse:
    """``GET /``: the doctor checks run in a worker thread, since they spawn ``kiro-cli``."""
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import HTMLResponse

    from kirocrew_core import __version__
    from kirocrew_core.doctor import run_checks

    state = request.app.state.kirocrew
    outcomes = await run_in_threadpool(run_checks, state.pm)
    records = state.pm.loaded_records()
    html = render_home(version=__version__, records=records, outcomes=outcomes, pages=state.pages)
    return HTMLResponse(html, headers={"Cache-Control": "no-store"})
