"""``GET /notifications``: the notification feed, newest first, rendered on the server.

Bodies are the sessions' Markdown rendered safe (:mod:`kirocrew_core.gateway.markdown`);
every other string is escaped by the template. ``static/feed.js`` sends every change
through the ``/api/notifications…`` routes (a session's Mute and Unmute through ``/api/messages/mute``
and ``…/unmute``) and swaps in the page's fresh ``#feed``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from kirocrew_core.errors import KirocrewError
from kirocrew_core.notifications import store

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

PACKAGE = "kirocrew_core.notifications"
#: A body's ``#`` heading is shown as ``h4``: it sits under the notification's ``h3`` title.
BODY_HEADING_OFFSET = 3


async def feed_page(request: Request) -> Response:
    from datetime import datetime, timezone

    from kirocrew_core.gateway.markdown import render_markdown
    from kirocrew_core.gateway.shell import render_page

    from kirocrew_core.messages import store as messages

    items: list[store.Notification] = []
    muted: list[str] = []
    problem = None
    try:
        items = await asyncio.to_thread(store.all_notifications)
        muted = await asyncio.to_thread(messages.mutes)
    except KirocrewError as exc:
        problem = exc
    bodies = {note.id: render_markdown(note.body, heading_offset=BODY_HEADING_OFFSET) for note in items if note.body}
    stamps = {note.id: datetime.fromtimestamp(note.created, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
              for note in items}
    return render_page(request, f"{PACKAGE}/feed.html", title="Notifications", status_code=503 if problem else 200,
                       items=items, bodies=bodies, stamps=stamps, problem=problem, muted=set(muted),
                       unread=sum(1 for n in items if not n.read))
