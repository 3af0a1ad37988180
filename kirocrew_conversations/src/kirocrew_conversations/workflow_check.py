"""The static check a workflow script passes before it runs: the second line of defence, not the first.

A workflow runs in its own process under the ``read_only`` sandbox with restricted builtins
(:mod:`kirocrew_conversations.workflow_runner`); this check rejects the obvious escapes early,
with a stable code and the line, so an author sees why before anything starts. It is an AST
walk: no import statements, none of the names that reach the interpreter's machinery, no
dunder names, no attribute starting with ``_`` (ctx's own insides included), none of the frame
and code attributes a coroutine or traceback exposes, no ``str.format`` (its fields read
attributes), a size cap, a literal ``META`` dict and an ``async def workflow(ctx)``. It also refuses
a script that names one of the ``ctx`` ports this host does not wire (:data:`UNWIRED_PORTS`: only
``nudge`` is), so it fails here with a code rather than mid-run.
"""

from __future__ import annotations

import ast
from typing import Any

from kirocrew_core.errors import KirocrewError

MAX_SOURCE_BYTES = 262144
FORBIDDEN_NAMES = frozenset({
    "eval", "exec", "open", "compile", "getattr", "setattr", "delattr", "globals", "locals", "vars",
    "__import__", "breakpoint", "input", "help", "memoryview", "type", "object", "super", "classmethod",
    "staticmethod", "property",
})
# Attributes that lead from a value to frames, code or globals without a dunder in sight.
FORBIDDEN_ATTRIBUTE_PREFIXES = ("f_", "gi_", "cr_", "ag_", "tb_", "co_")
FORBIDDEN_ATTRIBUTES = frozenset({"format", "format_map", "mro"})
#: The ``ctx`` ports a workflow written for the original may name that kirocrew does not wire (``nudge`` is wired).
UNWIRED_PORTS = frozenset({"approve", "cron", "knowledge", "learn", "memory", "send_message", "send_slack",
                           "workflow"})


class WorkflowRejected(KirocrewError):
    """A script the check refuses: ``code`` says why, ``line`` where (0 when it is the whole script)."""

    exit_code = 2
    where = "validate"

    def __init__(self, message: str, *, code: str, line: int = 0) -> None:
        super().__init__(f"line {line}: {message}" if line else message, code=code)
        self.line = line


def check_source(source: str) -> dict[str, Any]:
    """The script's ``META`` when ``source`` passes the check; :class:`WorkflowRejected` otherwise."""
    if len(source.encode("utf-8", "surrogatepass")) > MAX_SOURCE_BYTES:
        raise WorkflowRejected(f"the script is larger than {MAX_SOURCE_BYTES} bytes", code="workflow_too_large")
    try:
        tree = ast.parse(source, filename="<workflow>")
    except SyntaxError as exc:
        raise WorkflowRejected(f"not valid Python: {exc.msg}", code="workflow_syntax_error",
                               line=exc.lineno or 0) from None
    except ValueError as exc:  # a NUL byte
        raise WorkflowRejected(f"not valid Python: {exc}", code="workflow_syntax_error") from None
    for node in ast.walk(tree):
        _check_node(node)
    meta = _meta(tree)
    _ports(tree, _entry(tree))
    return meta


def _check_node(node: ast.AST) -> None:
    line = getattr(node, "lineno", 0)
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        raise WorkflowRejected("a workflow may not import anything; ctx offers what it needs",
                               code="workflow_import_forbidden", line=line)
    if isinstance(node, ast.Name):
        _check_name(node.id, line)
    elif isinstance(node, ast.Attribute):
        attr = node.attr
        if attr.startswith("_") or attr.startswith(FORBIDDEN_ATTRIBUTE_PREFIXES) or attr in FORBIDDEN_ATTRIBUTES:
            raise WorkflowRejected(f"the attribute {attr!r} is not allowed in a workflow",
                                   code="workflow_attribute_forbidden", line=line)
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        _check_name(node.name, line)
    elif isinstance(node, (ast.arg, ast.keyword)) and node.arg is not None:
        _check_name(node.arg, line)
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
        for name in node.names:
            _check_name(name, line)
    elif isinstance(node, ast.ExceptHandler) and node.name:
        _check_name(node.name, line)


def _check_name(name: str, line: int) -> None:
    if _dunder(name):
        raise WorkflowRejected(f"the name {name!r} is not allowed in a workflow (no dunders)",
                               code="workflow_dunder_forbidden", line=line)
    if name in FORBIDDEN_NAMES:
        raise WorkflowRejected(f"the name {name!r} is not allowed in a workflow", code="workflow_name_forbidden",
                               line=line)


def _dunder(name: str) -> bool:
    return name.startswith("__") or (name.startswith("_") and name.endswith("__"))


def _meta(tree: ast.Module) -> dict[str, Any]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "META" for t in node.targets):
            if not isinstance(node.value, ast.Dict):
                raise WorkflowRejected("META must be a literal dict", code="workflow_meta_invalid", line=node.lineno)
            try:
                meta = ast.literal_eval(node.value)
            except ValueError:
                raise WorkflowRejected("META must be a literal dict (constants only)", code="workflow_meta_invalid",
                                       line=node.lineno) from None
            if not all(isinstance(key, str) for key in meta):
                raise WorkflowRejected("META's keys must be strings", code="workflow_meta_invalid", line=node.lineno)
            return dict(meta)
    raise WorkflowRejected("the script has no top-level META = {...}", code="workflow_meta_missing")


def _entry(tree: ast.Module) -> str:
    """The name ``async def workflow`` gives its one argument (ctx)."""
    for node in tree.body:
        if isinstance(node, ast.AsyncFunctionDef) and node.name == "workflow":
            args = node.args
            if (len(args.args) == 1 and not args.posonlyargs and not args.kwonlyargs and args.vararg is None
                    and args.kwarg is None):
                return args.args[0].arg
            raise WorkflowRejected("workflow must take exactly one argument, ctx", code="workflow_entry_invalid",
                                   line=node.lineno)
    raise WorkflowRejected("the script has no top-level async def workflow(ctx)", code="workflow_entry_missing")


def _ports(tree: ast.Module, ctx: str) -> None:
    """Refuse ``ctx.<port>`` for a port this host does not wire (by the entry's name for ctx, anywhere: a helper
    handed ctx usually keeps its name)."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == ctx
                and node.attr in UNWIRED_PORTS):
            raise WorkflowRejected(f"{ctx}.{node.attr}: the {node.attr!r} port is not available in kirocrew (of the "
                                   "original's ports only nudge is wired)", code="workflow_port_unavailable",
                                   line=node.lineno)
