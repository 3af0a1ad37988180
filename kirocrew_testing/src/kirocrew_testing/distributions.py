"""Lay out a real, importable plugin distribution in a folder, without pip.

``importlib.metadata`` discovers any ``*.dist-info`` folder on ``sys.path``, so a
folder made here behaves like an installed distribution once it is on
``sys.path`` (in-process: ``monkeypatch.syspath_prepend``) or on ``PYTHONPATH``
(a subprocess). Tests use it for broken and third-party plugins.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from kirocrew_core.markers import ENTRY_POINT_GROUP


def make_plugin_distribution(
    root: Path,
    *,
    distribution: str,
    module: str,
    source: str,
    entry_point: str | None = None,
    version: str = "1.0.0",
) -> Path:
    """Write ``module.py`` with ``source`` and a dist-info registering it; return ``root``.

    ``entry_point`` defaults to the distribution name without its ``kirocrew-`` prefix.
    """
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    dist_info = root / f"{distribution.replace('-', '_')}-{version}.dist-info"
    dist_info.mkdir(exist_ok=True)
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n"
    )
    name = entry_point or distribution.removeprefix("kirocrew-")
    (dist_info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{name} = {module}\n")
    return root
