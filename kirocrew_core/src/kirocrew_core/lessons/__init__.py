"""Lessons: durable rules a crew session (or the owner) keeps for later sessions.

:mod:`~kirocrew_core.lessons.store` owns the store and the two ways a later session
sees the lessons (the global lessons file the ``kirocrew`` agent loads as a resource,
and the workspace lessons the agent's ``agentSpawn`` hook prints);
:mod:`~kirocrew_core.lessons.tools` the ``learn_*`` tools of ``kirocrew-core``;
:mod:`~kirocrew_core.lessons.cli` ``kirocrew learn``. Registered by the core builtin
plugin :mod:`kirocrew_core.builtin.lessons`.
"""
