"""``kirocrew plugin new``: a complete, installable third-party plugin distribution, written from templates.

The templates (``templates/``, package data) are the one source of the worked example: the plugin guide's
example page shows the files :func:`render_plugin` writes for ``acme`` with every contribution, and a test
keeps the two equal. They use ``<< >>`` and ``<% %>`` as Jinja delimiters, so the ``{{ }}`` of the page
template they write passes through untouched.

Bad input changes nothing: the name and the target are checked first, the files are written into a fresh
temporary folder beside the target and renamed into place in one step, and that folder is removed on any
failure.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kirocrew_core.errors import BadInputError, KirocrewError

#: The seams a generated plugin can contribute (the command's options, in this order).
CONTRIBUTIONS = ("page", "tool", "server", "doctor")
#: What ``kirocrew plugin new NAME`` writes when no contribution is chosen.
DEFAULT_CONTRIBUTIONS = ("page", "tool")
#: A plugin name: lowercase ASCII letters, digits and single underscores, starting with a letter. It becomes the
#: entry point, the ``kirocrew-NAME`` distribution, the ``kirocrew_NAME`` package and its tools' ``NAME_`` prefix.
NAME_PATTERN = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
MAX_NAME_LENGTH = 32
#: Names of kirocrew's own distributions (``kirocrew-<name>``: the open edition's, the companion edition's and the
#: test kit's), which a third-party plugin must not take; a test keeps it equal to the repository's members.
RESERVED_NAMES = frozenset({"core", "mcp", "connections", "conversations", "computer", "cron", "companion",
                            "testing"})


_SUMMARIES = {"page": "a dashboard page", "tool": "a kirocrew-core tool", "server": "an MCP server of its own",
              "doctor": "a doctor check"}
_HOOK_TYPES = {"page": ("DashboardPage",), "tool": ("CoreMcpTool",), "server": ("HostedMcpServer", "ManagedMcpServer"),
               "doctor": ("DoctorCheck",)}


@dataclass(frozen=True)
class _File:
    """One generated file: where it goes (a template of its own), its template, and which seams it needs."""

    path: str
    template: str
    needs: frozenset[str] = frozenset()  # written when any of these is chosen (none: always)


def _file(path: str, template: str, *needs: str) -> _File:
    return _File(path, template, frozenset(needs))


#: Every file a plugin may get, in the order the worked example shows them.
FILES = (
    _file("pyproject.toml", "pyproject.toml.j2"),
    _file("README.md", "README.md.j2"),
    _file("src/{package}/__init__.py", "package/__init__.py.j2"),
    _file("src/{package}/plugin.py", "package/plugin.py.j2"),
    _file("src/{package}/greeting.py", "package/greeting.py.j2", "tool", "page"),
    _file("src/{package}/tools.py", "package/tools.py.j2", "tool"),
    _file("src/{package}/page.py", "package/page.py.j2", "page"),
    _file("src/{package}/templates/{name}.html", "package/templates/page.html.j2", "page"),
    _file("src/{package}/static/{name}.js", "package/static/page.js.j2", "page"),
    _file("src/{package}/server.py", "package/server.py.j2", "server"),
    _file("src/{package}/command.py", "package/command.py.j2", "server"),
    _file("src/{package}/doctor.py", "package/doctor.py.j2", "doctor"),
    _file("tests/conftest.py", "tests/conftest.py.j2"),
    _file("tests/test_page.py", "tests/test_page.py.j2", "page"),
    _file("tests/test_tool.py", "tests/test_tool.py.j2", "tool"),
    _file("tests/test_server.py", "tests/test_server.py.j2", "server"),
    _file("tests/test_doctor.py", "tests/test_doctor.py.j2", "doctor"),
)


def check_name(name: str) -> str:
    """``name`` if it may name a new plugin, else :class:`BadInputError` saying why (nothing is written)."""
    if not (len(name) <= MAX_NAME_LENGTH and NAME_PATTERN.fullmatch(name)):
        raise BadInputError(
            f"{name!r} is not a plugin name: use at most {MAX_NAME_LENGTH} lowercase letters, digits and single "
            "underscores, starting with a letter (say acme or acme_tools)", code="invalid_plugin_name")
    if name in RESERVED_NAMES:
        raise BadInputError(f"{name!r} is taken by kirocrew itself (kirocrew-{name}); choose another name",
                            code="plugin_name_reserved")
    return name


def choose(chosen: Iterable[str]) -> tuple[str, ...]:
    """The contributions to write, in :data:`CONTRIBUTIONS` order: ``chosen``, or the default when empty."""
    wanted = set(chosen)
    unknown = wanted - set(CONTRIBUTIONS)
    if unknown:
        raise BadInputError(f"unknown contributions {sorted(unknown)}; choose from {list(CONTRIBUTIONS)}",
                            code="bad_contribution")
    return tuple(part for part in CONTRIBUTIONS if part in wanted) or DEFAULT_CONTRIBUTIONS


def render_plugin(name: str, contributions: Iterable[str]) -> dict[str, str]:
    """``{relative path: text}`` of every file of plugin ``name`` with ``contributions``, in :data:`FILES` order."""
    import jinja2

    check_name(name)
    parts = choose(contributions)
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("kirocrew_core.scaffold", "templates"),
        variable_start_string="<<", variable_end_string=">>",
        block_start_string="<%", block_end_string="%>",
        comment_start_string="<#", comment_end_string="#>",
        keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
        undefined=jinja2.StrictUndefined, autoescape=False,  # it writes source code, not HTML for a browser
    )
    context: dict[str, object] = {
        "name": name,
        "title": name.replace("_", " ").title(),
        "distribution": f"kirocrew-{name.replace('_', '-')}",
        "package": f"kirocrew_{name}",
        "server_name": f"kirocrew-{name.replace('_', '-')}",
        "server_command": f"mcp-{name.replace('_', '-')}",
        "contributions": parts,
        "summary": ", ".join(_SUMMARIES[part] for part in parts),
        # The contribution types plugin.py's hooks return (for its annotations), sorted as ruff's isort would.
        "hook_types": sorted(kind for part in parts for kind in _HOOK_TYPES[part]),
        **{part: part in parts for part in CONTRIBUTIONS},
    }
    files: dict[str, str] = {}
    for spec in FILES:
        if spec.needs and not spec.needs & set(parts):
            continue
        path = spec.path.format(package=context["package"], name=name)
        files[path] = environment.get_template(spec.template).render(context)
    return files


def default_target(name: str, cwd: Path | None = None) -> Path:
    """Where ``kirocrew plugin new NAME`` writes without ``--dir``: ``./kirocrew-NAME``."""
    return (cwd or Path.cwd()) / f"kirocrew-{name.replace('_', '-')}"


def write_plugin(target: Path, files: Mapping[str, str]) -> Path:
    """Write ``files`` as a new folder ``target`` in one rename; the folder's absolute path.

    ``target`` must not exist, or be an empty folder; its parent must exist. Refusals are
    :class:`BadInputError` (``target_exists``, ``target_parent_missing``, ``target_unreadable``) and write
    nothing; so does a failure to write (``target_unwritable``: a read-only or full disk), which removes what it
    had written.
    """
    target = Path(os.path.abspath(target))
    parent = target.parent
    _check_target(target)
    if not parent.is_dir():
        raise BadInputError(f"{parent} is not an existing folder; create it first", code="target_parent_missing")
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".new", dir=parent))
    except OSError as exc:
        raise KirocrewError(f"cannot write in {parent} ({exc.strerror}); nothing was written",
                            code="target_unwritable") from exc
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(staging, 0o777 & ~umask)  # mkdtemp's folder is 0700; a source tree is as readable as any other
        try:
            for relative, text in files.items():
                path = staging / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise KirocrewError(f"cannot write the plugin's files beside {target} ({exc}); nothing was written",
                                code="target_unwritable") from exc
        try:
            # rename(2) takes the place of a missing or empty folder in one step, and fails for any other.
            os.rename(staging, target)
        except OSError as exc:
            raise BadInputError(f"{target} appeared while the plugin was written ({exc.strerror}); nothing was "
                                "written there", code="target_exists") from exc
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _check_target(target: Path) -> None:
    try:
        info = target.lstat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise BadInputError(f"{target} cannot be checked ({exc.strerror}); nothing was written",
                            code="target_unreadable") from exc
    import stat

    if stat.S_ISDIR(info.st_mode):
        try:
            empty = not any(target.iterdir())
        except OSError as exc:
            raise BadInputError(f"{target} cannot be listed ({exc.strerror}); nothing was written",
                                code="target_unreadable") from exc
        if empty:
            return
    raise BadInputError(f"{target} already exists and is not an empty folder; choose another --dir",
                        code="target_exists")
