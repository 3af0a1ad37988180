"""kirocrew-connections reaches kirocrew-mcp only through ``kirocrew_mcp.public``."""

from __future__ import annotations

import ast
from pathlib import Path

import kirocrew_connections

PUBLIC = "kirocrew_mcp.public"


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports, at any depth (function-local and TYPE_CHECKING imports too)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
            if node.module == "kirocrew_mcp":  # ``from kirocrew_mcp import render`` names a module
                found += [(node.lineno, f"kirocrew_mcp.{alias.name}") for alias in node.names]
    return found


def test_connections_imports_nothing_of_kirocrew_mcp_but_its_public_module():
    package = Path(kirocrew_connections.__file__).parent
    sources = sorted(package.rglob("*.py"))
    assert sources, "no kirocrew_connections sources found"
    offenders = [
        f"{path.relative_to(package)}:{line}: {module}"
        for path in sources
        for line, module in _imported_modules(path)
        if (module == "kirocrew_mcp" or module.startswith("kirocrew_mcp.")) and module != PUBLIC
    ]
    assert offenders == []


def test_the_public_module_names_what_connections_uses():
    import kirocrew_mcp.public as public

    package = Path(kirocrew_connections.__file__).parent
    used = {
        alias.name
        for path in package.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module == PUBLIC
        for alias in node.names
    }
    assert used and used <= set(public.__all__)
    assert all(hasattr(public, name) for name in public.__all__)
