"""``kirocrew skills list|show|search|install``: the real command in a subprocess, a real registry on 127.0.0.1."""

from __future__ import annotations

import json
import os
from pathlib import Path

from kirocrew_core import home
from kirocrew_core.config import set_value
from kirocrew_testing.fixtures import run_kirocrew
from kirocrew_testing.servers.skills_registry import skills_registry
from kirocrew_testing.skill_folders import project_skills, write_skill


def test_list_show_and_search_answer_for_the_workspace_and_name_broken_skills(tmp_path: Path) -> None:
    write_skill(project_skills(tmp_path), "deploy", "Deploy the service", always=True, body="Run make deploy.\n")
    write_skill(home.crew_home() / "skills", "notes", "Take meeting notes")
    (project_skills(tmp_path) / "bad").mkdir()
    (project_skills(tmp_path) / "bad" / "SKILL.md").write_text("---\nname: bad\n---\n")

    listed = run_kirocrew("skills", "list", "--workspace", str(tmp_path))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [
        "deploy\tproject\talways\tDeploy the service", "notes\tcrew\tsummary\tTake meeting notes",
        "bad\tproject\tbroken\t'description' is required and must be a non-empty string"]
    as_json = json.loads(run_kirocrew("skills", "list", "--json", "--workspace", str(tmp_path)).stdout)
    assert [s["key"] for s in as_json["skills"]] == ["deploy", "notes"] and as_json["problems"][0]["key"] == "bad"

    shown = run_kirocrew("skills", "show", "deploy", "--workspace", str(tmp_path))
    assert shown.returncode == 0 and shown.stdout.endswith("Lines 1–1 of 1:\nRun make deploy.\n")
    found = run_kirocrew("skills", "search", "meeting", "--workspace", str(tmp_path))
    assert found.stdout.splitlines()[1] == "- `notes` (crew): Take meeting notes"
    missing = run_kirocrew("skills", "show", "bad", "--workspace", str(tmp_path))
    assert missing.returncode == 1 and "error[unreadable]" in missing.stderr


def test_install_shows_every_file_and_writes_only_when_the_owner_says_yes() -> None:
    target = home.crew_home() / "skills" / "pdf-forms"
    with skills_registry() as registry:
        set_value("skills.registry_url", registry.url)
        set_value("skills.registry_allow_private", "true")
        declined = run_kirocrew("skills", "install", "acme/tools/pdf-forms", input="n\n")
        assert declined.returncode == 0, declined.stderr
        assert declined.stdout.splitlines()[1:3] == ["  SKILL.md (87 bytes)", "  scripts/fill.sh (48 bytes)"]
        assert "--- SKILL.md ---\n---\nname: pdf-forms" in declined.stdout and "Not installed." in declined.stdout
        assert not target.exists()
        done = run_kirocrew("skills", "install", "acme/tools/pdf-forms", "--yes")
        assert done.returncode == 0, done.stderr
        assert done.stdout.rstrip().endswith(f"Installed skill acme/tools/pdf-forms as {target}")
        broken = run_kirocrew("skills", "install", "acme/tools/broken", "--yes")
        assert broken.returncode == 1 and "error[install_refused]" in broken.stderr
    assert sorted(os.listdir(target.parent)) == ["pdf-forms"]
    assert (target / "SKILL.md").read_text().startswith("---\nname: pdf-forms")


def test_the_skills_command_is_listed_in_help() -> None:
    shown = run_kirocrew("--help")
    assert shown.returncode == 0 and "skills" in shown.stdout and "Agent Skills" in shown.stdout
