"""Writing MCP scope files in tests, the way a user's editor would (plain, non-atomic)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kirocrew_core import home


def write_mcp_file(path: Path, servers: Any, **top: Any) -> bytes:
    """Write ``{**top, "mcpServers": servers}`` to ``path``; return the exact bytes, for identity checks.

    ``servers`` is any JSON value: tests of a malformed file pass a list where the object belongs.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps({**top, "mcpServers": servers}, indent=2).encode()
    path.write_bytes(data)
    return data


def write_kiro_global(servers: dict[str, Any], **top: Any) -> bytes:
    """The user's Kiro global, ``~/.kiro/settings/mcp.json``."""
    return write_mcp_file(home.kiro_global_mcp_file(), servers, **top)
