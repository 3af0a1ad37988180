"""App policy and the input-target floors; every decision raises :class:`Refusal` with a stable code.

The keystone's lists can only make computer use narrower: ``allowed_apps``
(when non-empty) narrows to the listed apps, ``extra_denied_apps`` adds
refusals. kirocrew's own windows are refused whatever the lists say, so an
agent can never click the control that enabled it.
"""

from __future__ import annotations

from typing import Any

from kirocrew_computer.backend import AppInfo, Node, WindowState
from kirocrew_computer.errors import Refusal
from kirocrew_computer.keystone import Keystone

#: Substrings (lower case, spaces removed) that mark kirocrew's own app id, process name or window title.
OWN_MARKERS = ("kirocrew",)
#: Tools whose input lands in the target element; a password field is never one.
TEXT_INPUT_TOOLS = frozenset({"computer_type_text", "computer_set_value", "computer_press_key"})


def _squash(text: str) -> str:
    return "".join(text.lower().split()).replace("-", "").replace("_", "")


def is_own_window(app: AppInfo, title: str = "") -> bool:
    """kirocrew's own app, matched on app id, process name and window title."""
    return any(marker in _squash(part) for part in (app.app_id, app.name, title) for marker in OWN_MARKERS)


def app_matches(app: AppInfo, wanted: str) -> bool:
    """Whether ``wanted`` (display name or app id, case-insensitive) names ``app``."""
    wanted = wanted.strip().casefold()
    return wanted in (app.name.casefold(), app.app_id.casefold())


def check_app(keystone: Keystone, app: AppInfo, title: str = "") -> None:
    """Refuse ``app`` unless policy lets the agent use it."""
    if is_own_window(app, title):
        raise Refusal(f"'{app.name}' is kirocrew's own window; computer use never acts on it", "own_window")
    if any(app_matches(app, denied) for denied in keystone.extra_denied_apps):
        raise Refusal(f"'{app.name}' is in the keystone's extra_denied_apps", "app_denied")
    if keystone.allowed_apps and not any(app_matches(app, allowed) for allowed in keystone.allowed_apps):
        raise Refusal(f"'{app.name}' is not in the keystone's allowed_apps", "app_not_allowed")


def app_permitted(keystone: Keystone, app: AppInfo) -> bool:
    try:
        check_app(keystone, app)
    except Refusal:
        return False
    return True


def check_click_target(args: dict[str, Any]) -> None:
    """Exactly one of ``element_index`` or ``x``+``y``; never chosen by precedence."""
    has_index = "element_index" in args
    has_x, has_y = "x" in args, "y" in args
    if has_x != has_y:
        raise Refusal("a point click needs both x and y", "invalid_arguments")
    if has_index and has_x:
        raise Refusal("give element_index or x and y, not both", "ambiguous_target")
    if not has_index and not has_x:
        raise Refusal("give element_index or x and y", "invalid_arguments")


def check_point_in_window(state: WindowState, point: tuple[float, float]) -> None:
    """A coordinate must land inside the snapshotted window, never on another app (or kirocrew)."""
    (ox, oy), (width, height) = state.origin, state.size
    x, y = point
    if not (ox <= x < ox + width and oy <= y < oy + height):
        raise Refusal(f"point ({x:g}, {y:g}) is outside the window of '{state.app.name}' "
                      f"(origin {ox},{oy}, size {width}x{height})", "point_outside_window")


def is_secure(node: Node) -> bool:
    return "password" in node.states or "password" in node.role.lower()


def check_input_target(tool: str, node: Node | None) -> None:
    """Text never goes into a password field, typed, set or keyed."""
    if node is not None and tool in TEXT_INPUT_TOOLS and is_secure(node):
        raise Refusal(f"element {node.index} is a password field; {tool} is refused on password fields",
                      "password_field")
