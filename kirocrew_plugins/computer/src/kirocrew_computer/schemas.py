"""The ten computer-use tools: strict JSON Schemas, MCP annotations, and their validator.

Schemas are hand-written and bounded everywhere (reference §1.2) so a model can
never send an unbounded string or a coordinate outside the X11/AX range. The
validator enforces exactly what is advertised; cross-field rules (the click
one-of) belong to :mod:`policy`, never to precedence here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kirocrew_computer.errors import Refusal

COORD_MIN, COORD_MAX = -32768, 32767
MAX_TEXT = 10_000
MAX_KEY = 64
MAX_APP = 256
DEFAULT_TEXT_LIMIT = 500
DEFAULT_MAX_NODES = 1200
DEFAULT_MAX_DEPTH = 64

_APP = {"type": "string", "minLength": 1, "maxLength": MAX_APP,
        "description": "Application display name or app id (WM_CLASS / bundle id) from computer_list_apps."}
_INDEX = {"type": "integer", "minimum": 0, "maximum": 100_000,
          "description": "Element index from the latest computer_get_state of this app."}
_COORD = {"type": "number", "minimum": COORD_MIN, "maximum": COORD_MAX}
_BUTTON = {"type": "string", "enum": ["left", "right", "middle"], "default": "left"}
_METHOD = {"type": "string", "enum": ["auto", "accessibility", "app_post", "sky_click", "global"], "default": "auto",
           "description": "How to deliver the click; 'global' moves the real pointer and must be named explicitly."}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


@dataclass(frozen=True)
class ToolDef:
    """One advertised tool; ``read_only`` tools may be auto-approved, none of the others."""

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool
    destructive: bool
    needs_app: bool


TOOLS: tuple[ToolDef, ...] = (
    ToolDef("computer_list_apps", "List running applications with windows that policy lets you use.",
            _object({}, []), read_only=True, destructive=False, needs_app=False),
    ToolDef("computer_get_state",
            "Read an app's key window: an indexed accessibility tree (and, when allowed, a screenshot path). "
            "Call this before acting; indices are valid for 90 s.",
            _object({"app": _APP,
                     "text_limit": {"type": "integer", "minimum": 1, "maximum": 20_000, "default": DEFAULT_TEXT_LIMIT},
                     "max_tree_nodes": {"type": "integer", "minimum": 1, "maximum": 5000, "default": DEFAULT_MAX_NODES},
                     "max_tree_depth": {"type": "integer", "minimum": 1, "maximum": 128, "default": DEFAULT_MAX_DEPTH},
                     "screenshot": {"type": "boolean"}}, ["app"]),
            read_only=True, destructive=False, needs_app=True),
    ToolDef("computer_click",
            "Click an element (element_index) or a screen point (x and y); exactly one of the two.",
            _object({"app": _APP, "element_index": _INDEX, "x": _COORD, "y": _COORD,
                     "click_count": {"type": "integer", "minimum": 1, "maximum": 3, "default": 1},
                     "mouse_button": _BUTTON, "click_method": _METHOD}, ["app"]),
            read_only=False, destructive=True, needs_app=True),
    ToolDef("computer_drag", "Drag from one screen point to another inside the app's window.",
            _object({"app": _APP, "from_x": _COORD, "from_y": _COORD, "to_x": _COORD, "to_y": _COORD,
                     "mouse_button": _BUTTON, "click_method": _METHOD,
                     "steps": {"type": "integer", "minimum": 1, "maximum": 512, "default": 1},
                     "path": {"type": "string", "enum": ["straight", "curved"], "default": "straight"}},
                    ["app", "from_x", "from_y", "to_x", "to_y"]),
            read_only=False, destructive=True, needs_app=True),
    ToolDef("computer_type_text", "Type text into an element (focuses it first). Refused on password fields.",
            _object({"app": _APP, "text": {"type": "string", "maxLength": MAX_TEXT}, "element_index": _INDEX},
                    ["app", "text", "element_index"]),
            read_only=False, destructive=True, needs_app=True),
    ToolDef("computer_press_key",
            "Press a key or chord (e.g. 'ctrl+s', 'shift+tab', 'escape') in an element. Refused on password fields.",
            _object({"app": _APP, "key": {"type": "string", "minLength": 1, "maxLength": MAX_KEY},
                     "element_index": _INDEX}, ["app", "key", "element_index"]),
            read_only=False, destructive=True, needs_app=True),
    ToolDef("computer_set_value", "Set an element's value directly. Refused on password fields.",
            _object({"app": _APP, "element_index": _INDEX, "value": {"type": "string", "maxLength": MAX_TEXT}},
                    ["app", "element_index", "value"]),
            read_only=False, destructive=True, needs_app=True),
    ToolDef("computer_scroll", "Scroll an element by pages.",
            _object({"app": _APP, "element_index": _INDEX,
                     "direction": {"type": "string", "enum": ["up", "down", "left", "right"]},
                     "pages": {"type": "number", "minimum": 0.1, "maximum": 20, "default": 1.0}},
                    ["app", "element_index", "direction"]),
            read_only=False, destructive=True, needs_app=True),
    ToolDef("computer_perform_action", "Perform one of an element's advertised actions (shown in [brackets]).",
            _object({"app": _APP, "element_index": _INDEX,
                     "action": {"type": "string", "minLength": 1, "maxLength": MAX_KEY}},
                    ["app", "element_index", "action"]),
            read_only=False, destructive=True, needs_app=True),
    ToolDef("computer_end_turn", "Forget this session's cached window snapshots (optional; they also expire).",
            _object({}, []), read_only=False, destructive=False, needs_app=False),
)
TOOLS_BY_NAME = {tool.name: tool for tool in TOOLS}
READ_ONLY_TOOLS = frozenset(tool.name for tool in TOOLS if tool.read_only)
MUTATING_TOOLS = frozenset(tool.name for tool in TOOLS if tool.destructive)


def _problem(schema: dict[str, Any], value: Any, where: str) -> str | None:
    kind = schema.get("type")
    if kind == "string":
        if not isinstance(value, str):
            return f"{where} must be a string"
        if len(value) < schema.get("minLength", 0):
            return f"{where} must not be empty"
        if len(value) > schema.get("maxLength", MAX_TEXT):
            return f"{where} is longer than {schema.get('maxLength', MAX_TEXT)} characters"
        if "\x00" in value:
            return f"{where} contains a NUL character"
    elif kind == "boolean":
        if not isinstance(value, bool):
            return f"{where} must be true or false"
    elif kind in ("integer", "number"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{where} must be a number"
        if kind == "integer" and not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
            return f"{where} must be an integer"
        if not math.isfinite(value):
            return f"{where} must be finite"
        low, high = schema.get("minimum"), schema.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            return f"{where} must be between {low} and {high}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where} must be one of {', '.join(schema['enum'])}"
    return None


def validate(tool_name: str, arguments: Any) -> dict[str, Any]:
    """The arguments with defaults filled in, or :class:`Refusal` ``invalid_arguments``/``unknown_tool``."""
    tool = TOOLS_BY_NAME.get(tool_name) if isinstance(tool_name, str) else None
    if tool is None:
        raise Refusal("no such computer-use tool; tools/list names the ten tools", "unknown_tool")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise Refusal("arguments must be a JSON object", "invalid_arguments")
    schema = tool.input_schema
    properties: dict[str, Any] = schema["properties"]
    unknown = sorted(str(key)[:64] for key in arguments if key not in properties)
    if unknown:
        raise Refusal(f"unknown argument(s) for {tool.name}: {', '.join(unknown)}", "invalid_arguments")
    missing = [key for key in schema["required"] if key not in arguments]
    if missing:
        raise Refusal(f"{tool.name} needs {', '.join(missing)}", "invalid_arguments")
    clean: dict[str, Any] = {}
    for key, sub in properties.items():
        if key in arguments:
            problem = _problem(sub, arguments[key], key)
            if problem:
                raise Refusal(problem, "invalid_arguments")
            value = arguments[key]
            clean[key] = int(value) if sub.get("type") == "integer" else value
        elif "default" in sub:
            clean[key] = sub["default"]
    return clean


def tool_annotations(tool: ToolDef) -> dict[str, Any]:
    """MCP ``ToolAnnotations`` fields for ``tool`` (clients use them to decide on prompting)."""
    return {"title": tool.name.replace("_", " "), "read_only_hint": tool.read_only,
            "destructive_hint": tool.destructive, "idempotent_hint": tool.read_only, "open_world_hint": False}
