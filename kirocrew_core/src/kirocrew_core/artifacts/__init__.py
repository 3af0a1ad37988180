"""Artifacts: what sessions make for their owner, versioned, reviewed, and fed back to the agent.

:mod:`.names` checks slugs, names, tags, kinds and folder paths; :mod:`.access` decides who sees
and changes which artifact (the owner, a session's conversation tree, what the owner shared);
:mod:`.store` keeps the library on disk (versions, events, comments, caps) and :mod:`.folders`
its folder tree; :mod:`.deploy` the credential scan, the pending deploys the owner confirms and
the built-in local-directory destination; :mod:`.tools` the ``artifact_*`` and ``deploy_artifact``
tools of ``kirocrew-core``; :mod:`.cli` ``kirocrew artifact`` and ``kirocrew deploy``. Registered by
the core builtin plugin :mod:`kirocrew_core.builtin.artifacts`.
"""
