"""Render the hook reference (Markdown) from hookspec docstrings, so the docs cannot drift.

    python -m kirocrew_core.hookdocs > docs/plugins/hooks.md

A plugin that declares its own hookspecs can render them the same way:
``render_hook_reference(my_specs_module, title=...)``.

Which plugins implement a hook is never written in a docstring (it goes stale as plugins
change): each hook's "Implemented in the open edition by" line is read from the plugin
manager's registrations when the page is rendered, so a test comparing the page with a fresh
render fails when an open-edition member starts or stops implementing a hook.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from kirocrew_core.markers import PROJECT

if TYPE_CHECKING:
    from kirocrew_core.plugins import KirocrewPluginManager


def hook_functions(module: ModuleType) -> list[tuple[str, object]]:
    """The hookspec functions of ``module``, in source order."""
    marker = f"{PROJECT}_spec"
    found = [
        (name, fn)
        for name, fn in vars(module).items()
        if inspect.isfunction(fn) and hasattr(fn, marker) and fn.__module__ == module.__name__
    ]
    return sorted(found, key=lambda item: item[1].__code__.co_firstlineno)  # type: ignore[attr-defined]


def short_signature(name: str, fn: object) -> str:
    """``name(arg1, arg2)``: the heading form, as pluggy passes arguments by these names."""
    params = inspect.signature(fn).parameters  # type: ignore[arg-type]
    return f"{name}({', '.join(params)})"


def full_signature(name: str, fn: object) -> str:
    source = inspect.getsource(fn)  # type: ignore[arg-type]
    start = source.index("def ")
    end = source.index(":\n", start)
    return source[start:end].strip()


def _role_to_code(m: re.Match[str]) -> str:
    """A ``~`` before the target shows its last part only, as Sphinx does; without it, the whole path."""
    return f"`{m.group(1).split('.')[-1] if m.group(0).find('~') > 0 else m.group(1)}`"


def rst_to_markdown(text: str) -> str:
    """The few reStructuredText forms our docstrings use, as Markdown."""
    text = re.sub(r":(?:func|class|meth|mod|attr|data):`~?([^`]+)`", _role_to_code, text)
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    text = re.sub(r"^:param (\w+):", r"- **\1**:", text, flags=re.MULTILINE)
    text = re.sub(r"^:return:", "**Returns:**", text, flags=re.MULTILINE)
    return text


def _options(fn: object) -> str:
    opts = getattr(fn, f"{PROJECT}_spec", {}) or {}
    shown = [key for key in ("firstresult", "historic") if opts.get(key)]
    return f"*Options:* {', '.join(shown)}\n\n" if shown else ""


def open_edition_implementers(pm: KirocrewPluginManager | None = None) -> dict[str, list[str]]:
    """Every declared hook's implementing plugins from the open edition, in call order.

    ``pm`` defaults to a fresh manager with no switches (``KIROCREW_LOAD_PLUGINS`` and the like
    are ignored), so the page does not depend on who renders it; plugins outside the open
    edition are left out, so neither does it depend on what else is installed.
    """
    import pluggy

    from kirocrew_core.plugins import make_plugin_manager, ordered_hookimpls

    pm = pm if pm is not None else make_plugin_manager(env={})
    # A plugin with two implementations of one hook (two functions marked with one hook name) is named once.
    return {name: list(dict.fromkeys(impl.plugin_name for impl in ordered_hookimpls(pm, name)
                                     if pm.is_open_edition(impl.plugin_name)))
            for name, caller in vars(pm.hook).items() if isinstance(caller, pluggy.HookCaller)}


def _implemented_by(plugins: Sequence[str]) -> str:
    shown = ", ".join(f"`{name}`" for name in plugins) if plugins else "none"
    return f"*Implemented in the open edition by* (in call order): {shown}\n\n"


def render_hook_reference(module: ModuleType | None = None, *, title: str = "Hook reference",
                          implementers: Mapping[str, Sequence[str]] | None = None) -> str:
    """The Markdown reference of ``module``'s hookspecs (core's by default).

    ``implementers`` maps a hook to the plugins implementing it; it defaults to
    :func:`open_edition_implementers`.
    """
    if module is None:
        from kirocrew_core import hookspecs as module
    assert module is not None
    if implementers is None:
        implementers = open_edition_implementers()
    lines = [
        f"# {title}",
        "",
        "<!-- Generated from the hookspec docstrings by `python -m kirocrew_core.hookdocs`."
        " Do not edit by hand: a test fails when this page and the code disagree. -->",
        "",
        rst_to_markdown(inspect.cleandoc(module.__doc__ or "")),
        "",
    ]
    for name, fn in hook_functions(module):
        lines += [
            f"## {short_signature(name, fn)}",
            "",
            "```python",
            full_signature(name, fn),
            "```",
            "",
            _options(fn) + _implemented_by(implementers.get(name, ()))
            + rst_to_markdown(inspect.cleandoc(fn.__doc__ or "(undocumented)")),
            "",
        ]
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(render_hook_reference())
