"""Documents of the straggler simulator and the step player (schema notes: ``docs/simulate.md``).

``GET /api/simulate`` is a :class:`SimulationDocument`; ``hpcscope simulate --json`` a
:class:`SimulationCurve`; ``hpcscope simulate --calibrate --json`` a :class:`WhatIfCurve`;
``GET /api/step`` a :class:`StepPlayer`.
"""

from __future__ import annotations

from pydantic import RootModel

from hpcscope.service.contract import Contract, Number
from hpcscope.service.simulate.inputs import ExpertStepRequest, SimulationRequest, StepRequest


class SimulationPoint(Contract):
    """One GPU count of the curve: step time (mean and percentiles), efficiency, barrier wait,
    lost GPU-hours and their cost per day, and the modelled AllReduce."""

    gpus: int
    steps: int
    step_seconds: Number
    step_seconds_p05: Number
    step_seconds_p50: Number
    step_seconds_p95: Number
    step_seconds_p99: Number
    ideal_step_seconds: Number
    compute_seconds: Number
    allreduce_seconds: Number
    optimizer_seconds: Number
    efficiency: Number
    efficiency_p05: Number
    efficiency_p95: Number
    scaling_efficiency: Number
    barrier_wait_seconds: Number
    barrier_wait_ratio: Number
    hiccup_step_ratio: Number
    gpu_hours_per_day: Number
    lost_gpu_hours_per_day: Number
    lost_cost_per_day: Number
    currency: str
    allreduce_algorithm: str
    allreduce_model_seconds: Number
    allreduce_bus_bandwidth_bytes_per_second: Number
    nodes: int
    expert_parallel_ranks: int
    alltoall_seconds: Number
    alltoall_hidden_seconds: Number
    alltoall_exposed_seconds: Number
    pipeline_bubble_seconds: Number
    pipeline_bubble_ratio: Number


class WhatIfPoint(SimulationPoint):
    """A point of a measured job's curve, and the same point with its stragglers fixed."""

    measured_scale: bool
    fixed_step_seconds: Number
    fixed_efficiency: Number
    speedup_if_fixed: Number
    lost_gpu_hours_per_day_to_stragglers: Number


class FabricDocument(Contract):
    """What the AllReduce models assumed of the cluster (per GPU / per NIC, per direction)."""

    gpus_per_node: int
    intra_bytes_per_second: Number
    intra_link: str
    nic_bytes_per_second: Number
    nics_per_node: int


class SimulationDocument(Contract):
    """The simulator page's JSON twin: the request, the fabric, the price and the curve."""

    parameters: SimulationRequest
    fabric: FabricDocument
    gpu_hour_price: Number
    currency: str
    results: list[SimulationPoint]


class SimulationCurve(RootModel[list[SimulationPoint]]):
    """``hpcscope simulate --json``: the curve alone, one point per GPU count."""


class WhatIfCurve(RootModel[list[WhatIfPoint]]):
    """``hpcscope simulate --calibrate --json``: the measured job's curve with the what-if."""


class StepCluster(Contract):
    """The cluster the step player draws: its GPUs and their labels (``node · GPU i``)."""

    name: str
    gpus: int
    gpus_per_node: int
    nodes: list[str]
    labels: list[str]


class StepAllReduce(Contract):
    """The modelled AllReduce of the step (seconds = bandwidth + latency terms)."""

    algorithm: str
    protocol: str
    seconds: Number
    bandwidth_seconds: Number
    latency_seconds: Number
    message_bytes: Number
    bus_bandwidth_bytes_per_second: Number
    ring_steps: int
    seconds_per_ring_step: Number


class RingHopDocument(Contract):
    """The link from ``source`` to the next rank of the ring."""

    source: int
    target: int
    link: str


class StepRing(Contract):
    """The ring: its hops and, per ring step, the chunk transfers (``transfer_columns``)."""

    hops: list[RingHopDocument]
    transfers: list[list[int]]
    transfer_columns: list[str]
    reduce_scatter_steps: int


class LaneSegment(Contract):
    """One phase of one GPU's step, in seconds from the start of the step."""

    phase: str
    start_seconds: Number
    end_seconds: Number


class StepLane(Contract):
    """One GPU of the step: when it reached the barrier, how long it waited, its phases."""

    gpu: int
    node: int
    local_index: int
    arrival_seconds: Number
    wait_seconds: Number
    slowdown_phases: list[str]
    segments: list[LaneSegment]


class StepScenario(Contract):
    """One scenario of the player (``healthy`` or ``straggler``): totals and lanes."""

    step_seconds: Number
    ideal_step_seconds: Number
    barrier_seconds: Number
    allreduce_seconds: Number
    efficiency: Number
    barrier_wait_ratio: Number
    lanes: list[StepLane]


class StepPlayer(Contract):
    """One step of every GPU of the cluster, healthy and with the straggler."""

    parameters: StepRequest
    cluster: StepCluster
    allreduce: StepAllReduce
    ring: StepRing
    healthy: StepScenario
    straggler: StepScenario


class StepAllToAll(Contract):
    """One MoE layer's modelled all-to-all (dispatch and combine) in the expert group."""

    ranks: int
    nodes: int
    layers: int
    message_bytes: Number
    seconds_per_layer: Number
    bandwidth_seconds: Number
    latency_seconds: Number
    intra_seconds: Number
    inter_seconds: Number
    bus_bandwidth_bytes_per_second: Number
    overlapped: bool


class ExpertLaneDocument(StepLane):
    """One GPU of the MoE step: its compute stream (``segments``, the critical path), the
    all-to-all spans of its second stream (``comm_segments``), its expert group, and its
    hidden and exposed all-to-all time."""

    group: int
    comm_segments: list[LaneSegment]
    alltoall_hidden_seconds: Number
    alltoall_exposed_seconds: Number


class ExpertScenario(Contract):
    """One scenario of the expert mode (``healthy`` or ``straggler``): totals and lanes; the
    all-to-all figures are per GPU, averaged over the GPUs."""

    step_seconds: Number
    ideal_step_seconds: Number
    barrier_seconds: Number
    allreduce_seconds: Number
    efficiency: Number
    barrier_wait_ratio: Number
    alltoall_seconds: Number
    alltoall_hidden_seconds: Number
    alltoall_exposed_seconds: Number
    alltoall_hidden_ratio: Number
    lanes: list[ExpertLaneDocument]


class ExpertStepPlayer(Contract):
    """One MoE step of every GPU, with the expert all-to-all on a second stream, healthy and
    with the straggler (``GET /api/step/expert``)."""

    parameters: ExpertStepRequest
    cluster: StepCluster
    alltoall: StepAllToAll
    allreduce: StepAllReduce
    ring: StepRing
    healthy: ExpertScenario
    straggler: ExpertScenario


class CalibrationPhases(Contract):
    """The measured job's phases, seconds per step (peer medians)."""

    data_load: Number
    forward: Number
    backward: Number
    other: Number
    optimizer: Number
    communication: Number


class CalibrationStraggler(Contract):
    """A straggler the calibration found: its GPU, slow phase and slowdown factor."""

    gpu: int
    phase: str
    factor: Number


class CalibrationDocument(Contract):
    """How ``simulate --calibrate`` modelled the measured job (its text output reads this)."""

    measured_gpus: int
    phases_seconds: CalibrationPhases
    stragglers: list[CalibrationStraggler]
    jitter_cv: Number
    jitter_cv_source: str
    allreduce_message_bytes: Number
    modelled_step_seconds: Number
    actual_step_seconds: Number | None
    notes: list[str]
