"""``kirocrew connections providers`` through the real CLI in a subprocess."""

from __future__ import annotations

import json
from collections import Counter


def test_providers_lists_visible_and_gated_providers_but_not_hidden_ones(kirocrew):
    result = kirocrew("connections", "providers")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["SLUG", "NAME", "TIER", "CATEGORY", "VISIBILITY", "MCP_URL"]
    slugs = [line.split()[0] for line in lines[1:]]
    assert len(slugs) == 25 and "github" in slugs and "figma" not in slugs
    notion = next(line for line in lines if line.startswith("notion "))
    assert notion.split() == ["notion", "Notion", "1", "collaboration-docs", "visible", "https://mcp.notion.com/mcp"]


def test_providers_json_prints_an_array_of_rows(kirocrew):
    result = kirocrew("connections", "providers", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert Counter(row["visibility"] for row in rows) == {"visible": 6, "gated": 19}
    github = next(row for row in rows if row["slug"] == "github")
    assert github == {"slug": "github", "name": "GitHub", "tier": 2, "category": "developer-tools",
                      "visibility": "gated", "mcp_url": "https://api.githubcopilot.com/mcp/"}


def test_providers_all_includes_the_hidden_vendor_pending_providers(kirocrew):
    result = kirocrew("connections", "providers", "--all", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert len(rows) == 29
    assert sorted(r["slug"] for r in rows if r["visibility"] == "hidden") == ["canva", "dropbox", "figma", "square"]
    assert all(r["tier"] == 3 for r in rows if r["visibility"] == "hidden")


def test_connections_help_lists_its_subcommands_without_importing_them():
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from kirocrew_core.cli import main\n"
        "from kirocrew_connections.cli import SUBCOMMANDS\n"
        "try:\n    main(['connections', '--help'])\nexcept SystemExit:\n    pass\n"
        "modules = {target.partition(':')[0] for target, _help in SUBCOMMANDS.values()}\n"
        "print('LOADED=' + ','.join(sorted(m for m in modules if m in sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "providers  List the connection providers and their state." in done.stdout
    assert done.stdout.strip().endswith("LOADED="), done.stdout[-300:]
