"""The root command's cached index of plugin commands: ``kirocrew --help`` imports no plugin while the install holds."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from kirocrew_core import home
from kirocrew_testing.distributions import make_plugin_distribution

# The help names its one-line help from the distribution's own version, so a new version changes
# the listing while the module's file stays exactly as it was.
VERSIONED_PLUGIN = '''
from importlib.metadata import version

from kirocrew_core import hookimpl

@hookimpl
def register_commands(cli):
    cli.add_lazy_command("hello", "kirocrew_hello_commands:hello",
                         "Say hello (version " + version("kirocrew-hello") + ").")
'''

COMMAND_MODULE = '''
import click

@click.command()
@click.argument("name")
def hello(name):
    """Say hello to NAME."""
    click.echo(f"hello {name}")
'''

#: Imported by the listing that loads the plugins; none of them by a listing from a current index.
PLUGIN_MACHINERY = ("kirocrew_core.plugins", "pluggy", "importlib.metadata", "kirocrew_hello",
                    "kirocrew_hello_commands", "kirocrew_mcp", "kirocrew_cron", "kirocrew_conversations",
                    "kirocrew_connections", "kirocrew_computer", "kirocrew_core.config")

HELP_PROBE = (
    "import sys\nfrom kirocrew_core.cli import main\n"
    "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
    f"print('LOADED=' + ','.join(m for m in {PLUGIN_MACHINERY!r} if m in sys.modules))\n"
)


def _env(site, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def _hello_site(root, *, version: str = "1.0.0", source: str = VERSIONED_PLUGIN):
    site = make_plugin_distribution(root, distribution="kirocrew-hello", module="kirocrew_hello",
                                    source=source, version=version)
    (site / "kirocrew_hello_commands.py").write_text(COMMAND_MODULE)
    return site


def _help_probe(env: dict[str, str]) -> tuple[str, str, list[str]]:
    """``kirocrew --help`` in a fresh interpreter: its stdout, stderr, and the plugin modules it imported."""
    done = subprocess.run([sys.executable, "-c", HELP_PROBE], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    help_text, _, loaded = done.stdout.rpartition("LOADED=")
    return help_text, done.stderr, [name for name in loaded.strip().split(",") if name]


def _hello_help(help_text: str) -> str | None:
    found = re.search(r"^  hello\s+(.*)$", help_text, re.M)
    return found.group(1) if found else None


@pytest.fixture
def hello_site(tmp_path):
    return _hello_site(tmp_path / "site")


def test_the_help_lists_plugin_commands_from_the_index_without_importing_a_plugin(kirocrew, hello_site):
    env = _env(hello_site)
    first = kirocrew("--help", env=env)
    assert first.returncode == 0, first.stderr
    assert home.cli_index_file().is_file()

    help_text, _, loaded = _help_probe(env)
    assert loaded == [], f"the help imported {loaded}"
    assert help_text == first.stdout
    assert _hello_help(help_text) == "Say hello (version 1.0.0)."
    # The open edition's commands come from the index too, with their one-line help.
    assert re.search(r"^  cron\s+Scheduled Kiro work", help_text, re.M)
    assert re.search(r"^  mcp\s+Render, list, probe and apply MCP servers\.$", help_text, re.M)
    assert re.search(r"^  policy\s+\S", help_text, re.M)  # a core built-in plugin's command


def test_the_index_is_owner_only_and_lists_each_command_once(kirocrew, hello_site):
    assert kirocrew("--help", env=_env(hello_site)).returncode == 0
    index = home.cli_index_file()
    assert index.stat().st_mode & 0o777 == 0o600
    assert index.parent.stat().st_mode & 0o777 == 0o700
    names = [row[0] for row in json.loads(index.read_text())["commands"]]
    assert "hello" in names and "cron" in names
    assert len(names) == len(set(names))
    assert "doctor" not in names  # core commands are named in the code, never cached


def test_a_plugin_command_and_its_help_still_load_the_real_command(kirocrew, hello_site):
    env = _env(hello_site)
    assert kirocrew("--help", env=env).returncode == 0

    helped = kirocrew("hello", "--help", env=env)
    assert helped.returncode == 0, helped.stderr
    assert "Usage: kirocrew hello [OPTIONS] NAME" in helped.stdout
    assert "Say hello to NAME." in helped.stdout
    ran = kirocrew("hello", "world", env=env)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "hello world\n"
    assert kirocrew("cron", "--help", env=env).stdout.startswith("Usage: kirocrew cron ")


def test_a_new_version_of_a_distribution_rebuilds_the_index(kirocrew, tmp_path):
    site = _hello_site(tmp_path / "site")
    env = _env(site)
    assert _hello_help(kirocrew("--help", env=env).stdout) == "Say hello (version 1.0.0)."
    module_file = site / "kirocrew_hello.py"
    before = module_file.stat().st_mtime_ns

    shutil.rmtree(site / "kirocrew_hello-1.0.0.dist-info")
    _hello_site(site, version="2.0.0")
    os.utime(module_file, ns=(before, before))  # only the distribution changed, not the plugin's source

    help_text, _, loaded = _help_probe(env)
    assert _hello_help(help_text) == "Say hello (version 2.0.0)."
    assert "kirocrew_hello" in loaded  # rebuilt by loading the plugins
    help_text, _, loaded = _help_probe(env)
    assert _hello_help(help_text) == "Say hello (version 2.0.0)."
    assert loaded == []  # and listed from the new index after that


def test_a_distribution_added_or_removed_changes_the_listing(kirocrew, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    env = _env(site)
    assert _hello_help(kirocrew("--help", env=env).stdout) is None

    _hello_site(site)
    assert _hello_help(kirocrew("--help", env=env).stdout) == "Say hello (version 1.0.0)."

    shutil.rmtree(site / "kirocrew_hello-1.0.0.dist-info")
    assert _hello_help(kirocrew("--help", env=env).stdout) is None


def test_an_edited_plugin_module_rebuilds_the_index(kirocrew, hello_site):
    env = _env(hello_site)
    assert _hello_help(kirocrew("--help", env=env).stdout) == "Say hello (version 1.0.0)."
    module_file = hello_site / "kirocrew_hello.py"
    stamp = module_file.stat().st_mtime_ns
    module_file.write_text(VERSIONED_PLUGIN.replace('"Say hello (version "', '"Greet someone (version "'))
    os.utime(module_file, ns=(stamp + 10**9, stamp + 10**9))  # an edit within the same clock tick still counts

    help_text, _, _ = _help_probe(env)
    assert _hello_help(help_text) == "Greet someone (version 1.0.0)."


def test_a_plugin_switch_in_the_environment_is_part_of_the_key(kirocrew, hello_site):
    env = _env(hello_site)
    assert _hello_help(kirocrew("--help", env=env).stdout) == "Say hello (version 1.0.0)."
    disabled = kirocrew("--help", env=_env(hello_site, KIROCREW_DISABLE_PLUGINS="hello"))
    assert _hello_help(disabled.stdout) is None
    assert _hello_help(kirocrew("--help", env=env).stdout) == "Say hello (version 1.0.0)."


@pytest.mark.parametrize("damage", ["garbage", "truncated", "wrong shape", "directory"])
def test_a_corrupt_index_is_ignored_and_rebuilt(kirocrew, hello_site, damage):
    env = _env(hello_site)
    assert kirocrew("--help", env=env).returncode == 0
    index = home.cli_index_file()
    text = index.read_text()
    if damage == "garbage":
        index.write_bytes(b"\xff\xfe not json at all")
    elif damage == "truncated":
        index.write_text(text[: len(text) // 2])
    elif damage == "wrong shape":
        document = json.loads(text)
        document["commands"] = [["hello", 42, "no"]]
        index.write_text(json.dumps(document))
    else:
        index.unlink()
        index.mkdir()

    done = kirocrew("--help", env=env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert _hello_help(done.stdout) == "Say hello (version 1.0.0)."
    if damage != "directory":  # a directory in its place is left alone; the help still lists everything
        assert json.loads(index.read_text())["commands"]
        _, _, loaded = _help_probe(env)
        assert loaded == []


def test_an_index_others_could_have_written_is_never_trusted(kirocrew, hello_site):
    env = _env(hello_site)
    assert kirocrew("--help", env=env).returncode == 0
    index = home.cli_index_file()
    document = json.loads(index.read_text())
    document["commands"].append(["planted", "A command nobody installed.", False])
    index.write_text(json.dumps(document))
    index.chmod(0o666)

    done = kirocrew("--help", env=env)
    assert "planted" not in done.stdout
    assert _hello_help(done.stdout) == "Say hello (version 1.0.0)."
    assert index.stat().st_mode & 0o777 == 0o600
    assert "planted" not in index.read_text()


def test_a_broken_plugin_stays_visible_in_every_help_from_the_index(kirocrew, tmp_path):
    site = make_plugin_distribution(tmp_path / "site", distribution="kirocrew-broken",
                                    module="kirocrew_broken_plugin",
                                    source="raise ImportError('no module named kirocrew_missing_dependency')")
    env = _env(site)
    first = kirocrew("--help", env=env)
    warning = "kirocrew: warning: skipped plugin 'broken' from distribution 'kirocrew-broken'"
    assert warning in first.stderr

    _, stderr, loaded = _help_probe(env)
    assert loaded == []
    assert warning in stderr


def test_a_read_only_crew_home_still_gets_its_help(kirocrew, hello_site, isolated_homes):
    isolated_homes.crew_home.mkdir(parents=True)
    (isolated_homes.crew_home / "state").write_text("a file where the state folder would be\n")
    done = kirocrew("--help", env=_env(hello_site))
    assert done.returncode == 0, done.stderr
    assert _hello_help(done.stdout) == "Say hello (version 1.0.0)."
    assert (isolated_homes.crew_home / "state").read_text() == "a file where the state folder would be\n"


# -- running a plugin command: only the plugin that adds it is imported ---------------------------------

RUN_PROBE = (
    "import sys\nfrom kirocrew_core.cli import main\nargs = sys.argv[1:]\n"
    "try:\n    main(args)\nexcept SystemExit as exc:\n    code = exc.code\n"
    f"print('LOADED=' + ','.join(m for m in {PLUGIN_MACHINERY!r} if m in sys.modules))\n"
    "print('EXIT=' + str(code))\n"
)

#: A plugin whose help does not read its own metadata, so running its command needs no importlib.metadata.
PLAIN_PLUGIN = '''
from kirocrew_core import hookimpl

import kirocrew_hello_dependency

@hookimpl
def register_commands(cli):
    cli.add_lazy_command("hello", "kirocrew_hello_commands:hello", kirocrew_hello_dependency.HELP)
'''


def _run_probe(env: dict[str, str], *args: str) -> tuple[str, str, list[str], str]:
    """``kirocrew *args`` in a fresh interpreter: stdout, stderr, the plugin machinery it imported, exit code."""
    done = subprocess.run([sys.executable, "-c", RUN_PROBE, *args], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    output, _, tail = done.stdout.rpartition("LOADED=")
    loaded, _, code = tail.partition("\nEXIT=")
    return output, done.stderr, [name for name in loaded.strip().split(",") if name], code.strip()


def _plugins(loaded: list[str]) -> list[str]:
    """What ``loaded`` names besides pluggy (the plugin module's ``hookimpl`` marker is pluggy's)."""
    return sorted(set(loaded) - {"pluggy"})


@pytest.fixture
def plain_site(tmp_path):
    site = _hello_site(tmp_path / "site", source=PLAIN_PLUGIN)
    (site / "kirocrew_hello_dependency.py").write_text('HELP = "Say hello."\n')
    return site


def _owner_of(name: str):
    rows = {row[0]: row for row in json.loads(home.cli_index_file().read_text())["commands"]}
    return rows[name][3]


def test_the_index_names_the_implementation_that_added_each_command(kirocrew, plain_site):
    assert kirocrew("--help", env=_env(plain_site)).returncode == 0
    assert _owner_of("hello") == ["hello", "kirocrew_hello", "register_commands"]
    assert _owner_of("cron") == ["cron", "kirocrew_cron.plugin", "register_commands"]
    assert _owner_of("knowledge") == ["kirocrew_core.builtin.knowledge", "kirocrew_core.builtin.knowledge",
                                      "register_commands"]


def test_a_plugin_command_runs_with_only_its_plugin_imported(kirocrew, plain_site):
    env = _env(plain_site)
    assert kirocrew("--help", env=env).returncode == 0

    output, stderr, loaded, code = _run_probe(env, "hello", "world")
    assert (output, code) == ("hello world\n", "0"), stderr
    assert _plugins(loaded) == ["kirocrew_hello", "kirocrew_hello_commands"]
    output, stderr, loaded, code = _run_probe(env, "cron", "--help")
    assert output.startswith("Usage: kirocrew cron ") and code == "0", stderr
    # cron's plugin module declares its config keys, so kirocrew_core.config comes with it; no other plugin does.
    assert _plugins(loaded) == ["kirocrew_core.config", "kirocrew_cron"]
    # The command itself still reaches the full plugin manager when it calls hooks.
    output, stderr, loaded, code = _run_probe(env, "cron", "list")
    assert code == "0", stderr
    assert "kirocrew_cron" in loaded


@pytest.mark.parametrize("change", ["edited plugin source", "new distribution version"])
def test_a_stale_index_falls_back_to_the_full_load_and_is_rebuilt(kirocrew, plain_site, change):
    env = _env(plain_site)
    assert kirocrew("--help", env=env).returncode == 0
    module_file = plain_site / "kirocrew_hello.py"
    stamp = module_file.stat().st_mtime_ns
    if change == "edited plugin source":
        module_file.write_text(PLAIN_PLUGIN.replace("HELP)", 'HELP + " Edited.")'))
        os.utime(module_file, ns=(stamp + 10**9, stamp + 10**9))
        expected = "Say hello. Edited."
    else:
        shutil.rmtree(plain_site / "kirocrew_hello-1.0.0.dist-info")
        _hello_site(plain_site, version="2.0.0", source=PLAIN_PLUGIN)
        os.utime(module_file, ns=(stamp, stamp))
        expected = "Say hello."

    output, stderr, loaded, code = _run_probe(env, "hello", "world")
    assert (output, code) == ("hello world\n", "0"), stderr
    assert "kirocrew_core.plugins" in loaded and "kirocrew_mcp" in loaded  # every plugin, as before
    assert _hello_help(kirocrew("--help", env=env).stdout) == expected  # rebuilt by that run
    _, _, loaded, _ = _run_probe(env, "hello", "world")
    assert _plugins(loaded) == ["kirocrew_hello", "kirocrew_hello_commands"]


def test_a_broken_owning_plugin_falls_back_to_the_full_load_and_its_warning(kirocrew, plain_site):
    env = _env(plain_site)
    assert kirocrew("--help", env=env).returncode == 0
    # Its dependency breaks: neither a distribution nor a plugin module changed, so the index is still current.
    (plain_site / "kirocrew_hello_dependency.py").write_text("raise ImportError('hello is broken')\n")

    _, stderr, loaded, code = _run_probe(env, "hello", "world")
    assert "kirocrew_core.plugins" in loaded
    assert code == "2"
    assert ("kirocrew: warning: skipped plugin 'hello' from distribution 'kirocrew-hello': failed to import: "
            "ImportError: hello is broken") in stderr
    assert "No such command 'hello'" in stderr
    with_index = kirocrew("hello", "world", env=env)
    home.cli_index_file().unlink()
    without_index = kirocrew("hello", "world", env=env)
    assert (with_index.returncode, with_index.stderr) == (without_index.returncode, without_index.stderr)


def test_the_listings_warnings_are_replayed_when_a_command_runs_alone(kirocrew, plain_site, tmp_path):
    broken = make_plugin_distribution(tmp_path / "broken", distribution="kirocrew-broken",
                                      module="kirocrew_broken_plugin", source="raise ImportError('gone')")
    env = _env(plain_site, PYTHONPATH=os.pathsep.join([str(plain_site), str(broken), os.environ.get("PYTHONPATH", "")]))
    warning = "kirocrew: warning: skipped plugin 'broken' from distribution 'kirocrew-broken'"
    assert warning in kirocrew("--help", env=env).stderr

    output, stderr, loaded, _ = _run_probe(env, "hello", "world")
    assert output == "hello world\n"
    assert _plugins(loaded) == ["kirocrew_hello", "kirocrew_hello_commands"]
    assert stderr.count(warning) == 1


def test_an_owner_that_is_not_a_module_level_function_loads_every_plugin(kirocrew, tmp_path):
    site = make_plugin_distribution(tmp_path / "site", distribution="kirocrew-hello", module="kirocrew_hello",
                                    source=PLAIN_PLUGIN.replace("@hookimpl\ndef register_commands(cli):",
                                                                "class Plugin:\n    @hookimpl\n"
                                                                "    def register_commands(self, cli):")
                                    .replace("    cli.add_lazy", "        cli.add_lazy") + "\nplugin = Plugin()\n")
    (site / "kirocrew_hello_commands.py").write_text(COMMAND_MODULE)
    (site / "kirocrew_hello_dependency.py").write_text('HELP = "Say hello."\n')
    entry_points = site / "kirocrew_hello-1.0.0.dist-info" / "entry_points.txt"
    entry_points.write_text(entry_points.read_text().replace("= kirocrew_hello", "= kirocrew_hello:plugin"))
    env = _env(site)
    assert _hello_help(kirocrew("--help", env=env).stdout) == "Say hello."
    assert _owner_of("hello") is None

    output, stderr, loaded, code = _run_probe(env, "hello", "world")
    assert (output, code) == ("hello world\n", "0"), stderr
    assert "kirocrew_core.plugins" in loaded


def test_tracing_the_plugins_loads_every_plugin_to_run_a_command(kirocrew, plain_site):
    env = _env(plain_site)
    assert kirocrew("--help", env=env).returncode == 0
    done = kirocrew("hello", "world", env=_env(plain_site, KIROCREW_TRACE_PLUGINS="1"))
    assert done.stdout == "hello world\n"
    assert "kirocrew trace: register_commands -> hello" in done.stderr


def test_an_unknown_command_still_errors_as_click_does(kirocrew, plain_site):
    env = _env(plain_site)
    assert kirocrew("--help", env=env).returncode == 0
    done = kirocrew("no-such-command", env=env)
    assert done.returncode == 2
    assert "Error: No such command 'no-such-command'." in done.stderr
    _, _, loaded, code = _run_probe(env, "no-such-command")
    assert code == "2"
    assert "kirocrew_core.plugins" in loaded  # as before: an unknown name may be a plugin the index missed


def test_a_command_run_alone_still_reads_a_config_file_with_other_plugins_keys(kirocrew, plain_site):
    env = _env(plain_site)
    assert kirocrew("--help", env=env).returncode == 0
    config = home.config_file()
    config.parent.mkdir(parents=True, exist_ok=True)
    # cron.timezone is declared by kirocrew-cron's plugin module, which `kirocrew crew` does not import.
    config.write_text('[cron]\ntimezone = "Europe/Paris"\n')
    done = kirocrew("crew", "list", env=env)
    assert done.returncode == 0, done.stderr
    assert "No crews." in done.stdout

    config.write_text('[cron]\ntimezone = "Europe/Paris"\nno_such_key = 1\n')
    done = kirocrew("crew", "list", env=env)
    assert done.returncode == 2
    assert "error[config_invalid]" in done.stderr and "unknown key 'cron.no_such_key'" in done.stderr


def test_an_owner_that_no_longer_adds_the_command_loads_every_plugin(kirocrew, tmp_path):
    # Its listing depends on something the index does not track (here an environment variable).
    source = '''
import os

from kirocrew_core import hookimpl

@hookimpl
def register_commands(cli):
    if os.environ.get("KIROCREW_TEST_HELLO"):
        cli.add_lazy_command("hello", "kirocrew_hello_commands:hello", "Say hello.")
'''
    site = _hello_site(tmp_path / "site", source=source)
    assert _hello_help(kirocrew("--help", env=_env(site, KIROCREW_TEST_HELLO="1")).stdout) == "Say hello."
    output, stderr, loaded, code = _run_probe(_env(site, KIROCREW_TEST_HELLO="1"), "hello", "world")
    assert (output, code) == ("hello world\n", "0"), stderr
    assert _plugins(loaded) == ["kirocrew_hello", "kirocrew_hello_commands"]

    _, stderr, loaded, code = _run_probe(_env(site), "hello", "world")
    assert code == "2"
    assert "kirocrew_core.plugins" in loaded
    assert "No such command 'hello'" in stderr
