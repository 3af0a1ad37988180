"""The 17 tools' contracts: schemas are valid and strict, limits hold at their boundaries, errors are safe."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from jsonschema import Draft202012Validator

from kirocrew_conversations import limits
from kirocrew_conversations.tool_schemas import TOOLS, TOOLS_BY_NAME, render_tools_reference, validate_arguments
from kirocrew_core.errors import KirocrewError

REPO = Path(__file__).resolve().parents[2]
TOOL_NAMES = [
    "kiro_capabilities", "kiro_spawn", "kiro_delegate", "kiro_wait", "kiro_send", "kiro_result", "kiro_status",
    "kiro_events", "kiro_permission_decide", "kiro_question_answer", "kiro_configure", "kiro_fork", "kiro_cancel",
    "kiro_archive", "kiro_delete", "kiro_worktree_inspect", "kiro_worktree_cleanup",
]
ALL_SCHEMAS = [(f"{t.name}.{kind}", schema) for t in TOOLS
               for kind, schema in (("input", t.input_schema), ("output", t.output_schema))]


def _ref(i: int = 1) -> dict[str, str]:
    return {"conversationId": "c_1", "runId": f"r_{i}"}


def _image(i: int = 1, **over: Any) -> dict[str, Any]:
    return {"path": f"/tmp/shot{i}.png", "mimeType": "image/png", "sizeBytes": 1024, **over}


NEW = {"conversation": "new", "name": "implement-api", "workspace": "/work/project", "message": "Do it."}

VALID: dict[str, list[dict[str, Any]]] = {
    "kiro_capabilities": [{}, {"refresh": True}],
    "kiro_spawn": [NEW, {**NEW, "workspaceMode": "worktree", "baseRef": "origin/main", "authority": "read_only",
                         "model": "claude-sonnet-4.5", "effort": "high", "mode": "kiro_default",
                         "images": [_image(i) for i in range(limits.MAX_IMAGES)]},
                   {"conversation": "c_1", "message": "Next step."}],
    "kiro_delegate": [NEW, {"conversation": "c_1", "message": "again", "authority": "unrestricted"}],
    "kiro_wait": [{"targets": [_ref()], "mode": "any"},
                  {"targets": [_ref(i) for i in range(limits.WAIT_MAX_TARGETS)], "mode": "all"}],
    "kiro_send": [{"conversationId": "c_1", "message": "more"},
                  {"conversationId": "c_1", "message": "stop, do this", "delivery": "interrupt", "effort": "low"}],
    "kiro_result": [_ref()],
    "kiro_status": [{}, {"state": ["idle", "retired"], "runStatus": ["running"], "archive": "all",
                         "authority": "workspace_write", "workspaceFingerprint": "ab12", "model": "auto",
                         "cursor": "abc=", "limit": limits.PAGE_SIZE_MAX}],
    "kiro_events": [_ref(), {**_ref(), "cursor": "x1", "limit": 1}],
    "kiro_permission_decide": [{**_ref(), "permissionRequestId": "p_1", "decision": "allow_once"},
                               {**_ref(), "permissionRequestId": "p_1", "decision": "reject_once"}],
    "kiro_question_answer": [
        {"conversationId": "c_1", "askId": "ask_1", "answers": [{"question": "Which?", "answer": "Blue"}]},
        {"conversationId": "c_1", "askId": "ask_1", "dismissed": True}],
    "kiro_configure": [{"conversationId": "c_1", "model": "auto"}, {"conversationId": "c_1", "authority": "read_only"}],
    "kiro_fork": [{"conversationId": "c_1", "name": "api-fork"}],
    "kiro_cancel": [_ref()],
    "kiro_archive": [{"conversationId": "c_1"}],
    "kiro_delete": [{"conversationId": "c_1", "confirmName": "implement-api"}],
    "kiro_worktree_inspect": [{"conversationId": "c_1"}],
    "kiro_worktree_cleanup": [{"conversationId": "c_1"}],
}

INVALID: dict[str, list[tuple[dict[str, Any], str]]] = {
    "kiro_capabilities": [({"refresh": "yes"}, "arguments.refresh must be of type boolean")],
    "kiro_spawn": [
        ({"conversation": "new", "message": "x"}, "missing required name, workspace"),
        ({**NEW, "workspace": "relative/dir"}, "arguments.workspace has an invalid format"),
        ({**NEW, "images": [_image(i) for i in range(limits.MAX_IMAGES + 1)]}, "must have at most 4 items"),
        ({**NEW, "images": [_image(mimeType="text/plain")]}, "arguments.images[0].mimeType has an invalid format"),
        ({**NEW, "images": [_image(path="shot.png")]}, "arguments.images[0].path has an invalid format"),
        ({**NEW, "images": [_image(sizeBytes=limits.IMAGE_MAX_BYTES + 1)]}, f"≤ {limits.IMAGE_MAX_BYTES}"),
        ({**NEW, "images": []}, "must have at least 1 item"),
        ({**NEW, "authority": "root"}, 'must be one of "unrestricted", "read_only", "workspace_write"'),
        ({**NEW, "workspaceMode": "copy"}, 'must be one of "shared", "worktree"'),
        ({**NEW, "baseRef": "main..evil"}, "arguments.baseRef has an invalid format"),
        ({**NEW, "baseRef": "--upload-pack=x"}, "arguments.baseRef has an invalid format"),
        ({**NEW, "name": "Has Spaces"}, "arguments.name has an invalid format"),
        ({**NEW, "message": ""}, "arguments.message must not be empty"),
        ({**NEW, "message": "x" * (limits.MESSAGE_MAX_CHARS + 1)}, f"at most {limits.MESSAGE_MAX_CHARS} characters"),
        ({"conversation": "c_1", "message": "x", "workspace": "/elsewhere"}, 'only for conversation "new"'),
        ({**NEW, "timeoutSeconds": 5}, "unknown property timeoutSeconds"),
    ],
    "kiro_delegate": [({**NEW, "waitSeconds": 60}, "unknown property waitSeconds")],
    "kiro_wait": [
        ({"targets": [_ref(i) for i in range(limits.WAIT_MAX_TARGETS + 1)], "mode": "any"},
         "arguments.targets must have at most 8 items (got 9)"),
        ({"targets": [], "mode": "any"}, "arguments.targets must have at least 1 item"),
        ({"targets": [_ref(), _ref()], "mode": "all"}, "must not repeat an item"),
        ({"targets": [_ref()], "mode": "first"}, 'must be one of "any", "all"'),
        ({"targets": [_ref()]}, "missing required mode"),
        ({"targets": [{"conversationId": "c_1"}], "mode": "any"}, "arguments.targets[0] missing required runId"),
        ({"targets": [_ref()], "mode": "any", "timeout": 1}, "unknown property timeout"),
    ],
    "kiro_send": [
        ({"conversationId": "c_1", "message": "x", "delivery": "steer"}, 'must be one of "queue", "interrupt"'),
        ({"conversationId": "", "message": "x"}, "arguments.conversationId must not be empty"),
        ({"conversationId": "../etc", "message": "x"}, "arguments.conversationId has an invalid format"),
    ],
    "kiro_result": [({"conversationId": "c_1"}, "missing required runId")],
    "kiro_status": [
        ({"limit": 0}, "arguments.limit must be ≥ 1"),
        ({"limit": limits.PAGE_SIZE_MAX + 1}, f"arguments.limit must be ≤ {limits.PAGE_SIZE_MAX}"),
        ({"state": ["sleeping"]}, "arguments.state[0] must be one of"),
        ({"archive": "deleted"}, 'must be one of "active", "archived", "all"'),
        ({"cursor": "a" * (limits.CURSOR_MAX_CHARS + 1)}, "at most 512 characters"),
    ],
    "kiro_events": [({**_ref(), "limit": 1.5}, "arguments.limit must be of type integer")],
    "kiro_permission_decide": [
        ({**_ref(), "permissionRequestId": "p_1", "decision": "allow_forever"}, 'must be one of "allow_once"'),
        ({**_ref(), "permissionRequestId": "p_1", "decision": "allow_always", "scope": "galaxy"},
         'must be one of "workspace"'),
        ({**_ref(), "decision": "allow_once"}, "missing required permissionRequestId"),
    ],
    "kiro_question_answer": [
        ({"conversationId": "c_1", "askId": "ask_1"}, "missing required dismissed"),
        ({"askId": "ask_1", "dismissed": True}, "missing required conversationId"),
        ({"conversationId": "c_1", "askId": "ask_1", "answers": [{"question": "q", "answer": "a"}], "dismissed": True},
         "answers and dismissed exclude each other"),
        ({"conversationId": "c_1", "askId": "ask_1", "answers": []}, "must have at least 1 item"),
        ({"conversationId": "c_1", "askId": "ask_1", "dismissed": False}, "must be one of true"),
        ({"conversationId": "c_1", "askId": "ask_1",
          "answers": [{"question": "q", "answer": "a" * 2001}]}, "at most 2000 characters"),
        ({"conversationId": "c_1", "askId": "ask_1",
          "answers": [{"question": f"q{i}", "answer": "a"} for i in range(5)]}, "at most 4 items"),
    ],
    "kiro_configure": [({"conversationId": "c_1"}, "needs at least one setting to change"),
                       ({"conversationId": "c_1", "effort": "extreme"}, "arguments.effort must be one of")],
    "kiro_fork": [({"conversationId": "c_1"}, "missing required name")],
    "kiro_cancel": [({**_ref(), "force": True}, "unknown property force")],
    "kiro_archive": [({}, "missing required conversationId")],
    "kiro_delete": [({"conversationId": "c_1"}, "missing required confirmName")],
    "kiro_worktree_inspect": [({"conversationId": "c_1", "diff": True}, "unknown property diff")],
    "kiro_worktree_cleanup": [({"conversationId": "c_1", "force": True}, "unknown property force")],
}


def test_the_seventeen_tools_are_exactly_the_specs_in_its_order():
    assert [t.name for t in TOOLS] == TOOL_NAMES


@pytest.mark.parametrize("where, schema", ALL_SCHEMAS, ids=[w for w, _ in ALL_SCHEMAS])
def test_every_schema_is_a_valid_draft_2020_12_schema(where, schema):
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


def _shape_schemas(schema: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every subschema that describes an instance's shape. ``if`` and ``not`` only narrow what the
    rest already bounds, so they are not walked."""
    if isinstance(schema, dict):
        yield path, schema
        for key, value in schema.items():
            if key in ("if", "not", "enum", "const", "default", "required"):
                continue
            if key == "properties":
                for name, sub in value.items():
                    yield from _shape_schemas(sub, f"{path}.{name}")
            else:
                yield from _shape_schemas(value, f"{path}/{key}")
    elif isinstance(schema, list):
        for i, item in enumerate(schema):
            yield from _shape_schemas(item, f"{path}[{i}]")


def _loose_spots(schema: dict[str, Any], where: str) -> list[str]:
    loose = []
    for path, sub in _shape_schemas(schema, where):
        types = sub.get("type")
        types = [types] if isinstance(types, str) else (types or [])
        if not types and not path.endswith(("/then", "/else")) and path != where:
            loose.append(f"{path}: no type")
        if "object" in types and sub.get("additionalProperties") is not False:
            loose.append(f"{path}: additionalProperties")
        if "string" in types and "maxLength" not in sub:
            loose.append(f"{path}: maxLength")
        if "array" in types and "maxItems" not in sub:
            loose.append(f"{path}: maxItems")
        if {"integer", "number"} & set(types) and not ("minimum" in sub and "maximum" in sub):
            loose.append(f"{path}: minimum/maximum")
    return loose


@pytest.mark.parametrize("where, schema", ALL_SCHEMAS, ids=[w for w, _ in ALL_SCHEMAS])
def test_every_object_string_list_and_number_in_every_schema_is_bounded(where, schema):
    assert _loose_spots(schema, where) == []


def test_the_strictness_walk_catches_every_kind_of_loose_schema():
    schema = copy.deepcopy(TOOLS_BY_NAME["kiro_wait"].input_schema)
    target = schema["properties"]["targets"]
    del target["maxItems"]
    del target["items"]["properties"]["runId"]["maxLength"]
    target["items"]["additionalProperties"] = True
    schema["properties"]["n"] = {"type": ["integer", "null"], "minimum": 0}
    schema["properties"]["anything"] = {}
    assert sorted(_loose_spots(schema, "w")) == sorted([
        "w.anything: no type", "w.n: minimum/maximum", "w.targets/items: additionalProperties",
        "w.targets/items.runId: maxLength", "w.targets: maxItems",
    ])


def test_every_string_argument_refuses_the_empty_string():
    for tool in TOOLS:
        for path, sub in _shape_schemas(tool.input_schema, tool.name):
            if sub.get("type") == "string":
                assert sub.get("minLength", 0) >= 1 or "enum" in sub, path


@pytest.mark.parametrize("tool", TOOL_NAMES)
def test_every_tool_description_says_when_to_use_it(tool):
    description = TOOLS_BY_NAME[tool].description
    assert 120 <= len(description) <= 1200
    assert tool in VALID and tool in INVALID


@pytest.mark.parametrize("tool, promise", [
    ("kiro_send", "NOT mid-inference steering"),
    ("kiro_wait", "never cancels runs"),
    ("kiro_delegate", "never cancels"),
    ("kiro_worktree_cleanup", "no force option and it never merges"),
    ("kiro_fork", "unsupported_capability"),
    ("kiro_spawn", "use kiro_delegate instead"),
    ("kiro_delete", "ARCHIVED"),
    ("kiro_result", "never consumes"),
])
def test_descriptions_state_what_a_tool_never_does_or_when_to_use_another(tool, promise):
    assert promise in TOOLS_BY_NAME[tool].description


@pytest.mark.parametrize("tool, args", [(t, a) for t, cases in VALID.items() for a in cases])
def test_representative_valid_arguments_pass_and_come_back_with_defaults(tool, args):
    out = validate_arguments(tool, args)
    assert {k: out[k] for k in args} == args
    for key, prop in TOOLS_BY_NAME[tool].input_schema["properties"].items():
        if "default" in prop:
            assert out[key] == args.get(key, prop["default"])


@pytest.mark.parametrize("tool, args, reason",
                         [(t, a, r) for t, cases in INVALID.items() for a, r in cases])
def test_representative_invalid_arguments_fail_with_invalid_arguments_naming_the_rule(tool, args, reason):
    with pytest.raises(KirocrewError) as caught:
        validate_arguments(tool, args)
    assert caught.value.code == "invalid_arguments"
    assert caught.value.exit_code == 2
    assert caught.value.message.startswith(f"{tool}: ")
    assert reason in caught.value.message


def test_send_defaults_to_queue_and_spawn_to_a_shared_workspace():
    assert validate_arguments("kiro_send", {"conversationId": "c_1", "message": "x"})["delivery"] == "queue"
    assert validate_arguments("kiro_spawn", NEW)["workspaceMode"] == "shared"
    assert validate_arguments("kiro_status", {})["archive"] == "active"


def test_validation_does_not_change_the_callers_arguments():
    args = {"conversationId": "c_1", "message": "x"}
    validate_arguments("kiro_send", args)
    assert args == {"conversationId": "c_1", "message": "x"}


def test_a_huge_or_secret_value_is_never_echoed_back():
    secret = "AKIA" + "S3CR3T" * 50_000
    cases = [
        ("kiro_spawn", {**NEW, "message": secret}),
        ("kiro_spawn", {**NEW, "workspace": secret}),
        ("kiro_send", {"conversationId": secret, "message": "x"}),
        ("kiro_spawn", {**NEW, secret: 1}),
        ("kiro_spawn", {**NEW, "authority": secret}),
        ("kiro_status", {"limit": 10**30}),
        (secret, {}),
    ]
    for tool, args in cases:
        with pytest.raises(KirocrewError) as caught:
            validate_arguments(tool, args)
        assert "S3CR3T" not in caught.value.message
        assert len(caught.value.message) <= limits.ERROR_MESSAGE_MAX_CHARS


def test_unknown_property_names_that_look_odd_are_redacted_and_capped():
    args = {**NEW, **{f"extra{i}": 1 for i in range(50)}, "password=hunter2": 1}
    with pytest.raises(KirocrewError) as caught:
        validate_arguments("kiro_spawn", args)
    assert "hunter2" not in caught.value.message
    assert "and 48 more" in caught.value.message


def test_an_unknown_tool_fails_with_its_own_code():
    with pytest.raises(KirocrewError) as caught:
        validate_arguments("kiro_steer", {})
    assert caught.value.code == "unknown_tool"


@pytest.mark.parametrize("args", [None, [], "refresh", 1])
def test_arguments_that_are_not_an_object_are_refused_or_empty(args):
    if args is None:
        assert validate_arguments("kiro_capabilities", None) == {"refresh": False}
        return
    with pytest.raises(KirocrewError) as caught:
        validate_arguments("kiro_capabilities", args)
    assert caught.value.message == "kiro_capabilities: arguments must be of type object"


def test_the_tools_page_is_generated_from_the_schemas():
    page = (REPO / "docs/conversations/tools.md").read_text(encoding="utf-8")
    assert page == render_tools_reference(), (
        "docs/conversations/tools.md is stale: run "
        "`python -m kirocrew_conversations.tool_schemas > docs/conversations/tools.md`"
    )


def test_importing_the_schemas_does_not_import_jsonschema():
    code = ("import sys, kirocrew_conversations.tool_schemas as t; t.TOOLS; "
            "print('jsonschema' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_realistic_wait_answer_fits_the_output_schema_and_leaks_no_extra_field():
    run = {
        "conversationId": "conv_1", "runId": "run_1", "status": "completed",
        "settings": {"model": "auto", "effort": None, "mode": "kiro_default", "authority": "unrestricted",
                     "workspace": {"mode": "shared", "fingerprint": "ab12cd", "label": "project", "branch": None,
                                   "baseRef": None, "baseCommit": None}},
        "reply": {"text": "Done.", "truncated": False, "originalBytes": 5}, "error": None, "attention": None,
        "warnings": [{"code": "kirocrew_servers_not_mounted", "message": "This run runs as the agent 'kiro_default'."}],
        "createdAt": "2026-11-29T21:00:00.000+00:00", "startedAt": None, "endedAt": None,
    }
    answer = {"waitExpired": False, "mode": "all", "runs": [run]}
    validator = Draft202012Validator(TOOLS_BY_NAME["kiro_wait"].output_schema)
    assert list(validator.iter_errors(answer)) == []
    assert list(validator.iter_errors({**answer, "runs": [{**run, "sessionId": "s"}]})) != []
    assert list(validator.iter_errors({**answer, "runs": [run] * (limits.WAIT_MAX_TARGETS + 1)})) != []


def test_the_codes_validation_raises_are_in_the_error_catalogue():
    from kirocrew_conversations.errors import CATALOGUE

    assert {"invalid_arguments", "unknown_tool"} <= set(CATALOGUE)
