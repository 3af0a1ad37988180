"""Crews: named bindings the owner keeps in ``config.toml`` (``[crews.NAME]``).

A crew says what a sub-agent spawned with ``spawn_run(crew=NAME)`` runs on (Kiro agent,
model, workspace, authority) and which words route a task to it. The owner defines them
(:mod:`kirocrew_core.crews.cli`, or the file); sessions read them (``select_crew``,
``route_crew``: :mod:`kirocrew_core.crews.tools`); kirocrew-conversations resolves
``crew=`` through :func:`kirocrew_core.crews.bindings.find_crew`.
"""
