"""The tool-alias rule: declared tools two mounted providers share are renamed for every claimant."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from kirocrew_core import home
from kirocrew_core.origin_overrides import OriginOverrides, activate
from kirocrew_testing.fake_kiro.harness import start_fake_kiro

from kirocrew_connections.registry import Provider, load_registry, routed_registry
from kirocrew_connections.tool_aliases import (
    aliases_by_server,
    connections_tool_aliases,
    mounted_tool_aliases,
    resolve_tool_aliases,
)


def _providers(*slugs: str) -> list[Provider]:
    registry = load_registry()
    return [registry.get(slug) for slug in slugs]


def test_list_issues_of_github_linear_and_gitlab_is_renamed_for_every_claimant() -> None:
    aliases = resolve_tool_aliases(_providers("github", "linear", "gitlab"))
    assert aliases["@github/list_issues"] == "github_list_issues"
    assert aliases["@linear/list_issues"] == "linear_list_issues"
    assert aliases["@gitlab/list_issues"] == "gitlab_list_issues"
    assert not any(value == "list_issues" for value in aliases.values())


def test_a_declared_tool_only_one_mounted_provider_claims_keeps_its_name() -> None:
    assert resolve_tool_aliases(_providers("linear")) == {}
    aliases = resolve_tool_aliases(_providers("github", "linear"))
    assert "@linear/list_projects" not in aliases  # only Linear declares it
    assert aliases["@github/get_issue"] == "github_get_issue"


def test_keys_follow_the_mounted_server_alias_and_split_on_the_last_slash() -> None:
    aliases = connections_tool_aliases(_providers("github", "linear"), server_alias=lambda slug: f"x-{slug}")
    assert "@x-github/list_issues" in aliases and "@x-linear/list_issues" in aliases
    assert list(aliases) == sorted(aliases)
    assert aliases_by_server(aliases)["x-linear"]["get_issue"] == "linear_get_issue"


def test_the_default_server_alias_is_the_identity_for_registry_slugs() -> None:
    providers = _providers("github", "gitlab")
    assert connections_tool_aliases(providers) == dict(sorted(resolve_tool_aliases(providers).items()))


def test_a_single_server_spec_never_needs_an_alias() -> None:
    assert all(connections_tool_aliases([provider]) == {} for provider in load_registry().all())


def test_only_entries_at_the_providers_endpoint_and_enabled_count_as_mounted() -> None:
    github, linear, gitlab = _providers("github", "linear", "gitlab")
    servers: dict[str, dict[str, Any]] = {
        "github": {"url": github.mcp_url}, "linear": {"url": "https://elsewhere.example/mcp"},
        "gitlab": {"url": gitlab.mcp_url, "disabled": True}}
    assert mounted_tool_aliases([github, linear, gitlab], servers) == {}
    servers["linear"] = {"url": linear.mcp_url}
    assert mounted_tool_aliases([github, linear, gitlab], servers) == {
        "@github/get_issue": "github_get_issue", "@github/list_issues": "github_list_issues",
        "@linear/get_issue": "linear_get_issue", "@linear/list_issues": "linear_list_issues"}


# -- end to end: the rendered agent file, read by the fake kiro-cli ---------------------------------


@pytest.fixture
def three_issue_trackers(start_mcp_http_server: Callable[..., str]) -> Iterator[dict[str, str]]:
    """GitHub, Linear and GitLab routed to fixture servers that all serve ``list_issues`` and ``get_issue``."""
    mapping: dict[str, str] = {}
    for provider in _providers("github", "linear", "gitlab"):
        parts = urlsplit(provider.mcp_url)
        served = urlsplit(start_mcp_http_server("--names", "list_issues,get_issue,search", "--path", parts.path))
        mapping[f"{parts.scheme}://{parts.netloc}"] = f"{served.scheme}://{served.netloc}"
    activate(OriginOverrides(mapping))
    try:
        yield {p.slug: p.mcp_url for p in routed_registry().all() if p.slug in ("github", "linear", "gitlab")}
    finally:
        activate(OriginOverrides())


def test_github_linear_and_gitlab_mounted_together_list_their_issues_under_their_own_names(
        connections_plugins: Any, three_issue_trackers: dict[str, str], fake_kiro_cli: Any, tmp_path: Any) -> None:
    from kirocrew_mcp.render import rebuild_agent_config

    crew = home.crew_mcp_file()
    crew.parent.mkdir(parents=True, exist_ok=True)
    crew.write_text(json.dumps({"mcpServers": {slug: {"url": url} for slug, url in three_issue_trackers.items()}}))
    rebuild_agent_config(pm=connections_plugins)
    rendered = json.loads(home.rendered_agent_file().read_text())
    assert rendered["toolAliases"] == {f"@{slug}/{tool}": f"{slug}_{tool}" for slug in ("github", "gitlab", "linear")
                                       for tool in ("get_issue", "list_issues")}

    async def tools() -> list[dict[str, Any]]:
        async with start_fake_kiro(fake_kiro_cli.path, "acp", "--agent", "kirocrew", env=dict(os.environ)) as k:
            await k.initialize()
            sid = (await k.new_session(str(tmp_path), []))["sessionId"]
            result = await k.execute(sid, "tools")
            return [row for row in result["data"]["tools"] if row["source"].startswith("mcp:")]

    rows = asyncio.run(tools())
    names = {(row["source"], row["name"]) for row in rows}
    for slug in ("github", "linear", "gitlab"):
        assert (f"mcp:{slug}", f"{slug}_list_issues") in names
        assert (f"mcp:{slug}", f"{slug}_get_issue") in names
    assert not any(row["name"] in ("list_issues", "get_issue") for row in rows)
    assert ("mcp:gitlab", "search") in names  # only GitLab of the three declares search: no collision
