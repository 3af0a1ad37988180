"""Messages to the owner: ``send_message``, ``delete_message`` and ``file_send``.

:mod:`~kirocrew_core.messages.store` records every message with who sent it, the owner's mutes and
approvals; :mod:`~kirocrew_core.messages.senders` attributes a call to its session (and cron job);
:mod:`~kirocrew_core.messages.channels` collects the ``message_channels()`` and delivers with a bound;
:mod:`~kirocrew_core.messages.email` and :mod:`~kirocrew_core.messages.webhook` are the built-in
channels, configured by :mod:`~kirocrew_core.messages.settings`; :mod:`~kirocrew_core.messages.outbox`
checks and copies what ``file_send`` delivers; :mod:`~kirocrew_core.messages.tools` are the
``kirocrew-core`` tools, :mod:`~kirocrew_core.messages.admin` the owner's commands and
:mod:`~kirocrew_core.messages.api` the JSON routes. Registered by :mod:`kirocrew_core.builtin.messages`.
"""
