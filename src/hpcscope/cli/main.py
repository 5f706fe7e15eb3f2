"""The ``hpcscope`` command: the table of its commands, and the entry point.

A command's module (and what it imports: the web framework, DuckDB, the twin) is imported
only when that command runs, so ``hpcscope --help``, ``version``, ``traces analyze`` and the
HTTP client commands import none of that (``docs/benchmarks.md``: start-up figures). ``--help``
lists every command from :data:`COMMANDS`, a static table of one-line help texts;
``tests/cli/test_main.py`` checks that it matches each module's real help, so the two cannot
drift.

This module imports neither Typer nor Rich: ``hpcscope --help`` is drawn from :data:`COMMANDS`
as the page Typer draws, without importing Typer: by :mod:`hpcscope.cli.plain_help` (text, and
its colours on a terminal), else with Rich by :mod:`hpcscope.cli.quick_help`; an ordinary
``traces analyze`` or ``traces merge`` command line runs without Typer
(:mod:`hpcscope.cli.fast_path`); every other command line goes to the Typer app of
:mod:`hpcscope.cli.group` (``app`` and ``load_command`` here are that module's, loaded on
first use).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from hpcscope.cli.group import app as app
    from hpcscope.cli.group import load_command as load_command


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


#: The first paragraph of ``hpcscope --help``.
HELP = (
    "Observability and security for HPC clusters that train AI models: which job, which "
    "GPU, which phase, and what it costs."
)


def __getattr__(name: str) -> Any:
    # the Typer app loads on first use: `hpcscope --help` needs none of it
    if name in ("app", "load_command"):
        from hpcscope.cli import group

        return getattr(group, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Entry point of the ``hpcscope`` script."""
    if sys.argv[1:] == ["--help"]:
        from hpcscope.cli.plain_help import print_page

        listing = {name: entry.help for name, entry in COMMANDS.items()}
        if not print_page(HELP, listing):  # what only Rich draws the same: with Rich
            from hpcscope.cli.quick_help import print_help

            print_help(HELP, listing)
        return
    if sys.argv[1:] in (["version"], ["version", "--json"]):  # without Typer: ~0.3 s of CPU
        from hpcscope import __version__

        if sys.argv[2:]:
            from hpcscope.cli.output import print_json

            print_json({"version": __version__})
        else:
            print(f"hpcscope {__version__}")
        return
    from hpcscope.cli.fast_path import run

    # `traces analyze` and `traces merge` without Typer, and before logging is configured:
    # they log nothing, and `logging` (with the traceback and json modules it pulls in) was
    # ~10 ms of their start-up (tests/cli/test_main.py fails when they import it)
    code = run(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    from hpcscope.cli.logs import LOG_LEVELS, configure_logging

    level = os.environ.get("HPCSCOPE_LOG_LEVEL", "info")
    configure_logging(level if level.lower() in LOG_LEVELS else "info")
    from hpcscope.cli.group import app

    app()
