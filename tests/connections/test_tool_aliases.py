"""The tool-alias rule: declared tools two mounted providers share are renamed for every claimant."""

from __future__ import annotations

from kirocrew_connections.registry import Provider, load_registry
from kirocrew_connections.tool_aliases import aliases_by_server, connections_tool_aliases, resolve_tool_aliases


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
