"""Run the real ``kirocrew`` CLI with the test-only fake-desktop backend plugin registered.

``python run_with_fake_desktop.py computer call …`` / ``… mcp-computer``: the
process is the real CLI and the real chokepoint; only a driver plugin is added,
through the same hook a platform plugin uses.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_desktop import FakeDesktopPlugin

from kirocrew_core.cli import main
from kirocrew_core.plugins import get_plugin_manager

if __name__ == "__main__":
    get_plugin_manager().register(FakeDesktopPlugin(), name="fake_desktop")
    main(sys.argv[1:])
