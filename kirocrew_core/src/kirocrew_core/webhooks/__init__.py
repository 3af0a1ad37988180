"""Inbound webhooks: a session registers a hook (``register_hook``), a third party posts to it, and the
message arrives in that session's conversation as a queued run.

The store (:mod:`.store`), the tool (:mod:`.tools`), the one gateway route third parties call
(:mod:`.inbound`), how a delivery reaches a conversation (:mod:`.delivery`), and the owner's side:
``kirocrew hooks`` (:mod:`.cli`, :mod:`.admin`), the Hooks page (:mod:`.page`) and its JSON routes
(:mod:`.api`). Registered by the core builtin plugin :mod:`kirocrew_core.builtin.webhooks`.
"""
