"""Import the ACP and MCP SDKs for less CPU: their pydantic models build validators on first use.

Every process that speaks ACP or MCP (the host, a standalone server, a CLI twin running a
conversation in process) spent most of its start importing the SDKs' models: ``import acp``
and ``import mcp`` cost 0.3-0.4 s of CPU each, in pydantic, for

* building every model's validator up front, though a process uses a few dozen of the
  SDKs' thousand-odd models. pydantic's public ``defer_build`` setting builds a model's
  validator on its first use instead, and that validator validates exactly as one built at
  import. It is set on ``BaseModel``'s config, which every model's config starts from, so
  it reaches models a plugin defines too (they behave the same, built later);
* reading the ACP schema's source to turn attribute docstrings into field descriptions
  (``use_attribute_docstrings``): they only ever appear in a JSON schema, and nothing asks
  for an ACP model's. This step has no public switch: :func:`prepare` replaces pydantic's
  private extraction function with one that skips the ``acp`` package's classes and asks the
  original for every other class, so a plugin's own models keep their descriptions. When a
  pydantic release moves that function, the step does nothing and the import is slower, not
  wrong (``tests/core/test_sdk_models.py`` says so when it happens).

:func:`prepare` must run before the first import of either SDK to help; it is idempotent and
cheap after its first call. The host, the standalone servers, the ACP runtime and the SDK's
client session (:func:`kirocrew_core.host.mcp_client.client_session`) call it; the twin commands
use a client without the SDK (:mod:`kirocrew_core.host.tool_client`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: The package whose models' attribute docstrings are not read.
SKIPPED_PACKAGE = "acp"

_prepared = False


def prepare() -> None:
    """Build SDK models' validators on first use and skip the ACP schema's docstrings (see the module)."""
    global _prepared
    if _prepared:
        return
    _prepared = True
    import pydantic

    pydantic.BaseModel.model_config["defer_build"] = True
    _skip_acp_docstrings()


def acp_docstrings_skipped() -> bool:
    """Whether the docstring step took effect (False when this pydantic has no such private function)."""
    from pydantic._internal import _fields

    return getattr(getattr(_fields, "extract_docstrings_from_cls", None), "kirocrew_skips", None) == SKIPPED_PACKAGE


def _skip_acp_docstrings() -> None:
    try:
        from pydantic._internal import _docs_extraction, _fields, _generate_schema
    except ImportError:
        return
    original = getattr(_fields, "extract_docstrings_from_cls", None)
    if original is None or getattr(original, "kirocrew_skips", None):
        return
    replacement = _skipping(original)
    for module in (_docs_extraction, _fields, _generate_schema):
        if getattr(module, "extract_docstrings_from_cls", None) is original:
            module.extract_docstrings_from_cls = replacement  # type: ignore[attr-defined]


def _skipping(original: Callable[..., dict[str, str]]) -> Callable[..., dict[str, str]]:
    def extract(cls: type[Any], *args: Any, **kwargs: Any) -> dict[str, str]:
        module = getattr(cls, "__module__", "") or ""
        if module == SKIPPED_PACKAGE or module.startswith(SKIPPED_PACKAGE + "."):
            return {}
        return original(cls, *args, **kwargs)

    extract.kirocrew_skips = SKIPPED_PACKAGE  # type: ignore[attr-defined]
    return extract
