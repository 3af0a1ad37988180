"""Every ACP shape the fake reads or writes, as plain dicts: what the ``acp`` SDK's models were for.

The fake used to run on the SDK's agent side; importing its schema (some 280 pydantic models)
cost more CPU than a whole scripted session, and the suite starts the fake about a thousand
times. These helpers build exactly the JSON the SDK serialized (``by_alias``,
``exclude_none`` and ``exclude_defaults``, keys in the models' field order: ``_meta`` after
the fields it annotates, ``type``/``sessionUpdate`` last) and read requests as leniently as
the SDK's models do (malformed optional fields fall back to their default, unusable
``mcpServers`` entries are skipped). A request missing what the fake needs is -32602
``Invalid params`` with ``data.errors`` in pydantic's shape (``type``, ``loc``, ``msg``,
``input``; without pydantic's documentation ``url``).

``tests/core/test_fake_kiro_acp_shapes.py`` compares every builder with the SDK's serialization,
and ``KIRO_FAKE_STRICT`` (:mod:`.strict`) checks every live frame against the SDK's models.
"""

from __future__ import annotations

from typing import Any

from kirocrew_testing.fake_kiro.wire import RpcError

# -- outgoing: content, session updates, permission requests --------------------------------------


def text_block(text: str) -> dict[str, Any]:
    return {"text": text, "type": "text"}


def message_chunk(kind: str, text: str) -> dict[str, Any]:
    """``agent_message_chunk``, ``user_message_chunk`` or ``agent_thought_chunk`` holding one text block."""
    return {"content": text_block(text), "sessionUpdate": kind}


def plan(items: list[str]) -> dict[str, Any]:
    return {"entries": [{"content": item, "priority": "medium", "status": "pending"} for item in items],
            "sessionUpdate": "plan"}


def current_mode(mode_id: str) -> dict[str, Any]:
    return {"currentModeId": mode_id, "sessionUpdate": "current_mode_update"}


def text_content(text: str) -> dict[str, Any]:
    """A tool call's ``content`` item holding text."""
    return {"content": text_block(text), "type": "content"}


def diff_content(path: str, new_text: str, old_text: str | None) -> dict[str, Any]:
    diff: dict[str, Any] = {"path": path}
    if old_text is not None:
        diff["oldText"] = old_text
    diff.update(newText=new_text, type="diff")
    return diff


def location(path: str) -> dict[str, Any]:
    return {"path": path}


def _set(target: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        target[key] = value


def tool_call(call_id: str, title: str, kind: str, *, status: str = "pending", content: list[Any] | None = None,
              locations: list[Any] | None = None, raw_input: Any = None,
              meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``tool_call`` update (the SDK's ``ToolCallStart``)."""
    update: dict[str, Any] = {"toolCallId": call_id, "title": title, "kind": kind, "status": status}
    _set(update, "content", content)
    _set(update, "locations", locations)
    _set(update, "rawInput", raw_input)
    _set(update, "_meta", meta)
    update["sessionUpdate"] = "tool_call"
    return update


def tool_call_update(call_id: str, status: str, *, content: list[Any] | None = None,
                     raw_output: Any = None) -> dict[str, Any]:
    """A ``tool_call_update`` (the SDK's ``update_tool_call``)."""
    update: dict[str, Any] = {"toolCallId": call_id, "status": status}
    _set(update, "content", content)
    _set(update, "rawOutput", raw_output)
    update["sessionUpdate"] = "tool_call_update"
    return update


def session_notification(session_id: str, update: dict[str, Any], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """``session/update`` params; ``meta`` (when not empty) is the notification's ``_meta``."""
    params: dict[str, Any] = {"sessionId": session_id, "update": update}
    if meta:
        params["_meta"] = meta
    return params


PERMISSION_OPTIONS = ({"optionId": "allow_once", "name": "Yes", "kind": "allow_once"},
                      {"optionId": "allow_always", "name": "Always", "kind": "allow_always"},
                      {"optionId": "reject_once", "name": "No", "kind": "reject_once"})


def permission_request(session_id: str, call_id: str, title: str, meta: dict[str, Any]) -> dict[str, Any]:
    """``session/request_permission`` params: kiro's three options; ``meta`` carries ``trustOptions``."""
    params: dict[str, Any] = {"sessionId": session_id, "toolCall": {"toolCallId": call_id, "title": title},
                              "options": [dict(option) for option in PERMISSION_OPTIONS]}
    if meta:
        params["_meta"] = meta
    return params


def prompt_response(stop_reason: str) -> dict[str, Any]:
    return {"stopReason": stop_reason}


def permission_outcome(result: Any) -> tuple[str, str | None]:
    """(``selected``/``cancelled``, the option id) from a ``session/request_permission`` answer."""
    outcome = result.get("outcome") if isinstance(result, dict) else None
    kind = outcome.get("outcome") if isinstance(outcome, dict) else None
    if kind == "cancelled":
        return "cancelled", None
    if kind == "selected" and isinstance(outcome.get("optionId"), str):  # type: ignore[union-attr]
        return "selected", outcome["optionId"]  # type: ignore[index]
    raise RpcError.invalid_params({"errors": [_error("invalid_permission_outcome", ["outcome"],
                                                     "Input is not a permission outcome", result)]})


# -- incoming: request params ------------------------------------------------------------------------

_BLOCK_FIELDS = {"text": ("text",), "image": ("data", "mimeType"), "audio": ("data", "mimeType"),
                 "resource_link": ("name", "uri"), "resource": ("resource",)}


def _error(kind: str, loc: list[Any], msg: str, value: Any) -> dict[str, Any]:
    return {"type": kind, "loc": loc, "msg": msg, "input": value}


def _missing(loc: list[Any], params: Any) -> dict[str, Any]:
    return _error("missing", loc, "Field required", params)


class _Reader:
    """Collects pydantic-shaped errors while reading one request's params."""

    def __init__(self, params: Any, model: str) -> None:
        self.params = params
        self.errors: list[dict[str, Any]] = []
        if not isinstance(params, dict):
            self.errors.append({**_error("model_type", [], f"Input should be a valid dictionary or instance of "
                                                           f"{model}", params), "ctx": {"class_name": model}})

    def string(self, key: str, *, required: bool = True) -> str:
        if not isinstance(self.params, dict):
            return ""
        if key not in self.params:
            if required:
                self.errors.append(_missing([key], self.params))
            return ""
        value = self.params[key]
        if not isinstance(value, str):
            self.errors.append(_error("string_type", [key], "Input should be a valid string", value))
            return ""
        return value

    def items(self, key: str, *, required: bool = True) -> list[Any]:
        if not isinstance(self.params, dict) or (key not in self.params and not required):
            return []
        if key not in self.params:
            self.errors.append(_missing([key], self.params))
            return []
        value = self.params[key]
        if not isinstance(value, list):
            self.errors.append(_error("list_type", [key], "Input should be a valid list", value))
            return []
        return value

    def done(self) -> None:
        if self.errors:
            raise RpcError.invalid_params({"errors": self.errors})


def _pairs(value: Any) -> list[tuple[str, str]] | None:
    """``[{name, value}]`` (an env or headers list) as pairs, or None when malformed."""
    if not isinstance(value, list):
        return None
    pairs = [(item.get("name"), item.get("value")) for item in value if isinstance(item, dict)]
    if len(pairs) != len(value) or not all(isinstance(n, str) and isinstance(v, str) for n, v in pairs):
        return None
    return pairs  # type: ignore[return-value]


def mcp_server(item: Any) -> dict[str, Any] | None:
    """One ``mcpServers`` entry normalised (``name`` and ``url``/``headers``/``type``, or ``command``/``args``/
    ``env``), or None for an entry none of ACP's server shapes accepts (the SDK skips those)."""
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        return None
    kind = item.get("type")
    if kind in ("http", "sse"):
        headers = _pairs(item.get("headers"))
        if not isinstance(item.get("url"), str) or headers is None:
            return None
        return {"name": item["name"], "type": kind, "url": item["url"], "headers": dict(headers)}
    args, env = item.get("args"), _pairs(item.get("env"))
    if (kind is not None or not isinstance(item.get("command"), str) or env is None
            or not isinstance(args, list) or not all(isinstance(a, str) for a in args)):
        return None
    return {"name": item["name"], "command": item["command"], "args": list(args), "env": dict(env)}


def initialize_params(params: Any) -> int:
    """The protocol version (a date string, as KiroCrew's v2 harness sends, or any non-number counts as 1)."""
    reader = _Reader(params, "InitializeRequest")
    if isinstance(params, dict) and "protocolVersion" not in params:
        reader.errors.append(_missing(["protocolVersion"], params))
    reader.done()
    value = params["protocolVersion"]
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        return 1


def session_params(params: Any, model: str, *, session_id: bool, servers_required: bool) -> dict[str, Any]:
    """``session/new``, ``session/load`` or ``session/fork`` params: ``cwd``, ``sessionId``, usable ``mcpServers``."""
    reader = _Reader(params, model)
    servers = reader.items("mcpServers", required=servers_required)
    out = {"cwd": reader.string("cwd"), "sessionId": reader.string("sessionId") if session_id else "",
           "mcpServers": [s for s in map(mcp_server, servers) if s is not None]}
    reader.done()
    return out


def prompt_params(params: Any) -> tuple[str, list[dict[str, Any]]]:
    """``session/prompt``: the session id and the prompt's content blocks."""
    reader = _Reader(params, "PromptRequest")
    session_id = reader.string("sessionId")
    blocks = reader.items("prompt")
    tags = ", ".join(f"'{tag}'" for tag in _BLOCK_FIELDS)
    for index, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in _BLOCK_FIELDS:
            reader.errors.append({**_error("union_tag_invalid", ["prompt", index],
                                           f"Input tag '{kind}' found using 'type' does not match any of the "
                                           f"expected tags: {tags}", block),
                                  "ctx": {"discriminator": "'type'", "tag": str(kind), "expected_tags": tags}})
            continue
        for key in _BLOCK_FIELDS[kind]:
            if key not in block:
                reader.errors.append(_missing(["prompt", index, kind, key], block))
    reader.done()
    return session_id, blocks


def ids_params(params: Any, model: str, *keys: str) -> list[str]:
    """Required string fields (``sessionId``, ``modeId``) of a small request or notification."""
    reader = _Reader(params, model)
    values = [reader.string(key) for key in keys]
    reader.done()
    return values
