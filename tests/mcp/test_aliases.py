"""Kiro-safe server keys: kiro-cli splits tool references on ``/``."""

from __future__ import annotations

import copy

import pytest

from kirocrew_mcp.aliases import mcp_server_alias, normalize_server_keys


@pytest.mark.parametrize(
    ("name", "alias"),
    [
        ("fetch", "fetch"),
        ("weird name:@x", "weird name:@x"),  # no slash: untouched
        ("npm:@playwright/mcp", "playwright-mcp"),
        ("@playwright/mcp", "playwright-mcp"),
        ("namespace/name", "namespace-name"),
        ("io.github/some thing!", "io.github-some-thing"),
        ("/", "mcp-server"),
        ("@/@", "mcp-server"),
    ],
)
def test_an_alias_is_the_documented_mapping(name, alias):
    assert mcp_server_alias(name) == alias


@pytest.mark.parametrize("name", ["a/b", "npm:@x/y@1.2", "@@/weird//", "registry.io/ns/name:tag"])
def test_an_alias_is_slash_free_and_stable(name):
    alias = mcp_server_alias(name)
    assert "/" not in alias and alias
    assert mcp_server_alias(alias) == alias


def test_a_slash_key_is_renamed_and_its_refs_rewritten():
    config = {
        "mcpServers": {"@playwright/mcp": {"command": "npx", "args": ["@playwright/mcp"]}},
        "tools": ["read", "@@playwright/mcp"],
        "allowedTools": ["@@playwright/mcp/browser_click"],
        "toolAliases": {"@@playwright/mcp/browser_click": "click"},
    }
    assert normalize_server_keys(config) == {"@playwright/mcp": "playwright-mcp"}
    assert config["mcpServers"] == {"playwright-mcp": {"command": "npx", "args": ["@playwright/mcp"]}}
    assert config["tools"] == ["read", "@playwright-mcp"]
    assert config["allowedTools"] == ["@playwright-mcp/browser_click"]
    assert config["toolAliases"] == {"@playwright-mcp/browser_click": "click"}


def test_normalizing_is_idempotent():
    config = {"mcpServers": {"a/b": {"command": "x"}, "c/d": {"command": "y"}, "a-b": {"command": "z"}},
              "tools": ["@a/b", "@c/d"]}
    normalize_server_keys(config)
    once = copy.deepcopy(config)
    assert normalize_server_keys(config) == {}
    assert config == once


def test_a_slash_free_config_is_untouched():
    config = {"mcpServers": {"x": {"command": "a"}, "x-2": {"command": "a"}}, "tools": ["@x", "@x-2"]}
    before = copy.deepcopy(config)
    assert normalize_server_keys(config) == {}
    assert config == before


def test_a_missing_server_map_is_a_no_op():
    config = {"tools": ["@a/b"]}
    assert normalize_server_keys(config) == {}
    assert config == {"tools": ["@a/b"]}


def test_distinct_specs_colliding_on_one_alias_get_suffixes_and_nothing_is_lost():
    config = {"mcpServers": {"playwright-mcp": {"command": "a"}, "@playwright/mcp": {"command": "b"},
                             "npm:@playwright/mcp": {"command": "c"}},
              "tools": ["@@playwright/mcp", "@npm:@playwright/mcp"]}
    normalize_server_keys(config)
    assert config["mcpServers"] == {"playwright-mcp": {"command": "a"}, "playwright-mcp-2": {"command": "b"},
                                    "playwright-mcp-3": {"command": "c"}}
    assert config["tools"] == ["@playwright-mcp-2", "@playwright-mcp-3"]


def test_equivalent_specs_converge_on_one_key_and_empty_optional_keys_do_not_count():
    config = {"mcpServers": {"playwright-mcp": {"command": "npx", "args": [], "env": {}},
                             "@playwright/mcp": {"command": "npx"}},
              "tools": ["@playwright-mcp", "@@playwright/mcp"]}
    assert normalize_server_keys(config) == {"@playwright/mcp": "playwright-mcp"}
    assert list(config["mcpServers"]) == ["playwright-mcp"]
    assert config["tools"] == ["@playwright-mcp"]


def test_polluted_siblings_from_an_older_build_converge():
    spec = {"command": "npx", "args": ["@playwright/mcp"]}
    config = {"mcpServers": {"playwright-mcp": dict(spec), "playwright-mcp-2": dict(spec),
                             "playwright-mcp-3": {"command": "other"}, "@playwright/mcp": dict(spec)},
              "tools": ["@playwright-mcp-2/click", "@playwright-mcp-3"]}
    normalize_server_keys(config)
    assert config["mcpServers"] == {"playwright-mcp": spec, "playwright-mcp-3": {"command": "other"}}
    assert config["tools"] == ["@playwright-mcp/click", "@playwright-mcp-3"]


def test_a_renamed_key_keeps_its_place_in_the_file():
    config = {"mcpServers": {"first": {"command": "a"}, "x/y": {"command": "b"}, "last": {"command": "c"}}}
    normalize_server_keys(config)
    assert list(config["mcpServers"]) == ["first", "x-y", "last"]


def test_a_reserved_name_is_never_taken_by_an_alias():
    config = {"mcpServers": {"kirocrew-core": {"command": "kirocrew"}, "kirocrew/core": {"command": "kirocrew"}}}
    normalize_server_keys(config, reserved={"kirocrew-core"})
    assert config["mcpServers"] == {"kirocrew-core": {"command": "kirocrew"},
                                    "kirocrew-core-2": {"command": "kirocrew"}}
