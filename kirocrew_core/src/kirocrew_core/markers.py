"""The one project name shared by the hook markers, the manager and the entry-point group."""

import pluggy

PROJECT = "kirocrew"
ENTRY_POINT_GROUP = "kirocrew.plugins"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
