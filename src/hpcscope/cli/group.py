"""The ``hpcscope`` Typer app: one group whose sub-commands load when they run.

The group lists :data:`~hpcscope.cli.main.COMMANDS` without importing a command's module;
the module is imported when its command runs (or its own ``--help`` is asked for).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, MutableMapping, Sequence
from typing import Any

import typer
from typer._click.exceptions import ClickException, UsageError
from typer.core import TyperCommand, TyperGroup

from hpcscope.cli.main import COMMANDS, HELP
from hpcscope.cli.output import EXIT_RUNTIME_ERROR, print_json, report_error, say_error
from hpcscope.model.errors import HpcscopeError


def load_command(name: str) -> Any:
    """The real click command ``name``: its module imported and registered on a scratch app."""
    scratch = typer.Typer()
    importlib.import_module(COMMANDS[name].module).register(scratch)
    return typer.main.get_group(scratch).commands[name]


class _Listing(TyperCommand):
    """What ``--help`` shows for a command not loaded yet: its name and one-line help."""


class _LazyCommands(MutableMapping[str, Any]):
    """The group's commands: the static table's, loaded on first access (by name)."""

    def __init__(self, extra: MutableMapping[str, Any]) -> None:
        self._loaded: dict[str, object] = dict(extra)  # click commands

    def listing(self, name: str) -> Any:
        """The loaded command, or a stand-in carrying its help (for ``--help``)."""
        if name in self._loaded:
            return self._loaded[name]
        if name in COMMANDS:
            return _Listing(name=name, help=COMMANDS[name].help, callback=None)
        return None

    def __getitem__(self, name: str) -> Any:
        if name not in self._loaded:
            if name not in COMMANDS:
                raise KeyError(name)
            self._loaded[name] = load_command(name)
        return self._loaded[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        del self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        yield from COMMANDS
        yield from (name for name in self._loaded if name not in COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS) + sum(1 for name in self._loaded if name not in COMMANDS)

    def __contains__(self, name: object) -> bool:
        return name in COMMANDS or name in self._loaded


class _Commands(TyperGroup):
    """The command group: lazy sub-commands, and the one handler for errors no command handled.

    An :class:`HpcscopeError` becomes one line on stderr and exit code 1 (runtime) or 2 (bad
    input), never a traceback; other exceptions are bugs and keep their traceback. A usage error
    of the command line (an unknown option, a missing argument, a bad value) is one line in the
    same style, ``hpcscope: jobs: No such option: --bogus (see 'hpcscope jobs --help')``, exit 2.
    """

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(
                args, prog_name, complete_var, standalone_mode, windows_expand_args, **extra
            )
        argv = list(sys.argv[1:] if args is None else args)
        try:
            code = super().main(argv, prog_name, complete_var, False, windows_expand_args, **extra)
        except ClickException as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # its help is printed: no error line
                sys.exit(exc.exit_code)
            message = usage_message(exc)
            say_error(message)
            if "--json" in argv:
                print_json({"error": message})
            sys.exit(exc.exit_code)
        except typer.Abort:
            say_error("aborted")
            sys.exit(EXIT_RUNTIME_ERROR)
        sys.exit(code if isinstance(code, int) else 0)

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _LazyCommands(self.commands)

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        # help and completion list commands through here: no import for them
        commands = self.commands
        return commands.listing(cmd_name) if isinstance(commands, _LazyCommands) else None

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if name is not None and isinstance(command, _Listing):
            command = self.commands[name]  # the command runs: import its module now
        return name, command, rest

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        # the error is a JSON document on stdout when the command was asked for JSON
        ctx.meta["hpcscope.json"] = "--json" in args
        return super().parse_args(ctx, args)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except HpcscopeError as exc:
            report_error(exc, as_json=bool(ctx.meta.get("hpcscope.json")))


def usage_message(error: ClickException) -> str:
    """One line for a command-line error: the command, Click's message and where help is."""
    message = " ".join(error.format_message().split()).rstrip(".")
    ctx = error.ctx if isinstance(error, UsageError) else None
    if ctx is None:
        return message
    path = ctx.command_path
    command = path.removeprefix(ctx.find_root().info_name or "").strip()
    return f"{command + ': ' if command else ''}{message}; see '{path} --help'"


app = typer.Typer(
    cls=_Commands,
    name="hpcscope",
    help=HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    # a callback makes the app a group although no command is registered on it directly
    pass
