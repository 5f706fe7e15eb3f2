"""The ``hpcscope`` command: one Typer app whose sub-commands load when they run.

A command's module (and what it imports: the web framework, DuckDB, the twin) is imported
only when that command runs, so ``hpcscope --help``, ``version``, ``traces analyze`` and the
HTTP client commands import none of that (``docs/benchmarks.md``: start-up figures). ``--help``
lists every command from :data:`COMMANDS`, a static table of one-line help texts;
``tests/cli/test_main.py`` checks that it matches each module's real help, so the two cannot
drift.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator, MutableMapping
from typing import Any, NamedTuple

import typer
from typer.core import TyperCommand, TyperGroup

from hpcscope.cli.logs import LOG_LEVELS, configure_logging
from hpcscope.cli.output import report_error
from hpcscope.model.errors import HpcscopeError


class LazyCommand(NamedTuple):
    """Where a top-level command lives, and its one-line help for ``hpcscope --help``."""

    module: str
    help: str


#: Every top-level command, in ``--help`` order: module (with a ``register(app)``) and the first
#: paragraph of its help. Adding a command: a module and one line here.
COMMANDS: dict[str, LazyCommand] = {
    "serve": LazyCommand(
        "hpcscope.cli.serve_cmd",
        "Serve the web UI and API; collect from the configured targets and scheduler.",
    ),
    "demo": LazyCommand(
        "hpcscope.cli.demo_cmd",
        "Run the demo: twin cluster + collection + analysis + web UI on localhost.",
    ),
    "jobs": LazyCommand(
        "hpcscope.cli.jobs_cmd",
        "List your jobs: reported GPU utilization beside real efficiency, GPU-hours, verdict.",
    ),
    "job": LazyCommand(
        "hpcscope.cli.jobs_cmd",
        "One job's report: verdict, reported vs real, GPU-hours and cost, per-GPU detail, alerts.",
    ),
    "alerts": LazyCommand(
        "hpcscope.cli.alerts_cmd", "List the alerts you may see, most severe and most recent first."
    ),
    "slo": LazyCommand(
        "hpcscope.cli.slo_cmd",
        "Show the SLOs: SLI, error budget left, burn rates and firing burn-rate alerts.",
    ),
    "access": LazyCommand(
        "hpcscope.cli.access_cmd",
        "Who opened, read, mapped or wrote a protected path: jobs, users, processes, bytes.",
    ),
    "sensor": LazyCommand(
        "hpcscope.cli.sensor_cmd",
        "Run the eBPF sensor (bpftrace) and write Tetragon-style JSON events.",
    ),
    "simulate": LazyCommand(
        "hpcscope.cli.simulate_cmd",
        "Simulate how stragglers, jitter and hiccups cost a training job as it scales.",
    ),
    "version": LazyCommand("hpcscope.cli.version_cmd", "Print the hpcscope version."),
    "chargeback": LazyCommand(
        "hpcscope.cli.chargeback_cmd",
        "Chargeback and waste: GPU-hours allocated, useful and lost by cause, and cost.",
    ),
    "twin": LazyCommand(
        "hpcscope.cli.twin_cmd",
        "The digital twin: a simulated cluster emitting the real formats.",
    ),
    "nccl": LazyCommand(
        "hpcscope.cli.nccl_cmd", "NCCL logs, PyTorch watchdog lines and flight-recorder dumps."
    ),
    "traces": LazyCommand(
        "hpcscope.cli.traces_cmd", "PyTorch profiler (Kineto) traces: steps, phases, stragglers."
    ),
    "deploy": LazyCommand(
        "hpcscope.cli.deploy_cmd", "Write the guardrails generated from the topology."
    ),
    "store": LazyCommand("hpcscope.cli.store_cmd", "Maintain the store file offline."),
    "token": LazyCommand(
        "hpcscope.cli.token_cmd",
        "Create, list and revoke API tokens for scripts (Authorization: Bearer hps_...).",
    ),
    "notify": LazyCommand(
        "hpcscope.cli.notify_cmd", "Notifications: the audit log (admins) and your own preferences."
    ),
}


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
        self._loaded: dict[str, Any] = dict(extra)

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
    input), never a traceback; other exceptions are bugs and keep their traceback.
    """

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


app = typer.Typer(
    cls=_Commands,
    name="hpcscope",
    help="Observability and security for HPC clusters that train AI models: which job, which "
    "GPU, which phase, and what it costs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    # a callback makes the app a group although no command is registered on it directly
    pass


def main() -> None:
    """Entry point of the ``hpcscope`` script."""
    level = os.environ.get("HPCSCOPE_LOG_LEVEL", "info")
    configure_logging(level if level.lower() in LOG_LEVELS else "info")
    app()
