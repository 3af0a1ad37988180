"""The notification center: what crew sessions publish for the owner with ``send_notification``.

:mod:`~kirocrew_core.notifications.store` keeps them (in the crew state, bounded);
:mod:`~kirocrew_core.notifications.tools` is the ``kirocrew-core`` tool;
:mod:`~kirocrew_core.notifications.api` the JSON routes and
:mod:`~kirocrew_core.notifications.page` the ``/notifications`` feed. Registered by the
core builtin plugin :mod:`kirocrew_core.builtin.notifications`.
"""
