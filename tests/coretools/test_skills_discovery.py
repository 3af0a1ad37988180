"""Skill discovery on real folders: precedence, broken front matter, hostile entries never followed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kirocrew_core import home
from kirocrew_core.config import set_value
from kirocrew_core.skills.discovery import MAX_SKILL_BYTES, SkillFileError, catalog, parse_skill
from kirocrew_testing.skill_folders import project_skills as project
from kirocrew_testing.skill_folders import write_skill as skill


def test_a_project_skill_hides_the_crew_one_of_the_same_key_and_every_source_is_read(tmp_path: Path) -> None:
    workspace, extra = tmp_path / "ws", tmp_path / "extra"
    skill(project(workspace), "review", "the project's review")
    skill(home.crew_home() / "skills", "review", "the crew's review")
    skill(home.crew_home() / "skills", "team/deploy", "nested deploy")
    skill(extra, "lint", "extra lint")
    skill(home.kiro_home() / "skills", "kiro-own", "kiro's own")
    skill(workspace / ".kiro" / "skills", "kiro-project", "kiro's project one")
    set_value("skills.extra_paths", f'["{extra}"]')

    found = catalog(str(workspace))
    assert [(s.key, s.source.kind, s.description) for s in found.skills] == [
        ("review", "project", "the project's review"), ("team/deploy", "crew", "nested deploy"),
        ("lint", "extra", "extra lint"), ("kiro-project", "kiro", "kiro's project one"),
        ("kiro-own", "kiro", "kiro's own")]
    assert [(s.key, s.source.kind) for s in found.hidden] == [("review", "crew")]
    # The owner (no workspace) sees no project folders at all.
    assert [s.key for s in catalog(None).skills] == ["review", "team/deploy", "lint", "kiro-own"]


@pytest.mark.parametrize(("text", "why"), [
    ("# no front matter\n", "no YAML front matter"),
    ("---\nname: x\ndescription: y\n", "no closing '---'"),
    ("---\nname: [unclosed\n---\n", "not valid YAML"),
    ("---\n- a list\n---\n", "not a mapping"),
    ("---\nname: x\n---\n", "'description' is required"),
    ("---\nname: x\ndescription: y\nalways: sometimes\n---\n", "'always' must be true or false"),
    ("---\nname: x\ndescription: y\ntriggers: {a: 1}\n---\n", "'triggers' must be"),
    ("---\n!!python/object/apply:os.system [echo pwned]\n---\n", "not valid YAML"),
])
def test_a_malformed_skill_md_is_listed_as_broken_with_why_and_never_loaded(tmp_path: Path, text: str,
                                                                              why: str) -> None:
    folder = project(tmp_path) / "bad"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(text)
    found = catalog(str(tmp_path))
    assert found.skills == []
    [problem] = found.problems
    assert (problem.key, problem.state) == ("bad", "broken") and why in problem.reason, problem.reason


def test_front_matter_takes_triggers_as_a_list_or_commas_and_the_name_defaults_to_the_folder() -> None:
    meta, body = parse_skill("---\ndescription: d\ntriggers: pdf, forms\n---\n\nText\n", "folder-name")
    assert (meta["name"], meta["triggers"], body) == ("folder-name", ("pdf", "forms"), "Text\n")
    with pytest.raises(SkillFileError):
        parse_skill("---\nname: ''\ndescription: d\n---\n", "f")


def test_hostile_entries_are_skipped_with_a_reason_and_never_followed(tmp_path: Path) -> None:
    root = project(tmp_path)
    outside = skill(tmp_path / "outside", "secret", "must never be read")
    root.mkdir(parents=True)
    os.symlink(outside, root / "linked-folder")
    (root / "linked-file").mkdir()
    os.symlink(outside / "SKILL.md", root / "linked-file" / "SKILL.md")
    (root / "fifo").mkdir()
    os.mkfifo(root / "fifo" / "SKILL.md")
    (root / "huge").mkdir()
    with open(root / "huge" / "SKILL.md", "wb") as handle:
        handle.truncate(MAX_SKILL_BYTES + 1)  # sparse: "2 GB" costs nothing
    (root / "binary").mkdir()
    (root / "binary" / "SKILL.md").write_bytes(b"---\nname: x\ndescription: \xff\xfe\n---\n")
    skill(root, "fine", "the one good skill")

    found = catalog(str(tmp_path))
    assert [s.key for s in found.skills] == ["fine"]
    reasons = {p.key: (p.state, p.reason) for p in found.problems}
    assert set(reasons) == {"linked-folder", "linked-file", "fifo", "huge", "binary"}
    assert all(state == "skipped" for state, _ in reasons.values())
    assert "symbolic link" in reasons["linked-folder"][1] and "symbolic link" in reasons["linked-file"][1]
    assert "not a regular file" in reasons["fifo"][1]
    assert "over the" in reasons["huge"][1] and "not valid UTF-8" in reasons["binary"][1]


def test_a_source_that_is_a_link_is_not_entered(tmp_path: Path) -> None:
    real = tmp_path / "real"
    skill(real, "a", "behind a link")
    (tmp_path / "ws" / ".kirocrew").mkdir(parents=True)
    os.symlink(real, project(tmp_path / "ws"))
    found = catalog(str(tmp_path / "ws"))
    assert found.skills == [] and [p.reason for p in found.problems] == [
        "the source is not a folder (links are not followed)"]


def test_extra_paths_without_a_config_file_are_the_keys_default_and_with_one_are_read(tmp_path: Path) -> None:
    """The agentSpawn hook skips the config module when there is no config.toml: that must equal the default."""
    from kirocrew_core.config import lookup_key
    from kirocrew_core.skills.discovery import configured_extra_paths

    assert not home.config_file().exists()
    assert configured_extra_paths() == lookup_key("skills.extra_paths").default == []
    set_value("skills.extra_paths", f'["{tmp_path}"]')
    assert configured_extra_paths() == [str(tmp_path)]
