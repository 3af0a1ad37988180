"""The built-in webhook channel: a JSON POST in the shape Slack's and Teams' incoming webhooks accept.

The body is ``{"text": …, "title": …}``: ``text`` is the message with its title in bold and its
attribution line under it (what Slack shows; Teams' connectors read ``text`` and ``title``). The URL
is the channel's secret (a Slack webhook URL carries its token), set with ``kirocrew messages secret
NAME``, never shown: errors name the channel, not the URL. Redirects are not followed (a POST must not
be re-sent somewhere the owner did not name) and the whole request is bounded by ``timeout_secs``.
Any 2xx answer is a delivery; its id is kirocrew's message id (incoming webhooks return none), and an
incoming webhook cannot withdraw a post, so the channel has no ``delete``.
"""

from __future__ import annotations

from typing import Any

from kirocrew_core.contributions import MessageChannel, OutgoingMessage
from kirocrew_core.errors import KirocrewError
from kirocrew_core.messages import settings
from kirocrew_core.messages.email import ChannelNotReady

#: What the channel reads of an answer: enough for a short error, never a flood.
ANSWER_MAX_BYTES = 4096


class WebhookFailed(KirocrewError):
    code = "webhook_failed"


def channel(name: str, fields: dict[str, Any]) -> MessageChannel:
    timeout = float(fields.get("timeout_secs") or settings.DEFAULT_TIMEOUT_SECS)

    def send(message: OutgoingMessage) -> str:
        return _post(name, timeout, message)

    return MessageChannel(name, "webhook", "a JSON POST to the webhook URL set with `kirocrew messages secret "
                          f"{name}`", send, None, timeout)


def payload(message: OutgoingMessage) -> dict[str, str]:
    """The JSON body: Slack's ``text`` (title in bold, the attribution in italics) and Teams' ``title``."""
    lines = [f"*{message.title}*", message.text]
    if message.file is not None:
        from kirocrew_core.messages.outbox import shown_name

        lines.append(f"File: {shown_name(message.file)} (in the kirocrew outbox; the owner's feed links it)")
    lines.append(f"_{message.sender}_")
    return {"text": "\n".join(lines), "title": message.title}


def _post(name: str, timeout: float, message: OutgoingMessage) -> str:
    import json
    import urllib.error
    import urllib.request

    url = settings.read_secret(name)
    if url is None:
        raise ChannelNotReady(f"webhook channel {name} has no URL: run `kirocrew messages secret {name}`")
    if not url.startswith(("https://", "http://")):
        raise ChannelNotReady(f"webhook channel {name}'s URL is not an http(s) URL")
    body = json.dumps(payload(message)).encode()
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "kirocrew"})
    opener = urllib.request.build_opener(_no_redirects())
    try:
        with opener.open(request, timeout=timeout) as answer:
            answer.read(ANSWER_MAX_BYTES)
            status = answer.status
    except urllib.error.HTTPError as exc:
        raise WebhookFailed(f"webhook channel {name} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise WebhookFailed(f"webhook channel {name} could not be reached ({type(reason).__name__})") from None
    if not 200 <= status < 300:
        raise WebhookFailed(f"webhook channel {name} answered HTTP {status}")
    return message.id


def _no_redirects() -> Any:
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None  # urllib then raises HTTPError for the 3xx answer

    return NoRedirect
