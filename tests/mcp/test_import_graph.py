"""kirocrew-mcp's modules import one another without a cycle, function-local imports included.

A cycle hidden behind a function-local import still ties two modules into one:
neither can be read, tested or moved alone. Imports under ``if TYPE_CHECKING:``
are not counted (they never run).
"""

from __future__ import annotations

import ast
from pathlib import Path

import kirocrew_mcp

PACKAGE = "kirocrew_mcp"


def _runtime_imports(tree: ast.AST) -> set[str]:
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for branch in node.orelse:
                visit(branch)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    root = Path(kirocrew_mcp.__file__).parent
    modules = {f"{PACKAGE}.{path.stem}": path for path in root.glob("*.py") if path.stem != "__init__"}
    return {
        name: {m for m in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))) if m in modules} - {name}
        for name, path in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                walk(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b", "a"]]


def test_kirocrew_mcp_has_no_import_cycle():
    graph = import_graph()
    assert {"kirocrew_mcp.probe", "kirocrew_mcp.probe_http", "kirocrew_mcp.render", "kirocrew_mcp.apps"} <= set(graph)
    assert cycles(graph) == []
