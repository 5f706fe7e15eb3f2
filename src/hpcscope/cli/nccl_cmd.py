"""``hpcscope nccl analyze FILES...``: NCCL logs, PyTorch watchdog lines, flight-recorder dumps.

Prints what NCCL set up (versions, transport per rank, topology, rings and trees), what went
wrong (warnings and errors with their meaning and the first thing to check) and, when ranks
timed out, which collective hung and which ranks it waits for. ``--json`` prints the contract
of ``docs/nccl.md``. Exit 0 when analysed (also when a hang was found), 1 when an input could
not be read (the others are still analysed), 2 on usage errors and when an input exceeded one of
its reader's bounds (a reference cycle, nesting, values, size: ``model/bounds.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

from hpcscope.cli.output import (
    EXIT_OK,
    EXIT_RUNTIME_ERROR,
    EXIT_USAGE_ERROR,
    print_json,
    print_table,
    say_error,
    stdout_console,
)

if TYPE_CHECKING:
    from hpcscope.service.nccl.contracts import (
        DumpInput,
        Finding,
        HangSection,
        LogInput,
        NcclReport,
        NcclSection,
        NcclTestsRun,
        StragglerExtremeEntry,
        Stragglers,
        WatchdogEvent,
    )

_GB = 1e9
_SHOWN = 12


def register(app: typer.Typer) -> None:
    """Add the ``nccl`` command group to the main app."""
    group = typer.Typer(
        help="NCCL logs, PyTorch watchdog lines and flight-recorder dumps.",
        no_args_is_help=True,
    )
    group.command("analyze")(analyze)
    app.add_typer(group, name="nccl")


def analyze(
    files: list[Path] = typer.Argument(
        ...,
        help="Log files (NCCL_DEBUG=INFO, PyTorch, nccl-tests; any launcher prefix), "
        "flight-recorder dumps (pickle or JSON), or directories of them.",
        show_default=False,
    ),
    json_output: bool = typer.Option(False, "--json", help="Print the JSON report."),
    world_size: int | None = typer.Option(
        None,
        "--world-size",
        min=1,
        help="Ranks in the job; names ranks that printed nothing (default: NCCL's nranks).",
    ),
) -> None:
    """Analyse NCCL and PyTorch logs and flight-recorder dumps; localise a hang."""
    from hpcscope.service.nccl.pipeline import report as run

    document = run(files, world_size=world_size)
    report = document.model_dump(mode="json")
    if json_output:
        print_json(document)
    elif document.inputs:
        render(document, stdout_console())
    errors = report["errors"]
    for error in errors:
        where = error["source"]
        if error.get("line") is not None:
            where += f":{error['line']}"
            if error.get("column") is not None:
                where += f":{error['column']}"
        if error.get("field"):
            where += f" ({error['field']})"
        say_error(f"{where}: {error['message']}")
    if any(error.get("bound") for error in errors):
        raise typer.Exit(EXIT_USAGE_ERROR)
    raise typer.Exit(EXIT_RUNTIME_ERROR if errors else EXIT_OK)


def render(report: NcclReport, console: Console) -> None:
    """The human summary, section by section (only sections with content)."""
    _inputs(report.inputs)
    _nccl(report.nccl, console)
    _findings(report.findings, console)
    _watchdog(report.watchdog)
    _tests(report.nccl_tests, console)
    _stragglers(report.stragglers, console)
    _hang(report.hang, console)


def _inputs(inputs: list[LogInput | DumpInput]) -> None:
    rows = []
    for item in inputs:
        if item.kind == "log":
            rows.append([item.path, "log", item.lines, item.parsed_lines, item.unknown_lines])
        else:
            rows.append(
                [
                    item.path,
                    f"flight recorder v{item.version} rank {item.rank}",
                    item.entries,
                    item.entries,
                    0,
                ]
            )
    if rows:
        _table(
            "Inputs",
            ["file", "kind", "lines/entries", "parsed", "unknown"],
            rows,
            numeric=["lines/entries", "parsed", "unknown"],
        )


def _nccl(nccl: NcclSection, console: Console) -> None:
    for v in nccl.versions:
        console.print(f"NCCL {v.nccl} (CUDA {v.cuda})", markup=False, highlight=False)
    procs = [p for p in nccl.processes if p.net or p.bootstrap or p.ranks]
    if procs:
        _table(
            "Processes and network transport",
            ["process", "ranks", "GPUs", "bootstrap", "transport", "NICs", "missing"],
            [
                [
                    p.process,
                    _list(p.ranks),
                    _list(p.devices),
                    p.bootstrap,
                    p.net,
                    " ".join(p.net_devices) or None,
                    " ".join(p.net_missing) or None,
                ]
                for p in procs
            ],
        )
    for init in nccl.init:
        line = (
            f"Init ({init.nranks} ranks): {len(init.ranks_completed)} ranks COMPLETE, "
            f"{len(init.ranks_started)} START seen"
        )
        if init.ranks_started_not_completed:
            line += f"; no COMPLETE line for: {_list(init.ranks_started_not_completed)}"
        console.print(line, markup=False, highlight=False)
    timings = nccl.init_timings
    if timings:
        slowest = max(timings, key=lambda t: t.total_seconds)
        console.print(
            f"Init timings: {len(timings)} ranks, slowest rank {slowest.rank} "
            f"{slowest.total_seconds:.2f} s ({_parts(slowest.parts_seconds)})",
            markup=False,
            highlight=False,
        )
    topo = nccl.topology
    for comm in topo.comms[:1]:
        console.print(
            f"Topology: {comm.nranks} ranks on {comm.nnodes} nodes, "
            f"{comm.local_ranks} per node, MNNVL {comm.mnnvl}",
            markup=False,
            highlight=False,
        )
    for system in topo.system:
        console.print(
            f"Topology search: maxBw {system.max_bw_bytes_per_second / _GB:.1f} GB/s, "
            f"totalBw {system.total_bw_bytes_per_second / _GB:.1f} GB/s",
            markup=False,
            highlight=False,
        )
    rings = nccl.rings
    for ring in rings[:_SHOWN]:
        console.print(
            f"Ring channel {ring.channel}: {' -> '.join(str(r) for r in ring.order)}",
            markup=False,
            highlight=False,
        )
    if len(rings) > _SHOWN:
        _say(console, f"... {len(rings) - _SHOWN} more rings (see --json)")
    trees = nccl.trees
    if trees:
        roots = sorted({(t.channel, t.rank) for t in trees if t.parent < 0})
        console.print(
            f"Trees: {len(trees)} (channel, rank) entries; roots: "
            + (", ".join(f"ch{c}:rank {r}" for c, r in roots) or "none seen"),
            markup=False,
            highlight=False,
        )
    connections = nccl.connections
    if connections.count:
        by_via = ", ".join(f"{k} x{v}" for k, v in sorted(connections.by_via.items()))
        console.print(f"Connections ({connections.count}): {by_via}", markup=False, highlight=False)
    for ch in nccl.channels[:1]:
        console.print(
            f"Channels: {ch.coll} coll, {ch.collnet or 0} collnet, {ch.nvls or 0} "
            f"nvls, {ch.p2p} p2p ({ch.p2p_per_peer} per peer)",
            markup=False,
            highlight=False,
        )


def _findings(findings: list[Finding], console: Console) -> None:
    if not findings:
        return
    console.print("\n[bold]Warnings and errors[/]")
    for f in findings:
        colour = {"error": "red", "warning": "yellow"}.get(f.severity, "cyan")
        count = f" (x{f.count})" if f.count > 1 else ""
        where = f" on {', '.join(f.where[:6])}" if f.where else ""
        console.print(f"[{colour}]{f.severity.upper()}[/] ", end="", highlight=False)
        _say(
            console,
            f"{f.title}{count}{where}\n  means: {f.meaning}\n  do: {f.action}\n"
            f"  first at {f.first.source}:{f.first.line}",
        )


def _watchdog(events: list[WatchdogEvent]) -> None:
    rows = [
        [
            e.global_rank,
            e.group_rank,
            _pg(e),
            e.kind,
            e.op,
            e.seq,
            e.numel_in,
            e.timeout_seconds,
            e.queue_depth,
        ]
        for e in events
        if e.seq is not None
    ]
    if rows:
        _table(
            "PyTorch watchdog ([rankN] global rank, [Rank n] rank in its group)",
            [
                "rank",
                "group rank",
                "group",
                "event",
                "op",
                "SeqNum",
                "numel in",
                "timeout s",
                "queue",
            ],
            rows,
            numeric=["rank", "group rank", "SeqNum", "numel in", "timeout s", "queue"],
        )


def _tests(tests: list[NcclTestsRun], console: Console) -> None:
    for t in tests:
        if not t.rows:
            continue
        peak = t.peak_busbw_bytes_per_second
        assert peak is not None  # a run with rows has a peak
        avg = t.avg_busbw_bytes_per_second
        console.print(
            f"nccl-tests {t.collective or ''} ({t.source}:{t.first_line}): "
            f"{len(t.devices)} ranks listed, {len(t.rows)} sizes in {t.runs} run(s); "
            f"peak bus bandwidth {peak / _GB:.2f} GB/s at {t.peak_size_bytes} B"
            + (f"; average {avg / _GB:.3f} GB/s" if avg is not None else ""),
            markup=False,
            highlight=False,
        )


def _stragglers(items: Stragglers, console: Console) -> None:
    pairs: dict[str, dict[str, StragglerExtremeEntry]] = {}
    for e in items.extremes:
        pairs.setdefault(e.metric, {})[e.which] = e
    for metric, pair in pairs.items():
        low, high = pair.get("min"), pair.get("max")
        if low and high:
            console.print(
                f"Megatron {metric} ({low.measures}, {low.unit}): min {low.value:.4g} "
                f"on rank {low.rank}, max {high.value:.4g} on rank {high.rank}",
                highlight=False,
            )


def _hang(hang: HangSection, console: Console) -> None:
    console.print(f"\n[bold]Hang verdict: {hang.verdict}[/]", highlight=False)
    _say(console, hang.summary)
    hung = hang.hung
    if hung:
        _table(
            "Collectives not completed on every member",
            ["primary", "from", "group", "op", "seq", "size", "dtype", "entered", "missing"],
            [
                [
                    "yes" if h.primary else "",
                    h.evidence,
                    f"{h.pg_name or '-'} {h.pg_desc or ''}".strip(),
                    h.op,
                    h.seq,
                    h.size,
                    h.dtype,
                    _list(h.entered_ranks),
                    _list(h.missing_ranks) or None,
                ]
                for h in hung
            ],
        )
    for c in hang.culprits:
        console.print(
            f"rank {c.rank}: {c.kind} ({c.confidence} confidence)\n  "
            + "\n  ".join(c.reasons[:4])
            + (f"\n  ... {len(c.reasons) - 4} more" if len(c.reasons) > 4 else ""),
            markup=False,
            highlight=False,
        )
    depths = sorted(hang.queue_depths, key=lambda q: -q.depth)[:_SHOWN]
    if depths:
        _table(
            "Queue depth (enqueued - completed)",
            ["rank", "group", "last enqueued", "last completed", "depth", "oldest pending"],
            [
                [
                    q.rank,
                    q.pg,
                    q.last_enqueued,
                    q.last_completed,
                    q.depth,
                    q.oldest_pending,
                ]
                for q in depths
            ],
            numeric=["rank", "last enqueued", "last completed", "depth"],
        )
    for note in hang.notes:
        console.print(f"note: {note}", markup=False, highlight=False)


def _say(console: Console, text: str) -> None:
    """Print data (paths, log text, group names may hold ``[...]``) without Rich markup."""
    console.print(text, markup=False, highlight=False)


def _table(
    title: str, columns: list[str], rows: list[list[Any]], *, numeric: list[str] | None = None
) -> None:
    """A table whose title and cells print as written (``[0]mlx5_0``: tables are plain text)."""
    print_table(title, columns, rows, numeric=numeric or [])


def _pg(event: WatchdogEvent) -> str | None:
    if event.pg_guid is not None:
        return f"GUID {event.pg_guid}" + (f" ({event.pg_desc})" if event.pg_desc else "")
    if event.pg_id is not None:
        return f"PG {event.pg_id}"
    return None


def _parts(parts: dict[str, float] | dict[str, int | float]) -> str:
    return ", ".join(f"{k} {v:.2f} s" for k, v in parts.items())


def _list(values: list[int]) -> str:
    return ",".join(str(v) for v in values)
