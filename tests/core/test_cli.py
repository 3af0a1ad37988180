"""The ``kirocrew`` root command: lazy, cheap, and robust to broken plugins."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from kirocrew_testing.distributions import make_plugin_distribution

HEAVY_MODULES = ("mcp", "acp", "uvicorn", "starlette", "httpx", "anyio", "pydantic", "jinja2", "playwright",
                 "markdown_it", "asyncio")

COMMAND_PLUGIN = '''
from kirocrew_core import hookimpl

@hookimpl
def register_commands(cli):
    cli.add_lazy_command("hello", "kirocrew_hello_commands:hello", "Say hello from a plugin.")
    cli.add_lazy_command("doctor", "kirocrew_hello_commands:hello", "Tries to shadow a core command.")
'''

COMMAND_MODULE = '''
import click

@click.command()
@click.argument("name")
def hello(name):
    """Say hello."""
    click.echo(f"hello {name}")
'''


def _env_with_path(path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(path), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


@pytest.fixture
def broken_site(tmp_path):
    return make_plugin_distribution(
        tmp_path / "site", distribution="kirocrew-broken", module="kirocrew_broken_plugin",
        source="raise ImportError('no module named kirocrew_missing_dependency')",
    )


@pytest.fixture
def command_site(tmp_path):
    site = make_plugin_distribution(
        tmp_path / "site", distribution="kirocrew-hello", module="kirocrew_hello", source=COMMAND_PLUGIN
    )
    (site / "kirocrew_hello_commands.py").write_text(COMMAND_MODULE)
    return site


def test_help_imports_no_sdk_or_server_library(isolated_homes):
    probe = (
        "import sys\n"
        "from kirocrew_core.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        f"print('LOADED=' + ','.join(m for m in {HEAVY_MODULES!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Commands:" in done.stdout
    assert done.stdout.strip().endswith("LOADED="), done.stdout[-300:]


def test_help_lists_core_commands_with_their_short_help(kirocrew):
    done = kirocrew("--help")
    assert done.returncode == 0
    for name in ("audit", "config", "doctor", "plugins", "serve"):
        assert f"  {name} " in done.stdout


def test_version_option_prints_the_version(kirocrew):
    done = kirocrew("--version")
    assert done.returncode == 0
    assert "0.1.0" in done.stdout


def test_a_broken_plugin_does_not_brick_help_plugins_or_doctor(kirocrew, broken_site):
    env = _env_with_path(broken_site)
    help_run = kirocrew("--help", env=env)
    assert help_run.returncode == 0
    assert "kirocrew: warning: skipped plugin 'broken' from distribution 'kirocrew-broken'" in help_run.stderr

    listing = kirocrew("plugins", env=env)
    assert listing.returncode == 0
    rows = {row["name"]: row for row in json.loads(listing.stdout)}
    assert rows["broken"]["status"] == "skipped"
    assert "kirocrew_missing_dependency" in rows["broken"]["error"]

    doctor = kirocrew("doctor", env=env)
    assert "core.plugins: 1 plugin(s) skipped" in doctor.stdout
    assert "kirocrew-broken" in doctor.stdout


def test_an_empty_load_allowlist_rescues_a_broken_install(kirocrew, broken_site):
    done = kirocrew("plugins", "--all", env=_env_with_path(broken_site, KIROCREW_LOAD_PLUGINS=""))
    assert done.returncode == 0
    assert "warning" not in done.stderr
    rows = json.loads(done.stdout)
    assert {r["status"] for r in rows if not r["builtin"]} == {"not-allowed"}


def test_strict_mode_turns_a_broken_plugin_into_an_error(kirocrew, broken_site):
    done = kirocrew("plugins", env=_env_with_path(broken_site, KIROCREW_STRICT_PLUGINS="1"))
    assert done.returncode == 1
    assert "error[plugin_load_failed]" in done.stderr
    assert "kirocrew-broken" in done.stderr


def test_a_plugin_command_is_listed_without_importing_it_and_runs_when_invoked(kirocrew, command_site):
    env = _env_with_path(command_site)
    probe = (
        "import sys\nfrom kirocrew_core.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('IMPORTED' if 'kirocrew_hello_commands' in sys.modules else 'LAZY')\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    assert re.search(r"^  hello\s+Say hello from a plugin\.$", done.stdout, re.M), done.stdout
    assert done.stdout.strip().endswith("LAZY")

    run = kirocrew("hello", "world", env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "hello world"


def test_a_plugin_cannot_shadow_a_core_command(kirocrew, command_site):
    done = kirocrew("--help", env=_env_with_path(command_site))
    assert "tried to add command 'doctor', already provided by 'kirocrew-core'" in done.stderr
    assert "Tries to shadow" not in done.stdout


def test_an_unknown_command_exits_2_with_a_usage_error(kirocrew):
    done = kirocrew("no-such-command")
    assert done.returncode == 2
    assert "No such command" in done.stderr


def test_doctor_reports_a_missing_kiro_cli_and_exits_1(kirocrew):
    env = dict(os.environ, PATH="/usr/bin:/bin")
    done = kirocrew("doctor", "--json", env=env)
    assert done.returncode == 1
    rows = {row["check"]: row for row in json.loads(done.stdout)}
    assert rows["core.kiro-cli"]["status"] == "fail"
    assert rows["core.homes"]["status"] == "ok"
    assert rows["mcp.scope-files"]["status"] == "ok"


def test_doctor_finds_kiro_cli_through_kiro_cli_path_and_reports_its_version(kirocrew, tmp_path):
    fake = tmp_path / "kiro-cli"
    fake.write_text("#!/bin/sh\necho 'kiro-cli 2.1.0'\n")
    fake.chmod(0o755)
    done = kirocrew("doctor", "--json", env=dict(os.environ, KIRO_CLI_PATH=str(fake)))
    rows = {row["check"]: row for row in json.loads(done.stdout)}
    assert rows["core.kiro-cli"]["status"] == "ok"
    assert rows["core.kiro-cli"]["summary"] == "kiro-cli 2.1.0"


def test_doctor_flags_a_malformed_mcp_scope_file_with_its_line(kirocrew, isolated_homes):
    settings = isolated_homes.kiro_home / "settings"
    settings.mkdir(parents=True)
    (settings / "mcp.json").write_text('{\n  "mcpServers": {,\n}\n')
    done = kirocrew("doctor", "--json")
    rows = {row["check"]: row for row in json.loads(done.stdout)}
    assert rows["mcp.scope-files"]["status"] == "fail"
    assert "mcp.json:2: malformed" in rows["mcp.scope-files"]["detail"]
