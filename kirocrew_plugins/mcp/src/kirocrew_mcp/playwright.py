"""One Playwright MCP backend per session, whatever the scopes call it.

Users install Microsoft's Playwright MCP server under many keys (``playwright``,
``@playwright/mcp``, ``npm:@playwright/mcp``, ``pw``…), often in more than one scope.
kiro-cli starts every entry it is given, so three keys meant three browsers fighting
over one profile. What identifies the server is what an entry launches, not its key:

- ``launch_target(entry, resolve=None) -> str | None``: ``"npm:<package>"`` for a
  package started through a runner (``npx``, ``bunx``, ``pnpx``, ``pnpm dlx``,
  ``yarn dlx``, ``npm exec``, ``bun x``; the version is dropped) or a ``node`` script
  inside that package, ``"docker:<image>"`` for ``docker run IMAGE``, and for a bare
  command the package whose ``node_modules`` folder the resolved executable lives in
  (``resolve`` maps an entry to its resolved path; the package's own bin names count
  too). None when nothing is recognised.
- ``is_playwright(entry, resolve=None) -> bool``: whether that target is Playwright MCP.
- ``converge_playwright_servers(config, *, reserved=(), resolve=None) -> dict[str, str]``:
  folds every Playwright entry of ``config["mcpServers"]`` onto :data:`CANONICAL_KEY`
  (the alias of its package, ``playwright-mcp``), in place, and rewrites ``@old``
  references; returns ``{old key: new key}``. The entry kept is the one already under
  the canonical key, else the first in map order (the others launch the same backend
  again); muted in any of them means muted, as for any one server. Idempotent.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from typing import Any

from kirocrew_mcp.aliases import mcp_server_alias, rewrite_refs

PACKAGE = "@playwright/mcp"
#: The targets that are the Playwright MCP server (its npm package and its container image).
TARGETS = frozenset({f"npm:{PACKAGE}", "docker:mcr.microsoft.com/playwright/mcp"})
CANONICAL_KEY = mcp_server_alias(f"npm:{PACKAGE}")
#: The executables the package installs.
_BINARIES = {"mcp-server-playwright": PACKAGE, "playwright-mcp": PACKAGE}
#: Runners that take the package as their first operand, and those that take it after a subcommand.
_RUNNERS = frozenset({"npx", "bunx", "pnpx"})
_SUB_RUNNERS = {"pnpm": {"dlx"}, "yarn": {"dlx"}, "npm": {"exec", "x"}, "bun": {"x"}}
#: Runner options that take a value (``npx --package X``), so the value is not the package.
_VALUED = frozenset({"-c", "--call", "--registry", "--cache", "--userconfig"})
_EXE_SUFFIXES = (".exe", ".cmd", ".bat", ".ps1")

Resolve = Callable[[dict[str, Any]], "str | None"]


def _stem(command: str) -> str:
    # String work, not pathlib: every listing runs this over every server.
    name = command.replace("\\", "/").rstrip("/").rpartition("/")[2].lower()
    for suffix in _EXE_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _package_name(spec: str) -> str:
    """``@scope/name@1.2`` -> ``@scope/name``; ``name@latest`` -> ``name``."""
    if spec.startswith("npm:"):
        spec = spec[4:]
    if spec.startswith("@"):
        scope, _, rest = spec.partition("/")
        return f"{scope}/{rest.partition('@')[0]}" if rest else spec
    return spec.partition("@")[0]


def _first_operand(args: list[str]) -> str | None:
    skip = False
    for at, arg in enumerate(args):
        if skip:
            skip = False
            continue
        # ``--package X`` names the package the operand (then a bin name) comes from.
        if arg.startswith("--package="):
            return arg.partition("=")[2]
        if arg in ("-p", "--package"):
            return args[at + 1] if at + 1 < len(args) else None
        if arg in _VALUED:
            skip = True
            continue
        if arg.startswith("-"):
            continue
        return arg
    return None


def _from_path(path: str) -> str | None:
    """The npm package a file sits in (``…/node_modules/@scope/name/…``), or None."""
    if "node_modules" not in path:
        return None
    parts = [p for p in path.replace("\\", "/").split("/") if p]
    for at in range(len(parts) - 1, -1, -1):
        if parts[at] == "node_modules" and at + 1 < len(parts) and parts[at + 1] != ".bin":
            first = parts[at + 1]
            if first.startswith("@") and at + 2 < len(parts):
                return f"{first}/{parts[at + 2]}"
            return first
    return None


def _linked_package(resolved: str, memo: dict[str, str | None] | None) -> str | None:
    """The package an executable is (or links into); each path is looked at once per ``memo``."""
    if memo is not None and resolved in memo:
        return memo[resolved]
    package = _from_path(resolved)
    if package is None and os.path.islink(resolved):
        package = _from_path(os.path.realpath(resolved))
    if memo is not None:
        memo[resolved] = package
    return package


def launch_target(entry: dict[str, Any], resolve: Resolve | None = None,
                  memo: dict[str, str | None] | None = None) -> str | None:
    """What ``entry`` starts, as ``npm:<package>`` or ``docker:<image>``; see the module docstring."""
    command = entry.get("command")
    raw_args = entry.get("args")
    args = [a for a in raw_args if isinstance(a, str)] if isinstance(raw_args, list) else []
    if not isinstance(command, str) or not command.strip():
        return None
    stem = _stem(command)
    operand: str | None = None
    if stem in _RUNNERS:
        operand = _first_operand(args)
    elif stem in _SUB_RUNNERS and args and args[0] in _SUB_RUNNERS[stem]:
        operand = _first_operand(args[1:])
    elif stem in ("docker", "podman") and args[:1] == ["run"]:
        image = _first_operand(args[1:])
        return f"docker:{image.partition(':')[0].partition('@')[0]}" if image else None
    elif stem in ("node", "nodejs", "bun", "deno"):
        script = _first_operand(args)
        package = _from_path(script) if script else None
        return f"npm:{package}" if package else None
    if operand is not None:
        return f"npm:{_package_name(operand)}"
    if stem in _BINARIES:
        return f"npm:{_BINARIES[stem]}"
    resolved = resolve(entry) if resolve is not None else None
    if resolved:
        # An installed package's bin is a symlink into its node_modules folder; only those need resolving.
        package = _linked_package(resolved, memo)
        if package:
            return f"npm:{package}"
    return None


def is_playwright(entry: Any, resolve: Resolve | None = None, memo: dict[str, str | None] | None = None) -> bool:
    """Whether ``entry`` starts the Playwright MCP server."""
    if not isinstance(entry, dict):
        return False
    command, args = entry.get("command"), entry.get("args")
    words = [command, *(args if isinstance(args, list) else ())]
    if any(isinstance(w, str) and "playwright" in w.lower() for w in words):
        return launch_target(entry, resolve, memo) in TARGETS
    # Named nowhere: only an executable that links into the installed package can still be it.
    resolved = resolve(entry) if resolve is not None and isinstance(command, str) else None
    return resolved is not None and _linked_package(resolved, memo) == PACKAGE


def _muted(entry: dict[str, Any]) -> bool:
    return entry.get("disabled", False) is not False


def converge_playwright_servers(config: dict[str, Any], *, reserved: Collection[str] = (),
                                resolve: Resolve | None = None) -> dict[str, str]:
    """Fold every Playwright entry onto one key, in place; return ``{old: new}`` (see the module docstring)."""
    servers = config.get("mcpServers")
    if not isinstance(servers, dict):
        return {}
    memo: dict[str, str | None] = {}
    members = [k for k, e in servers.items() if k not in reserved and is_playwright(e, resolve, memo)]
    if not members or members == [CANONICAL_KEY]:
        return {}
    keeper = CANONICAL_KEY if CANONICAL_KEY in members else members[0]
    target = CANONICAL_KEY
    if target in servers and target not in members or target in reserved:
        n = 2
        while f"{CANONICAL_KEY}-{n}" in servers and f"{CANONICAL_KEY}-{n}" not in members \
                or f"{CANONICAL_KEY}-{n}" in reserved:
            n += 1
        target = f"{CANONICAL_KEY}-{n}"
    kept = servers[keeper]
    if any(_muted(servers[k]) for k in members):  # one server now, so tightest-wins as for any other
        kept["disabled"] = True
    renames = {k: target for k in members if k != target}
    rebuilt: dict[str, Any] = {}
    for key, entry in servers.items():
        if key in members:
            if target not in rebuilt:
                rebuilt[target] = kept  # at the place of the first member, so the order stays stable
            continue
        rebuilt[key] = entry
    servers.clear()
    servers.update(rebuilt)
    rewrite_refs(config, renames)
    return renames


__all__ = ["CANONICAL_KEY", "PACKAGE", "TARGETS", "converge_playwright_servers", "is_playwright", "launch_target"]
