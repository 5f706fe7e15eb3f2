"""``hpcscope simulate``: the straggler-effect simulator, from 8 to 16,384 GPUs.

Runs locally (no server, no store: the simulator reads only the topology). ``--json`` prints a
list with one object per GPU count; the schema is in ``docs/simulate.md``. ``--calibrate`` takes
the JSON of ``hpcscope traces analyze --json`` and prints the what-if curve of that job.
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from hpcscope.cli.output import EXIT_USAGE_ERROR, fail, print_json, stdout_console
from hpcscope.model.errors import SourceError
from hpcscope.model.nccl_latency import NcclLatencies, default_nccl_latencies, load_nccl_latencies
from hpcscope.model.topology import Topology, load_topology
from hpcscope.service.settings import bundled_topology
from hpcscope.service.simulate.inputs import (
    SimulationInputError,
    SimulationRequest,
    parse_request,
)
from hpcscope.service.simulate.measured_job import load_measured_job
from hpcscope.service.simulate.simulation import (
    SimulationReport,
    WhatIfReport,
    calibration_json,
    curve_json,
    run_simulation,
    run_what_if,
    what_if_json,
)

#: Request field -> the option a user typed, for error messages.
OPTION_OF = {
    "gpus": "--gpus",
    "steps": "--steps",
    "seed": "--seed",
    "data_load_seconds": "--data-ms",
    "forward_seconds": "--forward-ms",
    "backward_seconds": "--backward-ms",
    "other_seconds": "--other-ms",
    "optimizer_seconds": "--optimizer-ms",
    "compute_seconds": "--data-ms/--forward-ms/--backward-ms",
    "jitter_cv": "--jitter-cv",
    "jitter_distribution": "--jitter-dist",
    "straggler_gpus": "--straggler-gpus",
    "straggler_gpu": "--straggler-gpus",
    "straggler_phase": "--straggler-phase",
    "straggler_factor": "--straggler-factor",
    "hiccup_probability": "--hiccup-prob",
    "hiccup_seconds": "--hiccup-ms",
    "gc_interval_steps": "--gc-interval-steps",
    "gc_pause_seconds": "--gc-pause-ms",
    "model_parameters": "--model-params",
    "precision": "--precision",
    "allreduce_algorithm": "--algorithm",
    "allreduce_protocol": "--protocol",
    "bucket_bytes": "--bucket-mib",
    "pipeline_stages": "--pipeline-stages",
    "microbatches": "--microbatches",
    "virtual_stages": "--virtual-stages",
    "alltoall_bytes": "--alltoall-mib",
    "expert_parallel_ranks": "--expert-ranks",
    "moe_layers": "--moe-layers",
    "buckets": "--bucket-mib",
    "allreduce_seconds": "--allreduce-ms",
    "nic_bytes_per_second": "--nic-rate-gbps",
    "intra_bytes_per_second": "--intra-gbytes-per-s",
    "gpu_hour_price": "--price",
}

_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}


class Algorithm(StrEnum):
    two_level = "two-level"
    two_level_sum = "two-level-sum"
    ring = "ring"


class Protocol(StrEnum):
    simple = "Simple"
    ll128 = "LL128"
    ll = "LL"


class Distribution(StrEnum):
    lognormal = "lognormal"
    normal = "normal"


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)


def _parameters(text: str) -> float:
    """``635M``, ``7B``, ``70e9`` -> a parameter count."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgGtT]?)\s*", text)
    if match is None:
        raise SimulationInputError(
            "model_parameters", f"not a parameter count: {text!r} (write e.g. 635M, 7B, 70e9)"
        )
    return float(match.group(1)) * _SUFFIX[match.group(2).lower()]


def _ms(value: float | None) -> float | None:
    return None if value is None else value / 1e3


def simulate(
    gpus: str = typer.Option(
        "8,16,32,64,128,256,512,1024", "--gpus", "-g", help="GPU counts, comma-separated."
    ),
    steps: int = typer.Option(2000, help="Simulated steps per GPU count."),
    seed: int = typer.Option(0, help="Random seed (same seed, same result)."),
    data_ms: float = typer.Option(2.0, "--data-ms", help="Data load per step, ms."),
    forward_ms: float = typer.Option(10.0, "--forward-ms", help="Forward pass, ms."),
    backward_ms: float = typer.Option(20.0, "--backward-ms", help="Backward pass, ms."),
    other_ms: float = typer.Option(0.0, "--other-ms", help="Other pre-barrier work, ms."),
    optimizer_ms: float = typer.Option(4.0, "--optimizer-ms", help="Optimizer step, ms."),
    jitter_cv: float | None = typer.Option(
        None,
        "--jitter-cv",
        help="Coefficient of variation of a GPU's compute per step, 0-1 (default 0.05; with "
        "--calibrate, estimated from the trace).",
    ),
    jitter_dist: Distribution = typer.Option(Distribution.lognormal, "--jitter-dist"),
    straggler_gpus: str = typer.Option(
        "", "--straggler-gpus", help="Persistently slow GPUs (indices, comma-separated)."
    ),
    straggler_phase: str = typer.Option("backward", "--straggler-phase"),
    straggler_factor: float = typer.Option(
        2.0, "--straggler-factor", help="How many times slower the straggler's phase is."
    ),
    hiccup_prob: float = typer.Option(
        0.001, "--hiccup-prob", help="Probability of a hiccup per GPU and step (0-1)."
    ),
    hiccup_ms: float = typer.Option(20.0, "--hiccup-ms", help="Hiccup duration, ms."),
    gc_interval_steps: int = typer.Option(
        0, "--gc-interval-steps", help="Steps between GC pauses on a GPU (0: none)."
    ),
    gc_pause_ms: float = typer.Option(0.0, "--gc-pause-ms", help="GC pause, ms."),
    gc_sync: bool = typer.Option(
        False, "--gc-sync", help="All GPUs collect garbage in the same step."
    ),
    model_params: str = typer.Option(
        "635M", "--model-params", help="Model parameters (gradient size), e.g. 635M, 7B."
    ),
    precision: str = typer.Option("bf16", help="Gradient precision: fp32, bf16, fp16, fp8."),
    algorithm: Algorithm = typer.Option(Algorithm.two_level, help="AllReduce cost model."),
    protocol: Protocol = typer.Option(Protocol.simple, help="NCCL protocol of the latencies."),
    bucket_mib: float | None = typer.Option(
        None, "--bucket-mib", help="Gradient bucket size, MiB (DDP default 25); one by default."
    ),
    allreduce_ms: float | None = typer.Option(
        None, "--allreduce-ms", help="Fixed AllReduce time, ms, instead of the cost model."
    ),
    nic_rate_gbps: float | None = typer.Option(
        None, "--nic-rate-gbps", help="Per-NIC line rate, Gb/s (default: the topology's HCAs)."
    ),
    intra_gbytes_per_s: float | None = typer.Option(
        None, "--intra-gbytes-per-s", help="Per-GPU intra-node bandwidth, GB/s per direction."
    ),
    price: float | None = typer.Option(
        None, "--price", help="Price of a GPU-hour (default: the topology's pricing)."
    ),
    topology: Path | None = typer.Option(None, "--topology", help="Cluster topology YAML."),
    latency_table: Path | None = typer.Option(
        None, "--latency-table", help="NCCL latency table YAML (default: the bundled one)."
    ),
    calibrate: Path | None = typer.Option(
        None, "--calibrate", help="JSON of `hpcscope traces analyze --json`: what-if curve."
    ),
    json_output: bool = typer.Option(
        False, "--json", help="Print JSON (schema: docs/simulate.md)."
    ),
    pipeline_stages: int = typer.Option(
        1, "--pipeline-stages", help="Pipeline-parallel stages (bubble (p-1)/(v*m+p-1))."
    ),
    microbatches: int = typer.Option(1, "--microbatches", help="Micro-batches per step."),
    virtual_stages: int = typer.Option(
        1, "--virtual-stages", help="Model chunks per stage (Megatron interleaved schedule)."
    ),
    alltoall_mib: float = typer.Option(
        0.0, "--alltoall-mib", help="Expert all-to-all per MoE layer and GPU, MiB (0: none)."
    ),
    expert_ranks: int = typer.Option(1, "--expert-ranks", help="GPUs per expert group."),
    moe_layers: int = typer.Option(1, "--moe-layers", help="MoE layers (one all-to-all each)."),
    alltoall_overlap: bool = typer.Option(
        True,
        "--alltoall-overlap/--no-alltoall-overlap",
        help="Hide the all-to-all under the layer's GEMMs (second stream).",
    ),
) -> None:
    """Simulate how stragglers, jitter and hiccups cost a training job as it scales."""
    try:
        cluster = load_topology(topology or bundled_topology())
        latencies = (
            load_nccl_latencies(latency_table) if latency_table else default_nccl_latencies()
        )
        values: dict[str, object] = {
            "gpus": gpus,
            "steps": steps,
            "seed": seed,
            "data_load_seconds": data_ms / 1e3,
            "forward_seconds": forward_ms / 1e3,
            "backward_seconds": backward_ms / 1e3,
            "other_seconds": other_ms / 1e3,
            "optimizer_seconds": optimizer_ms / 1e3,
            "jitter_cv": 0.05 if jitter_cv is None else jitter_cv,
            "jitter_distribution": jitter_dist.value,
            "straggler_gpus": straggler_gpus,
            "straggler_phase": straggler_phase,
            "straggler_factor": straggler_factor,
            "hiccup_probability": hiccup_prob,
            "hiccup_seconds": hiccup_ms / 1e3,
            "gc_interval_steps": gc_interval_steps,
            "gc_pause_seconds": gc_pause_ms / 1e3,
            "gc_synchronized": gc_sync,
            "model_parameters": _parameters(model_params),
            "precision": precision,
            "allreduce_algorithm": algorithm.value,
            "allreduce_protocol": protocol.value,
            "bucket_bytes": None if bucket_mib is None else bucket_mib * 2**20,
            "allreduce_seconds": _ms(allreduce_ms),
            "nic_bytes_per_second": None if nic_rate_gbps is None else nic_rate_gbps * 1e9 / 8,
            "intra_bytes_per_second": (
                None if intra_gbytes_per_s is None else intra_gbytes_per_s * 1e9
            ),
            "gpu_hour_price": price,
            "pipeline_stages": pipeline_stages,
            "microbatches": microbatches,
            "virtual_stages": virtual_stages,
            "alltoall_bytes": alltoall_mib * 2**20,
            "expert_parallel_ranks": expert_ranks,
            "moe_layers": moe_layers,
            "alltoall_overlap": alltoall_overlap,
        }
        request: SimulationRequest = parse_request(SimulationRequest, values)
        if calibrate is not None:
            job = load_measured_job(calibrate)
            what_if = run_what_if(job, request, cluster, jitter_cv=jitter_cv, latencies=latencies)
            _print_what_if(what_if, json_output)
            return
        report = run_simulation(request, cluster, latencies=latencies)
    except SimulationInputError as exc:
        option = OPTION_OF.get(exc.field.split(".")[0], exc.field)
        fail(f"{option}: {exc.message}", code=EXIT_USAGE_ERROR, as_json=json_output)
    except SourceError as exc:
        fail(exc.describe(), code=EXIT_USAGE_ERROR, as_json=json_output, error=exc)
    _print_report(report, cluster, latencies, json_output)


def _print_report(
    report: SimulationReport, cluster: Topology, latencies: NcclLatencies, as_json: bool
) -> None:
    if as_json:
        print_json(curve_json(report))
        return
    request = report.request
    console = _console()
    console.print(
        f"[bold]{cluster.name}[/]: {report.fabric.gpus_per_node} GPUs per node, "
        f"intra-node {report.fabric.intra_bytes_per_second / 1e9:.1f} GB/s, "
        f"NIC {report.fabric.nic_bytes_per_second / 1e9:.1f} GB/s x "
        f"{report.fabric.nics_per_node} per direction; AllReduce "
        f"{request.allreduce_algorithm} ({latencies.source})",
        highlight=False,
    )
    console.print(
        f"step: data {request.data_load_seconds * 1e3:g} + forward "
        f"{request.forward_seconds * 1e3:g} + backward {request.backward_seconds * 1e3:g} ms, "
        f"optimizer {request.optimizer_seconds * 1e3:g} ms; jitter CV {request.jitter_cv:g} "
        f"({request.jitter_distribution}); hiccups p={request.hiccup_probability:g} x "
        f"{request.hiccup_seconds * 1e3:g} ms; {request.steps:,} steps, seed {request.seed}",
        highlight=False,
    )
    _table(_columns(report.currency), [_row(p, report.currency) for p in report.points])
    if request.alltoall_bytes > 0 or request.pipeline_stages > 1:
        last = report.parallel[-1]
        console.print(
            f"at {report.points[-1].gpus:,} GPUs, per step: expert all-to-all "
            f"{last.alltoall_seconds * 1e3:.2f} ms over {last.expert_parallel_ranks} GPUs "
            f"({last.alltoall_hidden_seconds * 1e3:.2f} hidden, "
            f"{last.alltoall_exposed_seconds * 1e3:.2f} exposed); pipeline bubble "
            f"{last.pipeline_bubble_seconds * 1e3:.2f} ms "
            f"({last.pipeline_bubble_ratio * 100:.1f} % of a pipelined step)",
            highlight=False,
        )


def _console() -> Console:
    """stdout, at least 132 columns wide when piped (a table is useless cut at 80)."""
    console = stdout_console()
    if not console.is_terminal:
        console.width = max(console.width, 132)
    return console


def _table(columns: list[str], rows: list[list[str]]) -> None:
    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False)
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index == 0 else "right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    _console().print(table)


def _columns(currency: str) -> list[str]:
    return [
        "GPUs",
        "step ms",
        "p5-p95 ms",
        "AllReduce ms",
        "efficiency",
        "barrier wait",
        "lost GPU-h/d",
        f"lost {currency}/d",
    ]


def _row(point: Any, currency: str) -> list[str]:
    return [
        f"{point.gpus:,}",
        f"{point.step_seconds * 1e3:.2f}",
        f"{point.step_seconds_p05 * 1e3:.1f}-{point.step_seconds_p95 * 1e3:.1f}",
        f"{point.allreduce_seconds * 1e3:.2f}",
        f"{point.efficiency * 100:.1f} %",
        f"{point.barrier_wait_ratio * 100:.1f} %",
        f"{point.lost_gpu_hours_per_day:,.1f}",
        f"{point.lost_cost_per_day:,.0f}",
    ]


def _print_what_if(report: WhatIfReport, as_json: bool) -> None:
    if as_json:
        print_json(what_if_json(report))
        return
    info = calibration_json(report)
    console = _console()
    phases = info.phases_seconds
    console.print(
        f"[bold]Measured job[/]: {info.measured_gpus} ranks; per step data "
        f"{phases.data_load * 1e3:.2f}, forward {phases.forward * 1e3:.2f}, backward "
        f"{phases.backward * 1e3:.2f}, other {phases.other * 1e3:.2f}, optimizer "
        f"{phases.optimizer * 1e3:.2f}, AllReduce {phases.communication * 1e3:.2f} ms "
        "(peer medians)",
        highlight=False,
    )
    for straggler in info.stragglers:
        console.print(
            f"straggler: GPU {straggler.gpu} {straggler.phase} x{straggler.factor:.2f}",
            highlight=False,
        )
    actual = info.actual_step_seconds
    console.print(
        f"model at the measured scale: {info.modelled_step_seconds * 1e3:.2f} ms per step"
        + (f" (measured {actual * 1e3:.2f} ms)" if actual else ""),
        highlight=False,
    )
    for note in info.notes:
        console.print(f"note: {note}", highlight=False, style="dim")
    rows = []
    for item in what_if_json(report).root:
        rows.append(
            [
                f"{item.gpus:,}" + (" (measured)" if item.measured_scale else ""),
                f"{item.step_seconds * 1e3:.2f}",
                f"{item.efficiency * 100:.1f} %",
                f"{item.fixed_step_seconds * 1e3:.2f}",
                f"{item.speedup_if_fixed:.2f}x",
                f"{item.lost_gpu_hours_per_day_to_stragglers:,.1f}",
            ]
        )
    columns = [
        "GPUs",
        "step (ms)",
        "efficiency",
        "fixed step (ms)",
        "speed-up if fixed",
        "GPU-h/day lost to stragglers",
    ]
    _table(columns, rows)
