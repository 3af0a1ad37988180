"""Start the fake's ACP side in half the CPU: skip what pydantic does at import for schemas nobody asks for.

The suite starts the fake ``kiro-cli acp`` about a thousand times, and each start spent
0.35 s of CPU importing the ACP SDK's schema, mostly in pydantic: reading every model's
source to turn attribute docstrings into field descriptions (``use_attribute_docstrings``),
and building each model's validator up front. The fake never prints a JSON schema, so the
descriptions are never read, and a validator built on first use (pydantic's public
``defer_build``) validates exactly as one built at import. Both changes apply to this process
only. The docstring step is a private pydantic function: when a pydantic release moves it,
this does nothing and the fake is merely slower.
"""

from __future__ import annotations

from typing import Any


def _no_docstrings(cls: type[Any], use_inspect: bool = False) -> dict[str, str]:
    return {}


def lighten_schema_import() -> None:
    """Call before the first import of ``acp``; harmless to call twice or after."""
    import pydantic

    pydantic.BaseModel.model_config["defer_build"] = True
    try:
        from pydantic._internal import _docs_extraction, _fields, _generate_schema
    except ImportError:
        return
    modules: tuple[Any, ...] = (_docs_extraction, _fields, _generate_schema)
    for module in modules:
        if hasattr(module, "extract_docstrings_from_cls"):
            module.extract_docstrings_from_cls = _no_docstrings
