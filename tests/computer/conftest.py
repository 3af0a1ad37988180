"""The headless desktop fixture (``desktop``) for every test module here.

``desktop.py`` is loaded by path: the suite imports test modules in importlib mode, which puts no
test directory on ``sys.path``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("kirocrew_test_desktop", Path(__file__).with_name("desktop.py"))
assert _spec is not None and _spec.loader is not None
_desktop_module = sys.modules.setdefault(_spec.name, importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(_desktop_module)
desktop = _desktop_module.desktop  # module-scoped: one Xvfb + bus + window manager per test module
