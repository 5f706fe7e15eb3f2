"""The straggler simulator wired to a cluster topology: the scaling curve and the what-if.

:func:`run_simulation` takes a checked
:class:`~hpcscope.service.simulate.inputs.SimulationRequest`, models the AllReduce at each
GPU count on the topology's fabric (:mod:`~hpcscope.analysis.simulate.collectives`) and runs the
Monte Carlo over steps (:mod:`~hpcscope.analysis.simulate.stepsim`). :func:`run_what_if` first fits
the step model to a measured job (:mod:`~hpcscope.analysis.simulate.calibration`) and simulates it
as measured and with its stragglers fixed. The ``*_json`` functions shape both for ``hpcscope
simulate --json`` and ``GET /api/simulate``; the shapes are documented in ``docs/simulate.md``.

The simulator does not touch job data: it only reads the topology (and, for the what-if, the
trace report the caller loaded). Request parsing is in
:mod:`~hpcscope.service.simulate.inputs`, the step player in
:mod:`~hpcscope.service.simulate.step_player`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hpcscope.analysis.simulate.calibration import Calibration, MeasuredJob, calibrate
from hpcscope.analysis.simulate.collectives import (
    AllReduceCost,
    CollectiveModelError,
    Fabric,
    gradient_bytes,
    message_bytes_for,
)
from hpcscope.analysis.simulate.scale_point import ScalePoint
from hpcscope.analysis.simulate.stepsim import simulate_scaling
from hpcscope.model.nccl_latency import NcclLatencies, default_nccl_latencies
from hpcscope.model.topology import Topology
from hpcscope.service.simulate.contracts import (
    CalibrationDocument,
    FabricDocument,
    SimulationCurve,
    SimulationDocument,
    SimulationPoint,
    WhatIfCurve,
    WhatIfPoint,
)
from hpcscope.service.simulate.inputs import (
    SimulationInputError,
    SimulationRequest,
    allreduce_costs,
    fabric_for,
    model_input_errors,
)
from hpcscope.service.simulate.parallel_terms import ParallelTerms, parallel_terms


@dataclass(frozen=True, slots=True)
class SimulationReport:
    """What ``simulate`` returns: the points, and what they were computed with."""

    points: tuple[ScalePoint, ...]
    allreduce: tuple[AllReduceCost, ...]
    fabric: Fabric
    currency: str
    gpu_hour_price: float
    request: SimulationRequest
    parallel: tuple[ParallelTerms, ...]


def _price(request: SimulationRequest, topology: Topology) -> float:
    """The request's GPU-hour price, else the site's (the topology's pricing)."""
    price: float = (
        request.gpu_hour_price if request.gpu_hour_price is not None else topology.gpu_hour_price
    )
    return price


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
    costs = allreduce_costs(counts, request, request.allreduce_algorithm, fabric, latencies)
    seconds = {
        n: request.allreduce_seconds if request.allreduce_seconds is not None else c.seconds
        for n, c in costs.items()
    }
    terms = parallel_terms(counts, request, fabric, latencies)
    price = _price(request, topology)
    with model_input_errors():
        points = simulate_scaling(
            request.step_model(),
            counts,
            seconds,
            steps=request.steps,
            seed=request.seed,
            gpu_hour_price=price,
            exposed_seconds={n: t.exposed_seconds for n, t in terms.items()},
        )
    return SimulationReport(
        points=points,
        allreduce=tuple(costs[n] for n in counts),
        fabric=fabric,
        currency=topology.currency,
        gpu_hour_price=price,
        request=request,
        parallel=tuple(terms[n] for n in counts),
    )


def _point_fields(
    point: ScalePoint, cost: AllReduceCost, terms: ParallelTerms, currency: str
) -> dict[str, object]:
    """A point's fields as the point contracts take them (validated there)."""
    return {
        **asdict(point),
        "currency": currency,
        "allreduce_algorithm": cost.algorithm,
        "allreduce_model_seconds": cost.seconds,
        "allreduce_bus_bandwidth_bytes_per_second": cost.bus_bandwidth_bytes_per_second,
        "nodes": cost.nodes,
        "expert_parallel_ranks": terms.expert_parallel_ranks,
        "alltoall_seconds": terms.alltoall_seconds,
        "alltoall_hidden_seconds": terms.alltoall_hidden_seconds,
        "alltoall_exposed_seconds": terms.alltoall_exposed_seconds,
        "pipeline_bubble_seconds": terms.pipeline_bubble_seconds,
        "pipeline_bubble_ratio": terms.pipeline_bubble_ratio,
    }


def point_json(
    point: ScalePoint, cost: AllReduceCost, terms: ParallelTerms, currency: str
) -> SimulationPoint:
    """One element of the ``simulate --json`` list (schema in ``docs/simulate.md``)."""
    return SimulationPoint.model_validate(_point_fields(point, cost, terms, currency))


def curve_json(report: SimulationReport) -> SimulationCurve:
    """The ``simulate --json`` list: one point per GPU count."""
    return SimulationCurve(
        [
            point_json(p, c, t, report.currency)
            for p, c, t in zip(report.points, report.allreduce, report.parallel, strict=True)
        ]
    )


def report_json(report: SimulationReport) -> SimulationDocument:
    """The JSON twin of the simulator page (``GET /api/simulate``)."""
    return SimulationDocument(
        parameters=report.request,
        fabric=FabricDocument.model_validate(asdict(report.fabric)),
        gpu_hour_price=report.gpu_hour_price,
        currency=report.currency,
        results=curve_json(report).root,
    )


# ------------------------------------------------------------------------------------------
# The what-if curve of a measured job


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
    with model_input_errors():
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
    costs = allreduce_costs(
        counts, request, request.allreduce_algorithm, fabric, latencies, message_bytes=size
    )
    seconds = {n: c.seconds for n, c in costs.items()}
    seconds[calibration.gpus] = calibration.communication_seconds
    terms = parallel_terms(counts, request, fabric, latencies)
    price = _price(request, topology)
    with model_input_errors():
        measured, fixed = [
            simulate_scaling(
                model,
                counts,
                seconds,
                steps=request.steps,
                seed=request.seed,
                gpu_hour_price=price,
                exposed_seconds={n: t.exposed_seconds for n, t in terms.items()},
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
        parallel=tuple(terms[n] for n in counts),
    )
    return WhatIfReport(calibration=calibration, measured=report, fixed=fixed, message_bytes=size)


def what_if_json(report: WhatIfReport) -> WhatIfCurve:
    """The ``simulate --calibrate --json`` list: each point plus the what-if fields."""
    out = []
    measured_gpus = report.calibration.gpus
    measured = report.measured
    for point, cost, terms, fixed in zip(
        measured.points, measured.allreduce, measured.parallel, report.fixed, strict=True
    ):
        item = _point_fields(point, cost, terms, measured.currency)
        item["measured_scale"] = point.gpus == measured_gpus
        item["fixed_step_seconds"] = fixed.step_seconds
        item["fixed_efficiency"] = fixed.efficiency
        item["speedup_if_fixed"] = point.step_seconds / fixed.step_seconds
        item["lost_gpu_hours_per_day_to_stragglers"] = (
            point.gpus * 24.0 * (1.0 - fixed.step_seconds / point.step_seconds)
        )
        out.append(WhatIfPoint.model_validate(item))
    return WhatIfCurve(out)


def calibration_json(report: WhatIfReport) -> CalibrationDocument:
    """How the job was modelled, for the ``--json`` envelope and the text output."""
    cal = report.calibration
    model = cal.model
    return CalibrationDocument.model_validate(
        {
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
    )
