"""``KIRO_FAKE_STRICT``: check every ACP frame against the ``acp`` SDK's models, as the SDK's agent side did.

The fake reads and writes plain dicts (:mod:`.acp_shapes`) so that it starts without the SDK.
What the SDK's models used to catch must not vanish with it: in strict mode every incoming
ACP request or notification is validated with its SDK model first (a failure is answered
exactly as the SDK answered it: -32602 ``Invalid params`` with pydantic's ``errors``), and
every frame the fake sends is checked before it is written. Updates and permission requests
must survive a round trip through their model unchanged, byte for byte (the SDK built them),
and results must validate. A frame that does not is a fault of the fake: it is reported on
stderr and the process exits with :data:`EXIT_CODE`, so the test driving it fails.

The SDK is imported only here, and only in this mode.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

log = logging.getLogger(__name__)

EXIT_CODE = 86

#: Incoming ACP methods and the SDK model of their params.
REQUEST_MODELS = {
    "initialize": "InitializeRequest",
    "session/new": "NewSessionRequest",
    "session/load": "LoadSessionRequest",
    "session/prompt": "PromptRequest",
    "session/set_mode": "SetSessionModeRequest",
    "session/fork": "ForkSessionRequest",
    "session/cancel": "CancelNotification",
}
#: What the fake answers each of them with.
RESPONSE_MODELS = {
    "initialize": "InitializeResponse",
    "session/new": "NewSessionResponse",
    "session/load": "LoadSessionResponse",
    "session/prompt": "PromptResponse",
    "session/set_mode": "SetSessionModeResponse",
    "session/fork": "ForkSessionResponse",
}
#: Frames the SDK built from a model (sent as ``serialize_params`` makes them): they must round-trip.
OUTGOING_MODELS = {
    "session/update": "SessionNotification",
    "session/request_permission": "RequestPermissionRequest",
}


class StrictViolation(Exception):
    """A frame the fake was about to send does not match the SDK's model."""


def _model(name: str) -> Any:
    from kirocrew_core.sdk_models import prepare

    prepare()
    from acp import schema

    return getattr(schema, name)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def check_incoming(method: str, params: Any) -> None:
    """Validate an ACP request's or notification's params with the SDK's model; raise the SDK's -32602."""
    name = REQUEST_MODELS.get(method)
    if name is None:
        return
    from pydantic import ValidationError

    from kirocrew_testing.fake_kiro.wire import RpcError

    try:
        _model(name).model_validate(params)
    except ValidationError as exc:
        log.error("strict: %s params do not validate as the SDK's %s: %s", method, name, exc)
        raise RpcError.invalid_params({"errors": exc.errors()}) from None


def check_outgoing(message: dict[str, Any], answering: str | None) -> None:
    """Raise :class:`StrictViolation` when ``message`` is not what the SDK would have sent."""
    from pydantic import ValidationError

    method = message.get("method")
    try:
        if isinstance(method, str) and method in OUTGOING_MODELS:
            _round_trip(OUTGOING_MODELS[method], message.get("params"))
        elif answering in RESPONSE_MODELS and "result" in message:
            model = _model(RESPONSE_MODELS[answering])
            parsed = model.model_validate(message["result"])
            if answering == "session/prompt":  # the SDK serialized this one from its model
                expected = parsed.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=True)
                _same(expected, message["result"], RESPONSE_MODELS[answering])
        elif "error" in message:
            _model("Error").model_validate(message["error"])
    except ValidationError as exc:
        raise StrictViolation(f"{method or answering}: {exc}") from None


def _round_trip(name: str, params: Any) -> None:
    model = _model(name)
    parsed = model.model_validate(params)
    _same(parsed.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True), params, name)


def _same(expected: Any, sent: Any, name: str) -> None:
    if _dumps(expected) != _dumps(sent):
        raise StrictViolation(f"not the SDK's {name} serialization:\n  sent {_dumps(sent)}\n  SDK  {_dumps(expected)}")


def check_or_exit(message: dict[str, Any], answering: str | None) -> None:
    """The wire's check: a violation is reported on stderr and ends the process (:data:`EXIT_CODE`)."""
    try:
        check_outgoing(message, answering)
    except StrictViolation as exc:
        print(f"fake-kiro-cli strict: {exc}", file=sys.stderr, flush=True)
        os._exit(EXIT_CODE)
