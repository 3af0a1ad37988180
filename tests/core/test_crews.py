"""Crews in config.toml: each [crews.NAME] entry checked, kept by `kirocrew crew`, and ranked by route_crew."""

from __future__ import annotations

import json

import pytest

from kirocrew_core import home
from kirocrew_core.config import load_config, set_value
from kirocrew_core.crews.bindings import Crew, add_crew, all_crews, find_crew, remove_crew
from kirocrew_core.crews.routing import matched_triggers, rank
from kirocrew_core.crews.tools import route_crew, select_crew
from kirocrew_core.errors import BadInputError, MalformedFileError

HAND_WRITTEN = """\
# the owner's settings
[gateway]
port = 7400  # not the usual one

# crews I use
[crews.reviewer]
kiro_agent = "reviewer"   # my review agent
authority = "read_only"
triggers = ["code review", "diff"]
"""


@pytest.fixture
def config_path():
    path = home.config_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


@pytest.mark.parametrize(("entry", "problem"), [
    ('[crews."../etc"]\nmodel = "m"\n', 'crew name "../etc" must be'),
    ('[crews."a b"]\nmodel = "m"\n', 'crew name "a b" must be'),
    ('[crews.x]\ncolour = "red"\n', "colour: unknown crew field; valid fields: kiro_agent, model, workspace"),
    ('[crews.x]\ntriggers = "review"\n', "triggers: expected a list of strings"),
    ('[crews.x]\ntriggers = ["ok", "two\\nlines"]\n', "each trigger must be a word or phrase"),
    ('[crews.x]\nworkspace = "relative/dir"\n', "workspace: must be an absolute path"),
    ('[crews.x]\nkiro_agent = "../agent"\n', "kiro_agent: must be an agent name"),
    ('[crews.x]\nauthority = "root!"\n', "authority: must be an authority name"),
    ('[crews.x]\nmodel = 3\n', "model: expected a string"),
    ('crews = "all of them"\n', "crews: must be a table of crews"),
    ("[crews]\nreviewer = 1\n", "a crew must be a table ([crews.reviewer])"),
])
def test_a_bad_crew_entry_is_config_invalid_and_names_the_problem(config_path, entry, problem):
    config_path.write_text(entry)
    with pytest.raises(MalformedFileError) as raised:
        load_config()
    assert raised.value.code == "config_invalid" and problem in str(raised.value)


def test_crews_read_back_sorted_with_unset_fields_none(config_path):
    config_path.write_text(HAND_WRITTEN + '\n[crews.docs]\nworkspace = "~/notes"\n')
    crews = all_crews()
    assert [c.name for c in crews] == ["docs", "reviewer"]
    docs, reviewer = crews
    assert docs == Crew("docs", workspace="~/notes") and docs.workspace_path == str(home.user_home() / "notes")
    assert reviewer.bound() == {"kiro_agent": "reviewer", "workspace": None, "model": None, "authority": "read_only"}
    assert reviewer.triggers == ("code review", "diff")
    with pytest.raises(BadInputError) as unknown:
        find_crew("nobody")
    assert unknown.value.code == "unknown_crew" and "available crews: docs, reviewer" in str(unknown.value)


def test_adding_and_removing_a_crew_keeps_every_comment_and_the_rest_of_the_file(config_path):
    config_path.write_text(HAND_WRITTEN)
    add_crew(Crew("writer", model="claude-haiku-4.5", triggers=("docs", "write up")))
    text = config_path.read_text()
    assert text.startswith(HAND_WRITTEN)
    assert '[crews.writer]\nmodel = "claude-haiku-4.5"\ntriggers = ["docs", "write up"]\n' in text
    assert "[crews]\n" not in text  # a super-table: no bare header
    with pytest.raises(BadInputError) as taken:
        add_crew(Crew("writer"))
    assert taken.value.code == "crew_exists" and config_path.read_text() == text
    assert remove_crew("writer").triggers == ("docs", "write up")
    assert config_path.read_text().rstrip() == HAND_WRITTEN.rstrip()
    set_value("gateway.port", "7500")  # a key set beside the crews leaves them as they are
    assert config_path.read_text().rstrip() == HAND_WRITTEN.replace("7400", "7500").rstrip()
    remove_crew("reviewer")
    assert "# crews I use" in config_path.read_text() and "[crews" not in config_path.read_text()
    with pytest.raises(BadInputError) as gone:
        remove_crew("reviewer")
    assert gone.value.code == "unknown_crew" and "crews: none" in str(gone.value)


@pytest.mark.parametrize(("crew", "code"), [
    (Crew("a/b"), "invalid_config_value"),
    (Crew("ok", kiro_agent="x y"), "invalid_config_value"),
    (Crew("ok", triggers=("",)), "invalid_config_value"),
    (Crew("x" * 65), "invalid_config_value"),
])
def test_a_bad_crew_is_refused_and_the_file_is_untouched(config_path, crew, code):
    config_path.write_text(HAND_WRITTEN)
    with pytest.raises(BadInputError) as refused:
        add_crew(crew)
    assert refused.value.code == code
    assert config_path.read_text() == HAND_WRITTEN


def test_a_malformed_file_is_reported_and_never_rewritten_by_crew_add(config_path):
    broken = b"# mine\n[gateway\nport = 1\n"
    config_path.write_bytes(broken)
    with pytest.raises(MalformedFileError) as raised:
        add_crew(Crew("writer"))
    assert raised.value.code == "config_malformed" and config_path.read_bytes() == broken


@pytest.mark.parametrize("written", ['crews = {old = {model = "m"}}\n', 'crews.old.model = "m"\n'])
def test_crews_written_inline_or_as_dotted_keys_are_edited_in_place(config_path, written):
    config_path.write_text(written)
    add_crew(Crew("new", triggers=("x",)))
    assert [(c.name, c.model, c.triggers) for c in all_crews()] == [("new", None, ("x",)), ("old", "m", ())]
    remove_crew("new")
    assert config_path.read_text().strip() == written.strip()


def test_removing_a_broken_crew_is_the_fix(config_path):
    config_path.write_text('[crews.old]\ncolour = "red"\n[crews.ok]\nmodel = "m"\n')
    assert remove_crew("old") == Crew("old")  # its unknown field is not a binding
    assert [c.name for c in all_crews()] == ["ok"]


def test_triggers_match_whole_words_and_phrases_case_insensitively():
    triggers = ("review", "code review", "c++", "ci")
    assert matched_triggers("Please REVIEW this Code\n  Review", triggers) == ("review", "code review")
    assert matched_triggers("the reviewer decides; cinema", triggers) == ()
    assert matched_triggers("port it to C++ and fix CI.", triggers) == ("c++", "ci")


def test_route_ranks_by_matched_words_then_name():
    crews = [Crew("zeta", triggers=("bug",)), Crew("alpha", triggers=("bug",)),
             Crew("reviewer", triggers=("code review", "diff")), Crew("quiet")]
    ranked = rank("Do a code review of the diff for this bug", crews)
    assert [(r.crew.name, r.score, r.matched) for r in ranked] == [
        ("reviewer", 3, ("code review", "diff")), ("alpha", 1, ("bug",)), ("zeta", 1, ("bug",))]
    assert rank("nothing relevant", crews) == []


def test_select_and_route_crew_answer_in_the_references_shapes(config_path):
    config_path.write_text(HAND_WRITTEN + '\n[crews.hidden]\nmodel = "m"\n')
    roster = json.loads(select_crew({}, None))
    assert roster["default_agent"] == "kirocrew"
    assert roster["crews"] == [{"name": "reviewer", "triggers": ["code review", "diff"]}]  # no triggers: not listed
    assert "spawn_run(crew=<name>" in roster["guidance"]
    assert json.loads(select_crew({"crew": "hidden"}, None))["bound"] == {
        "kiro_agent": None, "workspace": None, "model": "m", "authority": None}
    routed = json.loads(route_crew({"task": "Please do a Code Review"}, None))
    assert routed["ranked"] == [{"crew": "reviewer", "score": 2, "matched": ["code review"]}]
    assert (routed["tool"], routed["arguments"]) == ("spawn_run", {"crew": "reviewer"})
    assert json.loads(route_crew({"task": "bake bread"}, None))["ranked"] == []


def test_the_crew_commands_add_list_and_remove(kirocrew, config_path, tmp_path):
    config_path.write_text(HAND_WRITTEN)
    added = kirocrew("crew", "add", "writer", "--model", "claude-haiku-4.5", "--workspace", str(tmp_path),
                     "--trigger", "docs", "--trigger", "write up")
    assert added.returncode == 0 and added.stdout == "Saved crew writer.\n", added.stderr
    listed = kirocrew("crew", "list")
    assert listed.stdout.splitlines() == [
        "reviewer  kiro_agent=reviewer  authority=read_only", "  triggers: code review, diff",
        f"writer  workspace={tmp_path}  model=claude-haiku-4.5", "  triggers: docs, write up"]
    as_json = json.loads(kirocrew("crew", "list", "--json").stdout)
    assert [c["name"] for c in as_json] == ["reviewer", "writer"] and as_json[1]["workspace"] == str(tmp_path)
    again = kirocrew("crew", "add", "writer")
    assert again.returncode == 2 and "error[crew_exists]" in again.stderr
    hostile = kirocrew("crew", "add", "../../x", "--trigger", "t")
    assert hostile.returncode == 2 and "error[invalid_config_value]" in hostile.stderr
    assert kirocrew("crew", "remove", "writer").stdout == "Removed crew writer.\n"
    missing = kirocrew("crew", "remove", "writer")
    assert missing.returncode == 2 and "error[unknown_crew]" in missing.stderr and "crews: reviewer" in missing.stderr
    assert config_path.read_text().rstrip() == HAND_WRITTEN.rstrip()


def test_crew_changes_are_recorded_in_the_security_event_log_and_refusals_are_not(config_path):
    from kirocrew_core import audit

    add_crew(Crew("writer", model="m", triggers=("docs",)))
    with pytest.raises(BadInputError):
        add_crew(Crew("writer"))
    remove_crew("writer")
    assert [(r["event"], r["fields"]) for r in audit.tail(5)] == [
        ("config.crew_set", {"key": "crews.writer", "value": {"model": "m", "triggers": ["docs"]}}),
        ("config.crew_remove", {"key": "crews.writer", "value": None}),
    ]
