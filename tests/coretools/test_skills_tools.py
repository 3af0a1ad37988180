"""``skill_search``, ``skill_discover``, ``skill_fetch`` and the owner's ``skill_install`` through the real tool path.

Calls go through :class:`~kirocrew_core.coretools.server.CoreToolsServer` with a real session registry:
a session is a real process tree bound to a key with its workspace, the person is this test process, and
the registry is a real HTTP fixture on 127.0.0.1 (:mod:`kirocrew_testing.servers.skills_registry`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kirocrew_core import home
from kirocrew_core.config import set_value
from kirocrew_core.coretools.identity import SessionRegistry
from kirocrew_core.coretools.server import CoreToolsServer
from kirocrew_core.processes import ProcessRef
from kirocrew_core.skills import admin
from kirocrew_core.skills.tools import READ_CAP_BYTES, skill_tools
from kirocrew_testing.core_sessions import ProcessTree, verified_caller
from kirocrew_testing.servers.skills_registry import HUGE_ID, Registry, skills_registry
from kirocrew_testing.skill_folders import project_skills as project
from kirocrew_testing.skill_folders import write_skill as skill


ELSEWHERE = ProcessRef(pid=2**22 + 1, started=0.0)
TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0" * 2


class Crew:
    """A session working in ``workspace``, the person, and an unverifiable caller."""

    def __init__(self, tree: ProcessTree, workspace: Path) -> None:
        self.registry = SessionRegistry(host=ELSEWHERE)
        self.server = CoreToolsServer(registry=self.registry, tool_source=lambda: {t.name: t for t in skill_tools()})
        key = self.registry.issue("conversation", "conv-a", workspace=str(workspace))
        assert self.registry.bind_pid(key, tree.parent)
        unverified = verified_caller(os.getpid())
        self.callers: dict[str, Any] = {
            "session": verified_caller(tree.child), "person": verified_caller(os.getpid()),
            "unverified": type(unverified)(**{**vars(unverified), "peer_verified": False})}
        self.tree = tree

    def __call__(self, who: str, tool: str, **args: Any) -> tuple[str, str | None]:
        return asyncio.run(self.server.call(tool, args, self.callers[who]))

    def ok(self, who: str, tool: str, **args: Any) -> str:
        text, code = self(who, tool, **args)
        assert code is None, text
        return text

    def admin(self, who: str, **args: Any) -> tuple[str, str | None]:
        server = CoreToolsServer(registry=self.registry, tool_source=admin.admin_tools, server_name=admin.ADMIN_SERVER)
        caller = self.callers[who]
        if who == "person":
            caller = verified_caller(os.getpid(), session_type="cli")  # the owner's own kirocrew command
        return asyncio.run(server.call("skill_install", args, caller))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return tmp_path / "ws"


@pytest.fixture
def crew(process_tree: Callable[[], ProcessTree], workspace: Path) -> Crew:
    return Crew(process_tree(), workspace)


@pytest.fixture
def registry() -> Iterator[Registry]:
    with skills_registry() as served:
        set_value("skills.registry_url", served.url)
        set_value("skills.registry_allow_private", "true")  # the fixture is on loopback
        yield served


def test_the_tools_are_listed_read_only_with_closed_schemas() -> None:
    tools = {t.name: t for t in skill_tools()}
    assert sorted(tools) == ["browse_outline", "browse_search", "skill_discover", "skill_fetch", "skill_search"]
    assert all(t.read_only and t.input_schema["additionalProperties"] is False for t in tools.values())
    assert tools["skill_search"].identity == "lenient" and tools["browse_search"].identity == "none"


def test_search_matches_name_and_description_first_and_the_body_only_on_a_miss(crew: Crew, workspace: Path) -> None:
    skill(project(workspace), "pdf", "Fill PDF forms", body="Mentions invoices.\n")
    skill(project(workspace), "invoices", "Book invoices in the ledger")
    skill(project(workspace), "mail", "Send mail", body="Attach the quarterly report.\n")
    assert crew.ok("session", "skill_search", query="invoices").splitlines() == [
        "Skills matching 'invoices' (1; 1–1 shown):", "- `invoices` (project): Book invoices in the ledger"]
    assert crew.ok("session", "skill_search", query="quarterly").splitlines()[1] == "- `mail` (project): Send mail"
    assert crew.ok("session", "skill_search", query="nothing") == "No skills match 'nothing'. Try action=list."


def test_list_pages_and_names_what_is_not_loaded(crew: Crew, workspace: Path) -> None:
    for name in ("a1", "a2", "a3"):
        skill(project(workspace), name, f"skill {name}", always=name == "a2")
    (project(workspace) / "bad").mkdir()
    (project(workspace) / "bad" / "SKILL.md").write_text("no front matter")
    first = crew.ok("session", "skill_search", action="list", limit=2)
    assert first.splitlines()[:4] == ["Skills (3; 1–2 shown):", "- `a1` (project): skill a1",
                                      "- `a2` (project · always): skill a2",
                                      "More: offset=2. Read one with action=read and its key."]
    assert first.endswith("- `bad` (project, broken): no YAML front matter: SKILL.md must start with a '---' line")
    assert crew.ok("session", "skill_search", action="list", limit=2, offset=2).splitlines()[:2] == [
        "Skills (3; 3–3 shown):", "- `a3` (project): skill a3"]


def test_read_pages_by_lines_and_redacts(crew: Crew, workspace: Path) -> None:
    body = "".join(f"line {i}\n" for i in range(1, 8)) + f"token {TOKEN}\n"
    skill(project(workspace), "team/long", "A long one", body=body)
    page = crew.ok("session", "skill_search", action="read", key="team/long", limit=3)
    assert page.splitlines() == ["# long (`team/long`, project)", "A long one", "Lines 1–3 of 8:",
                                 "line 1", "line 2", "line 3", "…more: offset=3"]
    last = crew.ok("session", "skill_search", action="read", key="team/long", offset=7)
    assert TOKEN not in last and last.splitlines()[-1] == "token <redacted>"


def test_reads_refuse_with_stable_codes(crew: Crew, workspace: Path) -> None:
    skill(project(workspace), "big", "too big to read", body="x" * (READ_CAP_BYTES + 10))
    (project(workspace) / "bad").mkdir()
    (project(workspace) / "bad" / "SKILL.md").write_text("---\nname: [\n---\n")
    cases: list[tuple[dict[str, Any], str]] = [({"action": "read", "key": "../etc"}, "outside_scope"),
             ({"action": "read", "key": "/etc/passwd"}, "outside_scope"),
             ({"action": "read", "key": "nowhere"}, "outside_scope"),
             ({"action": "read", "key": "bad"}, "unreadable"),
             ({"action": "read", "key": "big"}, "over_capacity"),
             ({"action": "read"}, "invalid_arguments"),
             ({"action": "search"}, "invalid_arguments"),
             ({"action": "read", "key": "big", "limit": 51}, "invalid_arguments"),
             ({"query": "x" * 501}, "invalid_arguments")]
    for args, code in cases:
        text, got = crew("session", "skill_search", **args)
        assert got == code, (args, text)
    assert crew("unverified", "skill_search", action="list")[1] == "caller_unverified"


def test_a_project_skill_is_the_sessions_alone_the_person_sees_shared_sources(crew: Crew, workspace: Path) -> None:
    skill(project(workspace), "mine", "the project's")
    skill(home.crew_home() / "skills", "shared", "the crew's")
    assert "`mine`" in crew.ok("session", "skill_search", action="list")
    listed = crew.ok("person", "skill_search", action="list")
    assert "`shared`" in listed and "`mine`" not in listed
    assert crew("person", "skill_search", action="read", key="mine")[1] == "outside_scope"


def test_discover_sends_the_redacted_query_and_installs_nothing(crew: Crew, registry: Registry) -> None:
    text = crew.ok("session", "skill_discover", query=f"pdf {TOKEN}")
    assert text == "Registry skills matching 'pdf <redacted>' (0) — NOT installed."
    assert registry.requests == ["/api/search?q=pdf+%3Credacted%3E&limit=10"]  # the secret never left
    assert crew.ok("session", "skill_discover", query="pdf", limit=5).splitlines() == [
        "Registry skills matching 'pdf' (1) — NOT installed.",
        "- `acme/tools/pdf-forms` pdf-forms · 7 installs: Fill and flatten PDF forms",
        "Read one with skill_fetch(id). Only the owner installs (kirocrew skills install ID)."]
    assert not (home.crew_home() / "skills").exists()


def test_fetch_shows_the_instructions_and_the_other_files_and_refuses_what_it_cannot(
        crew: Crew, registry: Registry) -> None:
    text = crew.ok("session", "skill_fetch", id="acme/tools/pdf-forms")
    assert text.startswith("Skill acme/tools/pdf-forms from the registry — NOT installed")
    assert "# PDF forms\nUse pdftk." in text and text.endswith("Other files:\n- scripts/fill.sh (48 bytes)")
    cases = [("acme/tools/missing", "not_found"), (HUGE_ID, "over_capacity"),
             ("acme/tools/escape", "registry_error"), ("../../etc", "invalid_arguments")]
    for skill_id, code in cases:
        got, refused = crew("session", "skill_fetch", id=skill_id)
        assert refused == code, (skill_id, got)
    assert not (home.crew_home() / "skills").exists()


def test_a_loopback_registry_is_refused_unless_private_addresses_are_allowed(crew: Crew) -> None:
    text, code = crew("session", "skill_discover", query="pdf")
    assert code == "registry_unconfigured"
    with skills_registry() as served:
        set_value("skills.registry_url", served.url)
        text, code = crew("session", "skill_discover", query="pdf")
        assert code == "address_refused" and "127.0.0.1" in text
        assert served.requests == []  # refused before connecting


def test_only_the_owners_command_installs_and_the_skill_then_reaches_sessions(crew: Crew, registry: Registry) -> None:
    assert crew.admin("session", id="acme/tools/pdf-forms")[1] == "person_only_command"
    assert crew.admin("unverified", id="acme/tools/pdf-forms")[1] == "caller_unverified"
    assert not (home.crew_home() / "skills").exists()
    text, code = crew.admin("person", id="acme/tools/pdf-forms")
    assert code is None and text == "Installed skill acme/tools/pdf-forms as pdf-forms (2 files)."
    installed = home.crew_home() / "skills" / "pdf-forms"
    assert (installed / "scripts" / "fill.sh").read_text().startswith("#!/bin/sh")
    assert crew.ok("session", "skill_search", query="flatten").splitlines()[1] == (
        "- `pdf-forms` (crew): Fill and flatten PDF forms")
    assert crew.admin("person", id="acme/tools/pdf-forms")[1] == "install_refused"  # never replaced
    assert crew.admin("person", id="acme/tools/broken")[1] == "install_refused"
    assert sorted(p.name for p in installed.parent.iterdir()) == ["pdf-forms"]  # no staging left behind


@pytest.mark.parametrize("address", ["10.0.0.1", "169.254.169.254", "::1", "::ffff:127.0.0.1", "100.64.0.1",
                                     "0.0.0.0", "fd00::1"])
def test_every_non_public_address_is_refused_before_any_connection(address: str) -> None:
    from kirocrew_core.skills.registry import RegistryError, checked_address

    with pytest.raises(RegistryError) as refused:
        checked_address(address, 443, allow_private=False)
    assert refused.value.code == "address_refused"
    assert checked_address(address, 443, allow_private=True) == address
    assert checked_address("8.8.8.8", 443, allow_private=False) == "8.8.8.8"  # a literal: no lookup leaves


def test_a_skill_whose_files_collide_is_refused_and_leaves_nothing_behind() -> None:
    from kirocrew_core.skills.install import InstallError, install
    from kirocrew_core.skills.registry import SkillFile

    good = "---\nname: twin\ndescription: twice\n---\n"
    with pytest.raises(InstallError, match="could not be written"):
        install("acme/tools/twin", [SkillFile("SKILL.md", good), SkillFile("a", "1"), SkillFile("a", "2")])
    assert list((home.crew_home() / "skills").iterdir()) == []
