"""The ``hpcscope nccl analyze --json`` document (schema ``hpcscope.nccl.analyze/1``).

:class:`NcclReport` is the whole document; ``docs/nccl.md`` says what each section means. The
sections are built by :mod:`hpcscope.service.nccl.report` and validated here, so a renamed
field fails the NCCL tests instead of a user's script.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from hpcscope.service.contract import Contract, Number


class LineSample(Contract):
    """An unrecognised line, kept as a sample."""

    line: int
    text: str


class Problem(Contract):
    """A warning or error with its position (``SourceError.to_dict``)."""

    message: str
    source: str | None
    line: int | None
    column: int | None
    field: str | None


class InputProblem(Problem):
    """An input that could not be read; ``bound``: the bound it exceeded (``objects``,
    ``depth``, ``cycle``, ``bytes``, ``ratio``, ``seconds``:
    :class:`~hpcscope.model.bounds.BoundExceeded`), else None."""

    bound: str | None


class DumpWarning(Contract):
    """A warning about a flight-recorder dump."""

    message: str
    source: str


class LogInput(Contract):
    """One text input: line counts, record counts by kind, unknown samples, warnings."""

    path: str
    kind: Literal["log"]
    lines: int
    parsed_lines: int
    blank_lines: int
    unknown_lines: int
    unknown_samples: list[LineSample]
    records: dict[str, int]
    warnings: list[Problem]


class DumpInput(Contract):
    """One flight-recorder dump: rank, versions, sizes, entry states, warnings."""

    path: str
    kind: Literal["flight_recorder"]
    rank: int | None
    version: str | None
    nccl_version: str | None
    process_groups: int
    entries: int
    states: dict[str, int]
    warnings: list[DumpWarning]


class NcclVersion(Contract):
    """An NCCL / CUDA version pair and the processes that printed it."""

    nccl: str
    cuda: str
    processes: list[str]


class NcclProcess(Contract):
    """One process of the job as its NCCL lines describe it."""

    process: str
    host: str
    pid: int
    devices: list[int]
    ranks: list[int]
    bootstrap: str | None
    net: str | None
    net_devices: list[str]
    net_missing: list[str]
    settings: dict[str, str]


class RankTransport(Contract):
    """The network transport a rank's process chose."""

    rank: int
    process: str
    net: str


class InitProgress(Contract):
    """Communicator init at one size: who started, who completed."""

    nranks: int
    ranks_started: list[int]
    ranks_completed: list[int]
    ranks_started_not_completed: list[int]


class InitTimings(Contract):
    """NCCL's own init timings of one rank (2.22+)."""

    rank: int
    nranks: int
    total_seconds: Number
    parts_seconds: dict[str, Number]


class TopoComm(Contract):
    """A communicator's shape as one rank printed it."""

    comm: str
    rank: int
    nranks: int
    nnodes: int
    local_ranks: int
    local_rank: int
    mnnvl: int


class TopoSystem(Contract):
    """The bandwidths NCCL's topology search found."""

    max_bw_bytes_per_second: Number
    total_bw_bytes_per_second: Number
    process: str | None


class Topology(Contract):
    """Communicators and system bandwidths."""

    comms: list[TopoComm]
    system: list[TopoSystem]


class Ring(Contract):
    """One ring channel's rank order."""

    channel: int
    nchannels: int | None
    order: list[int]


class Tree(Contract):
    """One rank's place in a tree channel."""

    channel: int
    rank: int
    parent: int
    children: list[int]


class Connection(Contract):
    """One channel connection between two ranks."""

    channel: int
    src_rank: int
    dst_rank: int
    direction: str | None
    via: str


class Connections(Contract):
    """Connections counted by transport and by path, and the distinct ones."""

    count: int
    by_transport: dict[str, int]
    by_via: dict[str, int]
    items: list[Connection]


class ChannelCounts(Contract):
    """Channels per collective kind."""

    coll: int
    collnet: int | None
    nvls: int | None
    p2p: int
    p2p_per_peer: int


class NcclSection(Contract):
    """What the NCCL INFO lines say: versions, processes, init, topology, channels."""

    versions: list[NcclVersion]
    processes: list[NcclProcess]
    transport_by_rank: list[RankTransport]
    init: list[InitProgress]
    init_timings: list[InitTimings]
    topology: Topology
    rings: list[Ring]
    trees: list[Tree]
    connections: Connections
    channels: list[ChannelCounts]


class LineRef(Contract):
    """A file and a line number."""

    source: str
    line: int


class Finding(Contract):
    """A diagnosis: what it means and what to do, how often, where first."""

    severity: str
    code: str
    title: str
    meaning: str
    action: str
    count: int
    first: LineRef
    where: list[str]


class WatchdogEvent(Contract):
    """One ProcessGroupNCCL watchdog line, every field of the event."""

    kind: str
    source: str
    line: int
    severity: str
    global_rank: int | None
    group_rank: int | None
    pg_id: int | None
    pg_guid: str | None
    pg_desc: str | None
    seq: int | None
    op: str | None
    numel_in: int | None
    numel_out: int | None
    timeout_seconds: Number | None
    ran_seconds: Number | None
    last_enqueued: int | None
    last_completed: int | None
    message: str
    torch_format: str
    stack: list[str]
    queue_depth: int | None


class RankSize(Contract):
    """The size one rank reported for a collective."""

    rank: int
    size: str


class HungCollective(Contract):
    """A collective some ranks entered and others did not (or did not complete)."""

    evidence: str
    pg_name: str | None
    pg_desc: str | None
    pg_ranks: list[int]
    seq: int | None
    op: str | None
    size: str | None
    dtype: str | None
    sizes_by_rank: list[RankSize]
    entered_ranks: list[int]
    missing_ranks: list[int]
    not_completed_ranks: list[int]
    no_data_ranks: list[int]
    primary: bool
    timeout_seconds: Number | None
    time_created_ns: int | None


class Position(Contract):
    """Ranks that stand at the same collective of a process group."""

    seq: int | None
    op: str | None
    ranks: list[int]


class Desync(Contract):
    """A process group whose ranks stand at different collectives."""

    pg: str
    positions: list[Position]


class QueueDepth(Contract):
    """Collectives enqueued but not completed on one rank."""

    rank: int
    pg: str
    last_enqueued: int
    last_completed: int
    depth: int
    evidence: str
    oldest_pending: str | None


class Culprit(Contract):
    """A rank suspected of causing the hang, with the reasons."""

    rank: int
    kind: str
    confidence: str
    reasons: list[str]


class P2pUnmatched(Contract):
    """Sends without receives (or the reverse) between two ranks."""

    pg: str
    src_rank: int
    dst_rank: int
    pending_sends: int
    pending_recvs: int


class HangSection(Contract):
    """The hang verdict and its evidence."""

    verdict: str
    summary: str
    hung: list[HungCollective]
    desyncs: list[Desync]
    queue_depths: list[QueueDepth]
    culprits: list[Culprit]
    p2p_unmatched: list[P2pUnmatched]
    world_size: int | None
    world_size_source: str | None
    ranks_with_dumps: list[int]
    ranks_with_timeouts: list[int]
    notes: list[str]


class NcclTestsDevice(Contract):
    """One GPU of an nccl-tests run."""

    rank: int
    group: int | None
    pid: int
    host: str
    device: int
    bus_id: str
    model: str


class NcclTestsMeasure(Contract):
    """One measurement (out-of-place or in-place) of a row."""

    time_seconds: Number
    algbw_bytes_per_second: Number
    busbw_bytes_per_second: Number
    wrong: str


class NcclTestsRow(Contract):
    """One message size of an nccl-tests run."""

    line: int
    run: int
    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int | None
    out_of_place: NcclTestsMeasure | None
    in_place: NcclTestsMeasure | None


class NcclTestsRun(Contract):
    """One nccl-tests run: header, devices, rows, peak and average bus bandwidth."""

    source: str
    first_line: int
    version: str | None
    collective: str | None
    nthread: int | None
    ngpus: int | None
    min_bytes: int | None
    max_bytes: int | None
    step: str | None
    warmup_iters: int | None
    iters: int | None
    has_root: bool | None
    error_column: str | None
    layout: str | None
    runs: int
    devices: list[NcclTestsDevice]
    rows: list[NcclTestsRow]
    peak_busbw_bytes_per_second: Number | None
    peak_size_bytes: int | None
    avg_busbw_bytes_per_second: Number | None
    out_of_bounds: int | None


class StragglerExtremeEntry(Contract):
    """A Megatron StragglerDetector min or max line."""

    line: int
    source: str
    metric: str
    measures: str
    which: str
    value: Number
    unit: str
    rank: int


class RankFlops(Contract):
    """A rank and its throughput."""

    rank: int
    flops_per_second: Number


class ThroughputRankingEntry(Contract):
    """A Megatron throughput ranking line (top or bottom ranks)."""

    line: int
    source: str
    side: str
    ranks: list[RankFlops]


class Stragglers(Contract):
    """Megatron StragglerDetector extremes and rankings."""

    extremes: list[StragglerExtremeEntry]
    rankings: list[ThroughputRankingEntry]


class NcclReport(Contract):
    """The whole ``hpcscope nccl analyze --json`` document."""

    schema_: str = Field(alias="schema")
    inputs: list[Annotated[LogInput | DumpInput, Field(discriminator="kind")]]
    errors: list[InputProblem]
    nccl: NcclSection
    findings: list[Finding]
    watchdog: list[WatchdogEvent]
    hang: HangSection
    nccl_tests: list[NcclTestsRun]
    stragglers: Stragglers

    # ``schema`` would shadow BaseModel.schema(): the field is ``schema_`` in Python only.
    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, serialize_by_alias=True, validate_by_name=True
    )
