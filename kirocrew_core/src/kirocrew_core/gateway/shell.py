"""The dashboard shell: Jinja2 templates from core and each plugin, their static files, the CSP.

A page's HTML is server-rendered from templates (autoescaping on) and its behaviour
comes from small JavaScript modules served from the same origin; no inline script or
style anywhere, so :data:`CONTENT_SECURITY_POLICY` can forbid both. Core's templates
load as ``core/<name>`` and a plugin's as ``<package>/<name>``, where ``package`` is
the :attr:`~kirocrew_core.contributions.DashboardPage.package` its pages name; its
``static/`` folder is served at ``/static/<package>/<name>`` and core's at
``/static/core/<name>``. Jinja2 is imported only when a page is first rendered.
"""

from __future__ import annotations

import importlib
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from kirocrew_core.contributions import Contribution, DashboardPage

if TYPE_CHECKING:
    from jinja2 import Environment
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, Response

PRODUCT = "kirocrew"
CORE_PREFIX = "core"
_CORE_DIR = Path(__file__).resolve().parent

#: Sent with every gateway response (HTML pages, refusals, JSON); a page that sends its own
#: policy as well is held to both, so a plugin can tighten it but never loosen it.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "font-src 'self'; connect-src 'self'; object-src 'none'; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'self'"
)

#: The one policy an answer may send *instead of* the dashboard's: an artifact's own HTML or SVG, shown in
#: the Artifacts page's ``<iframe sandbox>``. Stricter in everything (no script, no request, no form, an
#: opaque origin by its ``sandbox`` directive, so no cookie and no reach into the dashboard) but one: the
#: dashboard's own pages may frame it.
SANDBOX_CONTENT_SECURITY_POLICY = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; font-src data:; form-action 'none'; "
    "frame-ancestors 'self'; base-uri 'none'; sandbox"
)

#: The static files served without the owner's credential: the sign-in page's stylesheet and icon.
#: They hold no data, and without them the page that tells a stranger how to sign in is unstyled.
PUBLIC_STATIC_PATHS = frozenset({"/static/core/shell.css", "/static/core/favicon.svg"})

#: The file types a static folder may serve, and their ``Content-Type``; anything else is 404.
STATIC_TYPES: Mapping[str, str] = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
    ".txt": "text/plain; charset=utf-8",
}
#: Static URLs carry no version, so a browser revalidates each file (ETag, 304) before using it:
#: an upgraded plugin's script is never mixed with an old copy of another.
STATIC_CACHE_CONTROL = "no-cache"


@dataclass(frozen=True)
class NavItem:
    """One link of the navigation."""

    path: str
    title: str

    def current_for(self, path: str) -> str | None:
        """The link's ``aria-current`` on the page at ``path``: ``page`` on its own page,
        ``true`` on a page below it (``/things/42`` under ``/things``), else none."""
        if path == self.path:
            return "page"
        if self.path != "/" and path.startswith(self.path.rstrip("/") + "/"):
            return "true"
        return None


def package_dir(package: str) -> Path:
    """The folder of the importable package ``package``, which holds its ``templates/`` and ``static/``.

    :raises ValueError: ``package`` is reserved, not importable, or a module rather than a package.
    """
    if not package or package == CORE_PREFIX or "/" in package:
        raise ValueError(f"{package!r} cannot name a dashboard package")
    try:
        module = importlib.import_module(package)
    except ImportError as exc:
        raise ValueError(f"dashboard package {package!r} cannot be imported: {exc}") from exc
    locations = list(getattr(module, "__path__", []))
    if not locations:
        raise ValueError(f"{package!r} is a module, not a package with templates/ and static/ folders")
    return Path(locations[0]).resolve()


def is_listed(page: DashboardPage) -> bool:
    """Whether ``page`` is linked from the navigation and the Overview.

    A path with parameters (``/things/{id}``) names many pages and no single one to
    link to; other pages link to it instead.
    """
    return "{" not in page.path


class Shell:
    """The template environment, the static folders and the navigation of one gateway app."""

    def __init__(self, packages: Mapping[str, Path], nav: Sequence[NavItem]) -> None:
        self.roots: dict[str, Path] = {CORE_PREFIX: _CORE_DIR, **packages}
        self.nav = tuple(nav)
        self._env: Environment | None = None

    @classmethod
    def for_pages(cls, pages: Iterable[Contribution]) -> Shell:
        """The shell for the accepted pages: Overview first, then each page in order."""
        nav = [NavItem("/", "Overview")]
        packages: dict[str, Path] = {}
        for contribution in pages:
            page: DashboardPage = contribution.value
            if is_listed(page):
                nav.append(NavItem(page.path, page.title))
            if page.package:
                packages[page.package] = package_dir(page.package)
        return cls(packages, nav)

    @property
    def env(self) -> Environment:
        if self._env is None:
            self._env = _environment(tuple(sorted(self.roots.items())))
        return self._env

    def static_root(self, package: str) -> Path | None:
        root = self.roots.get(package)
        return None if root is None else root / "static"

    def render(self, template: str, **context: Any) -> str:
        return self.env.get_template(template).render(nav=self.nav, **context)


def home_relative(path: str) -> str:
    """``path`` with the user's home folder written ``~``, as a person reads it (a template filter too).

    Pages show where a file lives without spelling out the home folder, which a screenshot or a
    shared screen would otherwise carry along.
    """
    home, candidate = Path.home(), Path(path)
    return f"~/{candidate.relative_to(home)}" if candidate.is_relative_to(home) else path


def static_url(package: str, name: str) -> str:
    """The URL of ``name`` in ``package``'s static folder (``core`` for the shell's own files)."""
    return f"/static/{package}/{name}"


def _environment(roots: tuple[tuple[str, Path], ...]) -> Environment:
    from jinja2 import Environment, FileSystemLoader, PrefixLoader, StrictUndefined

    from kirocrew_core import __version__

    loader = PrefixLoader({prefix: FileSystemLoader(root / "templates") for prefix, root in roots}, delimiter="/")
    env = Environment(loader=loader, autoescape=True, undefined=StrictUndefined, trim_blocks=True,
                      lstrip_blocks=True)
    env.globals.update(product=PRODUCT, version=__version__, static=static_url, origin_overrides=active_overrides)
    env.filters["home_relative"] = home_relative
    return env


def active_overrides() -> list[tuple[str, str]]:
    """``kirocrew serve --override-origin`` mappings in force, sorted: every page's header announces them."""
    from kirocrew_core.origin_overrides import active

    return sorted(active().mapping.items())


@lru_cache(maxsize=1)
def _core_shell() -> Shell:
    """Core's templates only: for pages drawn before (or without) the app, such as a refusal."""
    return Shell({}, ())


def render_page(request: Request, template: str, *, title: str, status_code: int = 200,
                headers: Mapping[str, str] | None = None, **context: Any) -> HTMLResponse:
    """A dashboard page: ``template`` (``"<package>/<name>"``) rendered inside the shell's layout.

    The template usually ``{% extends "core/base.html" %}`` and fills ``content`` (and
    ``scripts`` for its modules). It sees ``context`` plus ``title``, ``nav``,
    ``current_path``, ``product``, ``version``, ``static(package, name)`` and
    ``origin_overrides()`` (the development routing the header announces). Every
    value is escaped unless the template marks it safe. The answer is never cached.
    """
    from starlette.responses import HTMLResponse

    shell: Shell = request.app.state.kirocrew.shell
    html = shell.render(template, title=title, current_path=request.url.path, signed_in=True, **context)
    return HTMLResponse(html, status_code=status_code, headers={"Cache-Control": "no-store", **(headers or {})})


def render_refusal(status: int, code: str, title: str, message: str) -> str:
    """The page a browser sees instead of a dashboard page it may not open (no navigation, no script)."""
    return _core_shell().render("core/refusal.html", title=title, current_path="", signed_in=False,
                                status=status, code=code, message=message)


# --- static files ------------------------------------------------------------------


async def static_file(request: Request) -> Response:
    """``GET /static/{package}/{path}``: a file of a known type inside that package's ``static/``."""
    from starlette.exceptions import HTTPException
    from starlette.responses import FileResponse, Response

    shell: Shell = request.app.state.kirocrew.shell
    root = shell.static_root(request.path_params["package"])
    found = None if root is None else _static_path(root, request.path_params["path"])
    if found is None:
        raise HTTPException(404, "no such static file")
    path, info = found
    etag = f'"{info.st_mtime_ns:x}-{info.st_size:x}"'
    headers = {"Cache-Control": STATIC_CACHE_CONTROL, "ETag": etag}
    if etag in (t.strip() for t in request.headers.get("if-none-match", "").split(",")):
        return Response(status_code=304, headers=headers)
    media_type = STATIC_TYPES[path.suffix.lower()]
    return FileResponse(path, media_type=media_type, headers=headers, stat_result=info)


def _static_path(root: Path, relative: str) -> tuple[Path, Any] | None:
    """The regular file ``relative`` names under ``root`` and its stat, or ``None``.

    Refused: absolute paths, ``..``, empty or hidden parts, backslashes, types not in
    :data:`STATIC_TYPES`, and anything (a symlink included) that resolves outside ``root``.
    """
    parts = PurePosixPath(relative).parts
    if (not parts or relative.startswith("/") or "\\" in relative
            or any(part in ("", "..") or part.startswith(".") for part in parts)):
        return None
    if PurePosixPath(relative).suffix.lower() not in STATIC_TYPES:
        return None
    try:
        base = root.resolve(strict=True)
        path = (base / relative).resolve(strict=True)
        info = path.stat()
    except OSError:
        return None
    if not path.is_relative_to(base) or not stat.S_ISREG(info.st_mode):
        return None
    return path, info
