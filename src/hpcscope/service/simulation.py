"""The straggler simulator and the step player, wired to a cluster topology.

The web API and the CLI both validate their parameters with :class:`SimulationRequest` /
:class:`StepRequest` (pydantic, at the edge), then call the pure models of
``hpcscope.analysis``: :mod:`~hpcscope.analysis.collectives` for the AllReduce time at each GPU
count, :mod:`~hpcscope.analysis.stepsim` for the Monte Carlo over steps,
:mod:`~hpcscope.analysis.step_timeline` for one step GPU by GPU, and
:mod:`~hpcscope.analysis.calibration` for the what-if curve of a measured job.

Neither the simulator nor the player touches job data: they only read the topology.
The JSON shapes built here are documented in ``docs/simulate.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hpcscope.analysis.calibration import Calibration, MeasuredJob, calibrate
from hpcscope.analysis.collectives import (
    PRECISION_BYTES,
    AllReduceAlgorithm,
    AllReduceCost,
    CollectiveModelError,
    Fabric,
    allreduce_cost,
    gradient_bytes,
    message_bytes_for,
)
from hpcscope.analysis.step_timeline import MAX_TIMELINE_GPUS, StepTimeline, step_timeline
from hpcscope.analysis.stepsim import (
    MAX_GPUS,
    STRAGGLER_PHASES,
    ScalePoint,
    SimulationParameterError,
    StepModel,
    Straggler,
    simulate_scaling,
)
from hpcscope.model.nccl_latency import NcclLatencies, Protocol, default_nccl_latencies
from hpcscope.model.topology import Topology

DEFAULT_GPU_COUNTS = (8, 16, 32, 64, 128, 256, 512, 1024)
#: Default model: 635 M parameters, whose bf16 gradient (1.27 GB) takes about 6 ms to
#: AllReduce on 8 H100 over NVLink, the AllReduce of the reference's 42 ms step.
DEFAULT_MODEL_PARAMETERS = 635e6
#: Most GPU-steps one web request may simulate (16,384 GPUs x 1,000 steps fits).
MAX_REQUEST_CELLS = 20_000_000

StragglerPhase = Literal["data_load", "forward", "backward", "other", "optimizer"]
Precision = Literal["fp32", "tf32", "bf16", "fp16", "fp8"]
assert set(STRAGGLER_PHASES) == set(StragglerPhase.__args__)  # type: ignore[attr-defined]
assert set(PRECISION_BYTES) == set(Precision.__args__)  # type: ignore[attr-defined]


class SimulationInputError(ValueError):
    """A bad parameter, named as the API names it (``field``), with a message for a person."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    data_load_seconds: float = Field(default=0.002, ge=0, allow_inf_nan=False)
    forward_seconds: float = Field(default=0.010, ge=0, allow_inf_nan=False)
    backward_seconds: float = Field(default=0.020, ge=0, allow_inf_nan=False)
    other_seconds: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    optimizer_seconds: float = Field(default=0.004, ge=0, allow_inf_nan=False)
    jitter_cv: float = Field(default=0.05, ge=0, le=1, allow_inf_nan=False)
    jitter_distribution: Literal["lognormal", "normal"] = "lognormal"
    straggler_phase: StragglerPhase = "backward"
    straggler_factor: float = Field(default=2.0, ge=1, allow_inf_nan=False)
    model_parameters: float = Field(default=DEFAULT_MODEL_PARAMETERS, gt=0, allow_inf_nan=False)
    precision: Precision = "bf16"
    allreduce_protocol: Protocol = "Simple"
    bucket_bytes: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    nic_bytes_per_second: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    intra_bytes_per_second: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    seed: int = Field(default=0, ge=0, le=2**63 - 1)

    def buckets(self) -> int:
        if self.bucket_bytes is None:
            return 1
        total = gradient_bytes(self.model_parameters, self.precision)
        return max(1, -(-int(total) // int(self.bucket_bytes)))


class SimulationRequest(_Params):
    """Parameters of ``hpcscope simulate`` and ``GET /api/simulate`` (units in the names)."""

    gpus: list[int] = Field(
        default_factory=lambda: list(DEFAULT_GPU_COUNTS), min_length=1, max_length=64
    )
    steps: int = Field(default=2000, ge=1, le=1_000_000)
    straggler_gpus: list[int] = Field(default_factory=list, max_length=1024)
    hiccup_probability: float = Field(default=0.001, ge=0, le=1, allow_inf_nan=False)
    hiccup_seconds: float = Field(default=0.020, ge=0, allow_inf_nan=False)
    gc_interval_steps: int = Field(default=0, ge=0)
    gc_pause_seconds: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    gc_synchronized: bool = False
    allreduce_algorithm: AllReduceAlgorithm = "two-level"
    allreduce_seconds: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    gpu_hour_price: float | None = Field(default=None, ge=0, allow_inf_nan=False)

    @field_validator("gpus", "straggler_gpus", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        """Accept ``"8,64,1024"`` as well as a list (query strings and CLI flags)."""
        if isinstance(value, str):
            value = [value]
        if isinstance(value, list):
            out: list[object] = []
            for item in value:
                if isinstance(item, str):
                    out.extend(part.strip() for part in item.split(",") if part.strip())
                else:
                    out.append(item)
            return out
        return value

    @field_validator("gpus")
    @classmethod
    def _gpu_counts(cls, value: list[int]) -> list[int]:
        for count in value:
            if not 1 <= count <= MAX_GPUS:
                raise ValueError(f"GPU counts must be between 1 and {MAX_GPUS:,} (got {count})")
        return value

    @field_validator("straggler_gpus")
    @classmethod
    def _gpu_indices(cls, value: list[int]) -> list[int]:
        for index in value:
            if index < 0:
                raise ValueError(f"GPU indices start at 0 (got {index})")
        return value

    def step_model(self) -> StepModel:
        return StepModel(
            data_load_seconds=self.data_load_seconds,
            forward_seconds=self.forward_seconds,
            backward_seconds=self.backward_seconds,
            other_seconds=self.other_seconds,
            optimizer_seconds=self.optimizer_seconds,
            jitter_cv=self.jitter_cv,
            jitter_distribution=self.jitter_distribution,
            stragglers=tuple(
                Straggler(gpu, self.straggler_phase, self.straggler_factor)
                for gpu in sorted(set(self.straggler_gpus))
            ),
            hiccup_probability=self.hiccup_probability,
            hiccup_seconds=self.hiccup_seconds,
            gc_interval_steps=self.gc_interval_steps,
            gc_pause_seconds=self.gc_pause_seconds,
            gc_synchronized=self.gc_synchronized,
        )


class StepRequest(_Params):
    """Parameters of the step player (``GET /api/step``): one step of the whole cluster."""

    straggler_gpu: int = Field(default=2, ge=0)
    straggler_factor: float = Field(default=2.0, ge=1, le=20, allow_inf_nan=False)
    jitter_cv: float = Field(default=0.01, ge=0, le=1, allow_inf_nan=False)
    allreduce_algorithm: AllReduceAlgorithm = "ring"


def parse_request(model: type[_Params], values: dict[str, Any]) -> Any:
    """Validate ``values`` into ``model``; the first problem as :class:`SimulationInputError`."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "(request)"
        raise SimulationInputError(field, first["msg"].removeprefix("Value error, ")) from None


@dataclass(frozen=True, slots=True)
class SimulationReport:
    """What ``simulate`` returns: the points, and what they were computed with."""

    points: tuple[ScalePoint, ...]
    allreduce: tuple[AllReduceCost, ...]
    fabric: Fabric
    currency: str
    gpu_hour_price: float
    request: SimulationRequest


def _price(request: SimulationRequest, topology: Topology) -> float:
    """The request's GPU-hour price, else the site's (the topology's pricing)."""
    price: float = (
        request.gpu_hour_price if request.gpu_hour_price is not None else topology.gpu_hour_price
    )
    return price


@contextmanager
def _input_errors() -> Iterator[None]:
    """A parameter the model rejects becomes an input error naming the field (CLI exit 2,
    API 422)."""
    try:
        yield
    except SimulationParameterError as exc:
        raise SimulationInputError(exc.field, exc.message) from None


def fabric_for(topology: Topology, request: _Params) -> Fabric:
    try:
        return Fabric.from_topology(
            topology,
            nic_bytes_per_second=request.nic_bytes_per_second,
            intra_bytes_per_second=request.intra_bytes_per_second,
        )
    except CollectiveModelError as exc:
        raise SimulationInputError(exc.field, exc.message) from None


def _costs(
    counts: list[int],
    request: _Params,
    algorithm: AllReduceAlgorithm,
    fabric: Fabric,
    latencies: NcclLatencies,
    *,
    message_bytes: float | None = None,
) -> dict[int, AllReduceCost]:
    size = (
        message_bytes
        if message_bytes is not None
        else gradient_bytes(request.model_parameters, request.precision)
    )
    try:
        return {
            n: allreduce_cost(
                size,
                n,
                fabric,
                latencies,
                algorithm=algorithm,
                protocol=request.allreduce_protocol,
                buckets=request.buckets(),
            )
            for n in counts
        }
    except CollectiveModelError as exc:
        raise SimulationInputError(exc.field, exc.message) from None


def run_simulation(
    request: SimulationRequest,
    topology: Topology,
    *,
    latencies: NcclLatencies | None = None,
    max_cells: int | None = None,
) -> SimulationReport:
    """Simulate the scaling curve of ``request`` on ``topology``'s fabric.

    Raises:
        SimulationInputError: a parameter the models reject, or more work than ``max_cells``.
    """
    counts = sorted(set(request.gpus))
    if max_cells is not None and counts[-1] * request.steps > max_cells:
        raise SimulationInputError(
            "steps",
            f"{counts[-1]:,} GPUs x {request.steps:,} steps is more than one request may "
            f"simulate ({max_cells:,} GPU-steps); use fewer steps or the CLI",
        )
    latencies = latencies or default_nccl_latencies()
    fabric = fabric_for(topology, request)
    costs = _costs(counts, request, request.allreduce_algorithm, fabric, latencies)
    seconds = {
        n: request.allreduce_seconds if request.allreduce_seconds is not None else c.seconds
        for n, c in costs.items()
    }
    price = _price(request, topology)
    with _input_errors():
        points = simulate_scaling(
            request.step_model(),
            counts,
            seconds,
            steps=request.steps,
            seed=request.seed,
            gpu_hour_price=price,
        )
    return SimulationReport(
        points=points,
        allreduce=tuple(costs[n] for n in counts),
        fabric=fabric,
        currency=topology.currency,
        gpu_hour_price=price,
        request=request,
    )


def point_json(point: ScalePoint, cost: AllReduceCost | None, currency: str) -> dict[str, Any]:
    """One element of the ``simulate --json`` list (schema in ``docs/simulate.md``)."""
    out: dict[str, Any] = asdict(point)
    out["currency"] = currency
    if cost is not None:
        out["allreduce_algorithm"] = cost.algorithm
        out["allreduce_model_seconds"] = cost.seconds
        out["allreduce_bus_bandwidth_bytes_per_second"] = cost.bus_bandwidth_bytes_per_second
        out["nodes"] = cost.nodes
    return out


def report_json(report: SimulationReport) -> dict[str, Any]:
    """The JSON twin of the simulator page (``GET /api/simulate``)."""
    return {
        "parameters": report.request.model_dump(),
        "fabric": asdict(report.fabric),
        "gpu_hour_price": report.gpu_hour_price,
        "currency": report.currency,
        "results": [
            point_json(p, c, report.currency)
            for p, c in zip(report.points, report.allreduce, strict=True)
        ],
    }


# ------------------------------------------------------------------------------------------
# The step player


def step_player(
    request: StepRequest, topology: Topology, *, latencies: NcclLatencies | None = None
) -> dict[str, Any]:
    """One step of the whole cluster, healthy and with the straggler, as the player draws it.

    Both scenarios share the seed, so the only difference between them is the straggler.

    Raises:
        SimulationInputError: a bad parameter (e.g. a straggler GPU the cluster does not have).
    """
    gpus = topology.gpu_count
    if not 1 <= gpus <= MAX_TIMELINE_GPUS:
        raise SimulationInputError(
            "topology", f"the step player lays out 1 to {MAX_TIMELINE_GPUS} GPUs, not {gpus}"
        )
    if request.straggler_gpu >= gpus:
        raise SimulationInputError(
            "straggler_gpu", f"the cluster has GPUs 0 to {gpus - 1} (got {request.straggler_gpu})"
        )
    latencies = latencies or default_nccl_latencies()
    fabric = fabric_for(topology, request)
    cost = _costs([gpus], request, request.allreduce_algorithm, fabric, latencies)[gpus]
    with _input_errors():
        healthy_model = StepModel(
            data_load_seconds=request.data_load_seconds,
            forward_seconds=request.forward_seconds,
            backward_seconds=request.backward_seconds,
            other_seconds=request.other_seconds,
            optimizer_seconds=request.optimizer_seconds,
            jitter_cv=request.jitter_cv,
            jitter_distribution=request.jitter_distribution,
        )
        slow_model = dataclasses.replace(
            healthy_model,
            stragglers=(
                Straggler(request.straggler_gpu, request.straggler_phase, request.straggler_factor),
            ),
        )
        per_node = fabric.gpus_per_node
        timelines = {
            name: step_timeline(
                m, gpus, allreduce_seconds=cost.seconds, gpus_per_node=per_node, seed=request.seed
            )
            for name, m in (("healthy", healthy_model), ("straggler", slow_model))
        }
    labels = [f"{gpu.node} · GPU {gpu.index}" for gpu in topology.gpus]
    ring = timelines["healthy"].ring
    return {
        "parameters": request.model_dump(),
        "cluster": {
            "name": topology.name,
            "gpus": gpus,
            "gpus_per_node": per_node,
            "nodes": [node.name for node in topology.nodes],
            "labels": labels,
        },
        "allreduce": {
            "algorithm": cost.algorithm,
            "protocol": cost.protocol,
            "seconds": cost.seconds,
            "bandwidth_seconds": cost.bandwidth_seconds,
            "latency_seconds": cost.latency_seconds,
            "message_bytes": cost.message_bytes,
            "bus_bandwidth_bytes_per_second": cost.bus_bandwidth_bytes_per_second,
            "ring_steps": ring.steps,
            "seconds_per_ring_step": cost.seconds / ring.steps if ring.steps else 0.0,
        },
        "ring": {
            "hops": [asdict(hop) for hop in ring.hops],
            "transfers": [[t.step, t.source, t.target, t.chunk] for t in ring.transfers],
            "transfer_columns": ["step", "source", "target", "chunk"],
            "reduce_scatter_steps": ring.gpus - 1,
        },
        "healthy": timeline_json(timelines["healthy"]),
        "straggler": timeline_json(timelines["straggler"]),
    }


def timeline_json(timeline: StepTimeline) -> dict[str, Any]:
    return {
        "step_seconds": timeline.step_seconds,
        "ideal_step_seconds": timeline.ideal_step_seconds,
        "barrier_seconds": timeline.barrier_seconds,
        "allreduce_seconds": timeline.allreduce_seconds,
        "efficiency": timeline.efficiency,
        "barrier_wait_ratio": timeline.barrier_wait_ratio,
        "lanes": [
            {
                "gpu": lane.gpu,
                "node": lane.node,
                "local_index": lane.local_index,
                "arrival_seconds": lane.arrival_seconds,
                "wait_seconds": lane.wait_seconds,
                "slowdown_phases": list(lane.slowdown_phases),
                "segments": [
                    {
                        "phase": s.phase,
                        "start_seconds": s.start_seconds,
                        "end_seconds": s.end_seconds,
                    }
                    for s in lane.segments
                ],
            }
            for lane in timeline.lanes
        ],
    }


# ------------------------------------------------------------------------------------------
# Calibration from a measured job


@dataclass(frozen=True, slots=True)
class WhatIfReport:
    """The what-if curve of a measured job: as measured and with its stragglers fixed."""

    calibration: Calibration
    measured: SimulationReport
    fixed: tuple[ScalePoint, ...]
    message_bytes: float


def run_what_if(
    job: MeasuredJob,
    request: SimulationRequest,
    topology: Topology,
    *,
    jitter_cv: float | None,
    latencies: NcclLatencies | None = None,
) -> WhatIfReport:
    """Calibrate on ``job`` and simulate it at ``request.gpus``.

    The AllReduce is anchored on the measured collective time: the gradient size that makes
    the model take that long at the measured rank count is then used at every count. When
    the job has one rank, the request's model size is used instead.

    Raises:
        SimulationInputError: an input the calibration or the models reject.
    """
    latencies = latencies or default_nccl_latencies()
    with _input_errors():
        calibration = calibrate(job, jitter_cv=jitter_cv)
    fabric = fabric_for(topology, request)
    size = gradient_bytes(request.model_parameters, request.precision)
    if calibration.gpus >= 2:
        try:
            size = message_bytes_for(
                calibration.communication_seconds,
                calibration.gpus,
                fabric,
                latencies,
                algorithm=request.allreduce_algorithm,
                protocol=request.allreduce_protocol,
            )
        except CollectiveModelError as exc:
            raise SimulationInputError(exc.field, exc.message) from None
    counts = sorted(set(request.gpus) | {calibration.gpus})
    costs = _costs(
        counts, request, request.allreduce_algorithm, fabric, latencies, message_bytes=size
    )
    seconds = {n: c.seconds for n, c in costs.items()}
    seconds[calibration.gpus] = calibration.communication_seconds
    price = _price(request, topology)
    with _input_errors():
        measured, fixed = [
            simulate_scaling(
                model,
                counts,
                seconds,
                steps=request.steps,
                seed=request.seed,
                gpu_hour_price=price,
            )
            for model in (calibration.model, calibration.fixed_model)
        ]
    report = SimulationReport(
        points=measured,
        allreduce=tuple(costs[n] for n in counts),
        fabric=fabric,
        currency=topology.currency,
        gpu_hour_price=price,
        request=request,
    )
    return WhatIfReport(calibration=calibration, measured=report, fixed=fixed, message_bytes=size)


def what_if_json(report: WhatIfReport) -> list[dict[str, Any]]:
    """The ``simulate --calibrate --json`` list: each point plus the what-if fields."""
    out = []
    measured_gpus = report.calibration.gpus
    for point, cost, fixed in zip(
        report.measured.points, report.measured.allreduce, report.fixed, strict=True
    ):
        item = point_json(point, cost, report.measured.currency)
        item["measured_scale"] = point.gpus == measured_gpus
        item["fixed_step_seconds"] = fixed.step_seconds
        item["fixed_efficiency"] = fixed.efficiency
        item["speedup_if_fixed"] = point.step_seconds / fixed.step_seconds
        item["lost_gpu_hours_per_day_to_stragglers"] = (
            point.gpus * 24.0 * (1.0 - fixed.step_seconds / point.step_seconds)
        )
        out.append(item)
    return out


def calibration_json(report: WhatIfReport) -> dict[str, Any]:
    """How the job was modelled, for the ``--json`` envelope and the text output."""
    cal = report.calibration
    model = cal.model
    return {
        "measured_gpus": cal.gpus,
        "phases_seconds": {
            "data_load": model.data_load_seconds,
            "forward": model.forward_seconds,
            "backward": model.backward_seconds,
            "other": model.other_seconds,
            "optimizer": model.optimizer_seconds,
            "communication": cal.communication_seconds,
        },
        "stragglers": [asdict(s) for s in model.stragglers],
        "jitter_cv": model.jitter_cv,
        "jitter_cv_source": cal.jitter_cv_source,
        "allreduce_message_bytes": report.message_bytes,
        "modelled_step_seconds": cal.modelled_step_seconds,
        "actual_step_seconds": cal.actual_step_seconds,
        "notes": list(cal.notes),
    }
