"""Every Playwright MCP entry renders as one server under ``playwright-mcp``, keyed by what it launches."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from kirocrew_core import home
from kirocrew_mcp.playwright import CANONICAL_KEY, launch_target
from kirocrew_mcp.render import rebuild_agent_config
from kirocrew_testing.fake_kiro.agents_dirs import parse_spec
from kirocrew_testing.policy import write_policy


def write(path: Path, document: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2))


def agent() -> dict[str, Any]:
    return json.loads(home.rendered_agent_file().read_text())


def started_by_kiro_cli() -> dict[str, Any]:
    """The servers kiro-cli (the fake parses agent files like kiro-cli 2.x) would start, by key."""
    return dict(parse_spec(agent(), path=home.rendered_agent_file(), source="global").mcp_servers)


@pytest.fixture
def node_tools(tmp_path, monkeypatch) -> Path:
    """``npx``, the package's own bin, a symlink into an installed ``@playwright/mcp``, and another server."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("npx", "mcp-server-playwright", "tool-a"):
        exe = folder / name
        exe.write_text("#!/bin/sh\nexit 0\n")
        exe.chmod(0o755)
    cli = tmp_path / "lib" / "node_modules" / "@playwright" / "mcp" / "cli.js"
    cli.parent.mkdir(parents=True)
    cli.write_text("#!/bin/sh\nexit 0\n")
    cli.chmod(0o755)
    (folder / "browser-mcp").symlink_to(cli)
    dot_bin = tmp_path / "lib" / "node_modules" / ".bin"
    dot_bin.mkdir()
    (dot_bin / "pw-server").symlink_to(cli)  # what npm install puts on PATH
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{dot_bin}{os.pathsep}{os.environ.get('PATH', '')}")
    write_policy(rules=[{"decision": "allow", "tool": "*"}])
    return folder


def test_three_playwright_entries_in_three_places_start_one_backend(plugin_manager, node_tools):
    write(home.kiro_global_mcp_file(), {"mcpServers": {
        "playwright": {"command": "npx", "args": ["-y", "@playwright/mcp@latest", "--headless"]},
        "files": {"command": "tool-a"},
    }})
    write(home.crew_mcp_file(), {"mcpServers": {"pw": {"command": "mcp-server-playwright"}}})
    write(home.rendered_agent_file(), {
        "name": "kirocrew", "includeMcpJson": False, "tools": ["*"],
        "allowedTools": ["@browser/browser_snapshot", "@playwright/browser_click"],
        "mcpServers": {"browser": {"command": "browser-mcp", "args": ["--isolated"]}},
    })
    report = rebuild_agent_config()
    started = started_by_kiro_cli()
    assert set(started) == {CANONICAL_KEY, "files"}
    # The hand-added entry is first in the file, so its launch is the one kept.
    assert agent()["mcpServers"][CANONICAL_KEY] == {"command": "browser-mcp", "args": ["--isolated"]}
    assert agent()["allowedTools"] == [f"@{CANONICAL_KEY}/browser_snapshot", f"@{CANONICAL_KEY}/browser_click"]
    assert report.renamed == {"browser": CANONICAL_KEY, "playwright": CANONICAL_KEY, "pw": CANONICAL_KEY}
    assert any("same browser backend" in w for w in report.warnings)
    assert not rebuild_agent_config().written


def test_the_entry_already_under_the_canonical_key_is_the_one_kept(plugin_manager, node_tools):
    write(home.kiro_global_mcp_file(), {"mcpServers": {
        "playwright": {"command": "npx", "args": ["@playwright/mcp"]},
        "npm:@playwright/mcp": {"command": "npx", "args": ["-y", "@playwright/mcp@0.0.40", "--browser", "chromium"]},
    }})
    rebuild_agent_config()
    assert agent()["mcpServers"] == {
        CANONICAL_KEY: {"command": "npx", "args": ["-y", "@playwright/mcp@0.0.40", "--browser", "chromium"]}}


def test_a_playwright_entry_muted_anywhere_mutes_the_one_backend(plugin_manager, node_tools):
    write(home.kiro_global_mcp_file(), {"mcpServers": {"playwright": {"command": "npx", "args": ["@playwright/mcp"]}}})
    write(home.crew_mcp_file(), {"mcpServers": {"pw": {"command": "mcp-server-playwright", "disabled": True}}})
    rebuild_agent_config()
    assert agent()["mcpServers"] == {CANONICAL_KEY: {"command": "npx", "args": ["@playwright/mcp"], "disabled": True}}


def test_a_bin_npm_linked_into_node_modules_dot_bin_is_known_by_the_package_it_links_to(plugin_manager, node_tools):
    write(home.kiro_global_mcp_file(), {"mcpServers": {"pw": {"command": "pw-server"},
                                                       "playwright": {"command": "npx", "args": ["@playwright/mcp"]}}})
    rebuild_agent_config()
    assert agent()["mcpServers"] == {CANONICAL_KEY: {"command": "pw-server"}}


def test_other_packages_run_through_npx_are_left_as_they_are(plugin_manager, node_tools):
    write(home.kiro_global_mcp_file(), {"mcpServers": {
        "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]},
        "playwright": {"command": "npx", "args": ["@playwright/mcp"]},
    }})
    rebuild_agent_config()
    assert set(agent()["mcpServers"]) == {"fs", CANONICAL_KEY}


def test_a_removed_playwright_entry_leaves_and_the_other_takes_over(plugin_manager, node_tools):
    write(home.kiro_global_mcp_file(), {"mcpServers": {"playwright": {"command": "npx", "args": ["@playwright/mcp"]}}})
    write(home.crew_mcp_file(), {"mcpServers": {"pw": {"command": "mcp-server-playwright"}}})
    rebuild_agent_config()
    write(home.kiro_global_mcp_file(), {"mcpServers": {}})
    rebuild_agent_config()
    assert agent()["mcpServers"] == {CANONICAL_KEY: {"command": "mcp-server-playwright"}}


@pytest.mark.parametrize(("entry", "target"), [
    ({"command": "npx", "args": ["-y", "@playwright/mcp@latest"]}, "npm:@playwright/mcp"),
    ({"command": "/usr/bin/npx.cmd", "args": ["--yes", "@playwright/mcp"]}, "npm:@playwright/mcp"),
    ({"command": "npx", "args": ["-p", "@playwright/mcp@1", "mcp-server-playwright"]}, "npm:@playwright/mcp"),
    ({"command": "pnpm", "args": ["dlx", "@playwright/mcp"]}, "npm:@playwright/mcp"),
    ({"command": "bunx", "args": ["@playwright/mcp@next", "--port", "1"]}, "npm:@playwright/mcp"),
    ({"command": "node", "args": ["/srv/app/node_modules/@playwright/mcp/cli.js"]}, "npm:@playwright/mcp"),
    ({"command": "docker", "args": ["run", "-i", "--rm", "mcr.microsoft.com/playwright/mcp:v1"]},
     "docker:mcr.microsoft.com/playwright/mcp"),
    ({"command": "mcp-server-playwright"}, "npm:@playwright/mcp"),
    ({"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]},
     "npm:@modelcontextprotocol/server-memory"),
    ({"command": "uvx", "args": ["mcp-server-fetch"]}, None),
    ({"url": "https://example.com/mcp"}, None),
])
def test_the_launch_target_is_what_an_entry_starts(entry, target):
    assert launch_target(entry) == target
