"""``hpcscope sensor``: run bpftrace with hpcscope's program, write a Tetragon-style export.

Runs Debian's ``bpftrace`` (as root) on ``deploy/bpftrace/hpcscope-sensor.bt`` filled with the
topology's protected roots (checkpoints, weights, datasets; ``--protect`` adds more), and
writes one Tetragon JSON event per line to ``--output`` (default stdout), which ``hpcscope
serve`` tails as ``tetragon.events_path``. ``--print-program`` prints the filled program and
exits. See ``deploy/bpftrace/README.md``.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import typer

from hpcscope.cli.output import error_line

PROTECT_OPTION = typer.Option(
    None, "--protect", help="Another protected path prefix (repeatable; end a directory in /)."
)
OUTPUT_OPTION = typer.Option(
    None, "--output", "-o", help="Append the events to this file (default: stdout)."
)
NODE_OPTION = typer.Option(None, "--node", help="node_name of the events (default: hostname).")
TOPOLOGY_OPTION = typer.Option(
    None, "--topology", help="Topology YAML naming the protected roots (default: the settings')."
)
DURATION_OPTION = typer.Option(
    None, "--duration", help="Stop after this many seconds (default: run until interrupted)."
)
PRINT_OPTION = typer.Option(False, "--print-program", help="Print the filled program and exit.")
BPFTRACE_OPTION = typer.Option("bpftrace", "--bpftrace", help="The bpftrace executable.")
CONFIG_OPTION = typer.Option(
    None, "--config", "-c", help="Settings file (YAML): the topology and rules directory."
)


def register(app: typer.Typer) -> None:
    app.command("sensor")(sensor)


def sensor(
    protect: list[str] | None = PROTECT_OPTION,
    output: Path | None = OUTPUT_OPTION,
    node: str | None = NODE_OPTION,
    topology: Path | None = TOPOLOGY_OPTION,
    duration: float | None = DURATION_OPTION,
    print_program: bool = PRINT_OPTION,
    bpftrace: str = BPFTRACE_OPTION,
    config: Path | None = CONFIG_OPTION,
) -> None:
    """Run the eBPF sensor (bpftrace) and write Tetragon-style JSON events."""
    from hpcscope.model.topology import load_topology
    from hpcscope.service.alerts.rules import load_site_rules
    from hpcscope.service.security.sensor import (
        Sensor,
        bundled_program_path,
        render_program,
    )
    from hpcscope.service.security.sensor_watch import SensorWatch
    from hpcscope.service.security.tetragon_policy import protected_roots
    from hpcscope.service.settings import load_settings

    settings = load_settings(config, topology_path=topology)
    path = settings.resolved_topology_path()
    roots = [*protected_roots(load_topology(path)), *(protect or [])]
    # the site's lists (secrets, sensitive writes, cluster CIDRs, shells) from its rules
    watch = SensorWatch.from_rules(load_site_rules(settings.rules_dir), protected=roots)
    program = render_program(bundled_program_path().read_text(encoding="utf-8"), watch=watch)
    if print_program:
        sys.stdout.write(program)
        return
    out = output.open("a", encoding="utf-8") if output is not None else sys.stdout
    running = Sensor(
        program,
        out,
        node=node or socket.gethostname().split(".")[0],
        bpftrace=bpftrace,
        watch=watch,
        on_error=lambda exc: print(error_line(exc), file=sys.stderr),
    )
    try:
        code = running.run(duration_seconds=duration)
    except KeyboardInterrupt:
        running.stop()
        code = 0
    finally:
        if output is not None:
            out.close()
    stats = running.stats
    print(f"sensor: {stats.events} events written, {stats.lost_events} lost in the kernel, "
          f"{stats.skipped_connects} connects inside the cluster skipped",
          file=sys.stderr)  # fmt: skip
    raise typer.Exit(code)
