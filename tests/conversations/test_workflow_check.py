"""The static check refuses hostile workflow scripts with a stable code and the line, before anything runs."""

from __future__ import annotations

import pytest

from kirocrew_conversations.workflow_check import MAX_SOURCE_BYTES, WorkflowRejected, check_source

GOOD = '''META = {"name": "review", "description": "two reviews", "wall_secs": 120}

async def workflow(ctx):
    first = await ctx.agent("!say one", label="one")
    ctx.log("got " + str(first))
    return [first]
'''


def _body(line: str) -> str:
    return f'META = {{"name": "x"}}\n\nasync def workflow(ctx):\n    {line}\n    return None\n'


def test_a_plain_workflow_passes_and_its_meta_is_returned() -> None:
    assert check_source(GOOD) == {"name": "review", "description": "two reviews", "wall_secs": 120}


@pytest.mark.parametrize(("line", "code"), [
    ("import os", "workflow_import_forbidden"),
    ("from subprocess import run", "workflow_import_forbidden"),
    ("eval('1')", "workflow_name_forbidden"),
    ("exec('x = 1')", "workflow_name_forbidden"),
    ("open('/etc/passwd')", "workflow_name_forbidden"),
    ("compile('1', 'f', 'eval')", "workflow_name_forbidden"),
    ("getattr(ctx, 'x')", "workflow_name_forbidden"),
    ("setattr(ctx, 'x', 1)", "workflow_name_forbidden"),
    ("globals()", "workflow_name_forbidden"),
    ("locals()", "workflow_name_forbidden"),
    ("vars(ctx)", "workflow_name_forbidden"),
    ("breakpoint()", "workflow_name_forbidden"),
    ("x = type(ctx)", "workflow_name_forbidden"),
    ("__import__('os')", "workflow_dunder_forbidden"),
    ("x = ().__class__.__bases__[0].__subclasses__()", "workflow_attribute_forbidden"),
    ("x = __builtins__", "workflow_dunder_forbidden"),
    ("x = ctx.agent.cr_frame", "workflow_attribute_forbidden"),
    ("x = ctx.agent('a').cr_frame.f_globals", "workflow_attribute_forbidden"),
    ("x = '{0.__class__}'.format(ctx)", "workflow_attribute_forbidden"),
    ("def __init__(self): pass", "workflow_dunder_forbidden"),
    ("ctx._channel.send({'op': 'done'})", "workflow_attribute_forbidden"),
    ("f = lambda __x: __x", "workflow_dunder_forbidden"),
])
def test_a_hostile_line_is_refused_with_its_code_and_line(line: str, code: str) -> None:
    with pytest.raises(WorkflowRejected) as caught:
        check_source(_body(line))
    assert caught.value.code == code
    assert caught.value.line == 4 and caught.value.where == "validate"
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(("source", "code"), [
    ("async def workflow(ctx):\n    return 1\n", "workflow_meta_missing"),
    ("META = dict(name='x')\nasync def workflow(ctx):\n    return 1\n", "workflow_meta_invalid"),
    ("META = {'n': ctx}\nasync def workflow(ctx):\n    return 1\n", "workflow_meta_invalid"),
    ("META = {1: 'x'}\nasync def workflow(ctx):\n    return 1\n", "workflow_meta_invalid"),
    ("META = {}\ndef workflow(ctx):\n    return 1\n", "workflow_entry_missing"),
    ("META = {}\nasync def workflow(ctx, more):\n    return 1\n", "workflow_entry_invalid"),
    ("META = {}\nasync def workflow(ctx:\n", "workflow_syntax_error"),
    ("META = {}\x00", "workflow_syntax_error"),
])
def test_a_malformed_script_is_refused_with_a_stable_code(source: str, code: str) -> None:
    with pytest.raises(WorkflowRejected) as caught:
        check_source(source)
    assert caught.value.code == code


def test_a_script_over_the_size_cap_is_refused_before_it_is_parsed() -> None:
    padding = "# " + "x" * MAX_SOURCE_BYTES + "\n"
    with pytest.raises(WorkflowRejected) as caught:
        check_source(GOOD + padding)
    assert caught.value.code == "workflow_too_large"
    assert check_source(GOOD + "# " + "x" * (MAX_SOURCE_BYTES - len(GOOD) - 10) + "\n")["name"] == "review"


@pytest.mark.parametrize("port", ["approve", "cron", "knowledge", "learn", "memory", "send_message", "send_slack",
                                  "workflow"])
def test_a_port_this_host_does_not_wire_is_refused_with_its_name_and_line(port: str) -> None:
    with pytest.raises(WorkflowRejected) as caught:
        check_source(_body(f"x = ctx.{port}"))
    assert caught.value.code == "workflow_port_unavailable" and caught.value.line == 4
    message = caught.value.message
    assert f"the {port!r} port is not available" in message and "only nudge is wired" in message


def test_the_ports_are_found_under_the_name_the_entry_gives_ctx_even_in_a_helper() -> None:
    helper = ('META = {"name": "x"}\n\nasync def tell(c, text):\n    await c.send_slack("#x", text)\n\n'
              'async def workflow(c):\n    await tell(c, "hi")\n')
    with pytest.raises(WorkflowRejected) as caught:
        check_source(helper)
    assert caught.value.code == "workflow_port_unavailable" and caught.value.line == 4
    # nudge is wired; another object's attribute of the same name is not ctx's
    assert check_source(_body('await ctx.nudge("look again", idle_secs=60)')) == {"name": "x"}
    assert check_source(_body('book = {"memory": 1}\n    x = book.get("memory")')) == {"name": "x"}
