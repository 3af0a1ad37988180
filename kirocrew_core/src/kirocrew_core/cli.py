"""The ``kirocrew`` command: a click root whose subcommands load lazily.

``kirocrew --help`` must stay cheap (no SDK imports), so core commands and plugin
command groups are named here with their import path and short help, and the
module is imported only when the command actually runs (kedro's ``LazyGroup``).
:class:`LazyGroup` is public: a plugin's own command group loads its subcommands the same way.
The root lists the plugins' commands from a cached index (:mod:`kirocrew_core.command_index`),
so the help imports no plugin at all while the install is unchanged, and running a plugin's
command imports only the plugin module that adds it.
"""

from __future__ import annotations

import inspect
import sys
import warnings
from collections.abc import Mapping
from importlib import import_module
from typing import Any

import click

from kirocrew_core import __version__, command_index
from kirocrew_core.command_index import CommandIndex, CommandOwner, IndexedCommand
from kirocrew_core.errors import KirocrewError

# name -> (import path "module:attribute", short help)
CORE_COMMANDS: dict[str, tuple[str, str]] = {
    "audit": ("kirocrew_core.commands.audit:audit", "Read and verify the security event log."),
    "config": ("kirocrew_core.commands.config:config", "Get, set and list config.toml keys."),
    "dashboard": ("kirocrew_core.commands.host:dashboard", "Print (or open) the running host's dashboard sign-in URL."),
    "doctor": ("kirocrew_core.commands.doctor:doctor", "Check that kirocrew can run here."),
    "host": ("kirocrew_core.commands.host:host", "See or stop the long-lived host of this crew home."),
    "plugin": ("kirocrew_core.commands.plugin:plugin", "Make a new plugin distribution (plugin new NAME)."),
    "plugins": ("kirocrew_core.commands.plugins:plugins", "List installed plugins as JSON."),
    "serve": ("kirocrew_core.gateway.serve:serve", "Run the host: gateway, dashboard and MCP servers."),
}


def import_command(target: str) -> click.Command:
    """The click command at ``target`` (``"module:attribute"``), importing its module now."""
    module_name, _, attribute = target.partition(":")
    command = getattr(import_module(module_name), attribute)
    if not isinstance(command, click.Command):
        raise TypeError(f"{target} is not a click command")
    return command


class LazyGroup(click.Group):
    """A click group whose subcommands are named by import path and short help, imported only when run.

    ``lazy_commands`` maps a name to ``("module:attribute", short help)``; ``--help`` lists them from
    that map alone, so listing a group never imports what its commands need.
    """

    def __init__(self, *args: Any, lazy_commands: Mapping[str, tuple[str, str]] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lazy: dict[str, tuple[str, str]] = dict(lazy_commands or {})

    def add_lazy_command(self, name: str, target: str, short_help: str = "") -> None:
        """Add ``name`` whose command is ``target`` (``"module:attr"``), imported only when run."""
        self._lazy[name] = (target, short_help)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(self._lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        if cmd_name in self._lazy:
            return import_command(self._lazy[cmd_name][0])
        return None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            if name in self.commands:
                cmd = self.commands[name]
                if cmd.hidden:
                    continue
                rows.append((name, cmd.get_short_help_str(formatter.width)))
            else:
                rows.append((name, self._lazy[name][1]))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class KirocrewCLI(LazyGroup):
    """The root group plugins receive in ``register_commands(cli)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, lazy_commands=CORE_COMMANDS, **kwargs)
        self._owners: dict[str, str] = {name: "kirocrew-core" for name in CORE_COMMANDS}
        self._plugins_loaded = False
        self._registering = "kirocrew-core"
        # The plugin commands as the index lists them, once read; None until then or when not used.
        self._indexed: dict[str, IndexedCommand] | None = None
        self._index_warnings: tuple[str, ...] = ()
        self._index_warned = False

    # -- what plugins call -------------------------------------------------

    def add_lazy_command(self, name: str, target: str, short_help: str = "") -> None:
        """Add ``name`` whose command is ``target`` (``"module:attr"``), imported only when run."""
        if self._claim(name):
            super().add_lazy_command(name, target, short_help)

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        """Add an already-imported command (imports its module up front; prefer lazy)."""
        name = name or cmd.name
        if name and self._claim(name):
            super().add_command(cmd, name)

    def _claim(self, name: str) -> bool:
        owner = self._owners.get(name)
        if owner is not None and owner != self._registering:
            warnings.warn(
                f"plugin {self._registering!r} tried to add command {name!r}, "
                f"already provided by {owner!r}; ignored",
                stacklevel=3,
            )
            return False
        self._owners[name] = self._registering
        return True

    # -- loading the plugins' commands ---------------------------------------

    def _load_plugin_commands(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        self._indexed = None
        from kirocrew_core.plugins import call_hook, get_plugin_manager

        # before_each credits each command to the plugin adding it, so a name clash names the culprit.
        try:
            call_hook(get_plugin_manager(), "register_commands", before_each=self._start_registering, cli=self)
        finally:
            self._registering = "kirocrew-core"

    def _start_registering(self, plugin: str) -> None:
        self._registering = plugin

    def _indexed_commands(self) -> dict[str, IndexedCommand] | None:
        """The plugin commands from a current index, else ``None`` (the plugins are then loaded, and indexed).

        An index replays the warnings its listing printed (a broken plugin stays visible in every help).
        """
        indexed = self._read_index()
        if indexed is not None:
            self._replay_index_warnings()
        return indexed

    def _read_index(self) -> dict[str, IndexedCommand] | None:
        """:meth:`_indexed_commands` without the warnings: loads and re-indexes the plugins if it is stale."""
        if self._indexed is not None or self._plugins_loaded or not command_index.usable():
            return self._indexed
        expected = command_index.signature()
        found = command_index.read(expected)
        if found is None:
            self._load_and_index(expected)
            return None
        self._use_index(found)
        return self._indexed

    def _use_index(self, found: CommandIndex) -> None:
        self._indexed = {command.name: command for command in found.commands}
        self._index_warnings = found.warnings

    def _replay_index_warnings(self) -> None:
        if not self._index_warned:
            self._index_warned = True
            for text in self._index_warnings:
                warnings.warn(text, stacklevel=3)

    def _load_owner(self, name: str) -> bool:
        """Add plugin command ``name`` by calling only the implementation the index names; whether that worked.

        The listing's warnings are replayed, so the run shows what a full load would (a broken plugin stays
        visible). Anything doubtful (no current index, no importable owner, an import or a call that fails,
        a call that does not add ``name``) undoes what the call added and returns ``False``: the caller then
        loads every plugin as before, which reports any failure as it always did.
        """
        indexed = self._read_index()
        owner = indexed[name].owner if indexed is not None and name in indexed else None
        if owner is None:
            return False
        before = (dict(self._lazy), dict(self.commands), dict(self._owners))
        added = False
        with warnings.catch_warnings(record=True) as caught:
            try:
                self._call_owner(owner)
                added = name in self._lazy or name in self.commands
            except KeyboardInterrupt:
                raise
            except BaseException:  # noqa: BLE001 - a plugin may raise anything; the full load reports it
                added = False
            finally:
                self._registering = "kirocrew-core"
        if not added:
            self._lazy, self.commands, self._owners = before
            return False
        self._replay_index_warnings()
        for shown in caught:
            if str(shown.message) not in self._index_warnings:
                warnings.showwarning(shown.message, shown.category, shown.filename, shown.lineno)
        return True

    def _call_owner(self, owner: CommandOwner) -> None:
        """Import ``owner``'s module and call its ``register_commands`` with this root, crediting its plugin."""
        function = getattr(import_module(owner.module), owner.function)
        if not callable(function):
            raise TypeError(f"{owner.module}:{owner.function} is not callable")
        self._start_registering(owner.plugin)
        function(self)

    def _load_and_index(self, expected: dict[str, Any]) -> None:
        """Load the plugins' commands as before, show what loading warned, and write the index of the result."""
        caught: list[warnings.WarningMessage] = []
        try:
            with warnings.catch_warnings(record=True) as caught:
                self._load_plugin_commands()
        finally:
            for shown in caught:
                warnings.showwarning(shown.message, shown.category, shown.filename, shown.lineno)
        from kirocrew_core.plugins import get_plugin_manager, ordered_hookimpls

        # The listing depends on each plugin's module (its entry point, imported or not: a broken one
        # may be fixed in place) and on the module of each register_commands implementation.
        manager = get_plugin_manager()
        impls = ordered_hookimpls(manager, "register_commands")
        modules = [record.entry_point.partition(":")[0] for record in manager.records.values()]
        modules += [impl.function.__module__ for impl in impls]
        owners = {impl.plugin_name: owner for impl in impls
                  if (owner := _module_level_owner(impl.plugin_name, impl.function)) is not None}
        command_index.write(expected, self._plugin_rows(owners), [str(shown.message) for shown in caught], modules)

    def _plugin_rows(self, owners: Mapping[str, CommandOwner]) -> list[IndexedCommand]:
        """Every command a plugin added, as the root's help lists it (eager ones as at 80 columns), with its owner."""
        rows = [IndexedCommand(name, short_help, False, owners.get(self._owners[name]))
                for name, (_, short_help) in self._lazy.items() if name not in CORE_COMMANDS]
        rows += [IndexedCommand(name, command.get_short_help_str(78), command.hidden, owners.get(self._owners[name]))
                 for name, command in self.commands.items() if name not in CORE_COMMANDS]
        return rows

    # -- click ------------------------------------------------------------

    def list_commands(self, ctx: click.Context) -> list[str]:
        indexed = self._indexed_commands()
        if indexed is not None:
            return sorted(set(self.commands) | set(self._lazy) | set(indexed))
        self._load_plugin_commands()
        return super().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name not in self._lazy and not self._load_owner(cmd_name):
            self._load_plugin_commands()
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        indexed = self._indexed_commands()
        if indexed is None:
            super().format_commands(ctx, formatter)
            return
        rows = [(name, short_help) for name, (_, short_help) in self._lazy.items()]
        rows += [(name, command.get_short_help_str(formatter.width)) for name, command in self.commands.items()
                 if not command.hidden]
        rows += [(name, command.short_help) for name, command in indexed.items() if not command.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(sorted(rows))


def _module_level_owner(plugin: str, function: Any) -> CommandOwner | None:
    """``function`` as an owner the root can import alone: a plain function its module names, else ``None``."""
    module_name = getattr(function, "__module__", None)
    name = getattr(function, "__name__", None)
    if not (inspect.isfunction(function) and module_name and name and function.__qualname__ == name):
        return None
    if getattr(sys.modules.get(module_name), name, None) is not function:
        return None
    return CommandOwner(plugin, module_name, name)


@click.group(
    cls=KirocrewCLI,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, "-V", "--version", prog_name="kirocrew")
def cli() -> None:
    """kirocrew: the plugin-driven control plane for Kiro agents.

    Plugins add their own command groups; `kirocrew plugins` lists what is
    installed. If a broken plugin gets in the way, KIROCREW_LOAD_PLUGINS= (empty)
    runs with core only, and KIROCREW_DISABLE_PLUGINS=name blocks one plugin.
    """


def _show_warning(message: Any, category: type[Warning], *_args: Any, **_kwargs: Any) -> None:
    print(f"kirocrew: warning: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: readable warnings, and ``KirocrewError`` as ``error[code]``."""
    warnings.showwarning = _show_warning
    try:
        result = cli.main(args=argv, prog_name="kirocrew", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        print("Aborted!", file=sys.stderr)
        sys.exit(1)
    except KirocrewError as exc:
        print(f"kirocrew: error[{exc.code}]: {exc.message}", file=sys.stderr)
        sys.exit(exc.exit_code)
    # click returns the exit code of ``ctx.exit(n)`` when not in standalone mode.
    sys.exit(result if isinstance(result, int) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()
