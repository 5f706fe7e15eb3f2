"""One rank's trace reduced to what the cross-rank phase attribution needs.

Runs inside the per-rank worker (pure: events in, small arrays out), so only interval sets and
the collective instances cross the process boundary, never the events.

What is recognised, from the standard PyTorch markers (user annotations are used when present,
never required):

* steps: ``ProfilerStep#N`` ranges on the training-loop thread;
* data load: ``enumerate(DataLoader)#...__next__`` and annotations such as ``## data_load ##``;
* backward: the span of ``autograd::engine::evaluate_function: ...`` operators (any thread: on
  GPUs the autograd engine runs on its own thread); ``backward`` annotations when the step has
  no autograd operator;
* optimizer: ``Optimizer.step#...`` and ``Optimizer.zero_grad#...``, optimizer annotations;
* forward: ``forward`` annotations (``DistributedDataParallel.forward``, ``## forward ##``)
  when present, otherwise the span of the loop thread's other operators before backward
  starts (model call and loss);
* collectives: NCCL kernels of any generation (``ncclKernel_*``, ``ncclDevKernel_*``) on GPU
  streams, and ``gloo:*`` ranges (the gloo worker thread that runs the collective);
* GPU compute: every other kernel, memcpy and memset, attributed to the phase of the CPU
  instant that launched it (runtime event with the same correlation id).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hpcscope.analysis.traces.arrays import codes_present, distinct, member_of
from hpcscope.analysis.traces.comm_timeline import CommTimeline, comm_timeline, launch_points
from hpcscope.analysis.traces.gpu_breakdown import GpuBreakdown, gpu_breakdown
from hpcscope.analysis.traces.intervals import Intervals, clip, covers, hull, intersect, merge
from hpcscope.analysis.traces.kernel_classes import ClassTable
from hpcscope.model.trace_events import EventKind, EventTable, RankTrace

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

#: The seven phases of a step, in report order.
PHASES = (
    "data_load",
    "forward",
    "backward",
    "communication",
    "optimizer",
    "barrier_wait",
    "other",
)
#: CPU regions in priority order (where two overlap, the first wins).
REGION_PHASES = ("data_load", "optimizer", "backward", "forward")

STEP_RE = re.compile(r"^ProfilerStep\s*#\s*(\d+)$")
DATALOADER_RE = re.compile(r"DataLoader.*__next__|^enumerate\(DataLoader\)")
DATA_ANNOTATION_RE = re.compile(
    r"data[ _-]?load|dataloader|load[ _-]?batch|get[ _-]?batch|next[ _-]?batch|"
    r"copy[ _-]?batch|batch[ _-]?to[ _-]?(?:gpu|device)|input[ _-]?pipeline",
    re.IGNORECASE,
)
FORWARD_ANNOTATION_RE = re.compile(r"(?:^|[^a-z])forward(?:$|[^a-z])", re.IGNORECASE)
BACKWARD_OP_RE = re.compile(r"^autograd::engine::evaluate_function")
BACKWARD_ANNOTATION_RE = re.compile(r"(?:^|[^a-z])backward(?:$|[^a-z])", re.IGNORECASE)
OPTIMIZER_RE = re.compile(r"^Optimizer\.(?:step|zero_grad)#")
OPTIMIZER_ANNOTATION_RE = re.compile(r"optimi[sz]er|zero_grad|optim\.step", re.IGNORECASE)
#: Collectives that run on a CPU thread (their range is the collective itself).
CPU_COLLECTIVE_RE = re.compile(r"^(?:gloo|mpi|ucc):([A-Za-z_]+)")
#: Communication bookkeeping on the loop thread (enqueue, not the transfer).
COMM_OP_RE = re.compile(r"^(?:c10d::|record_param_comms|nccl:|gloo:|mpi:|ucc:|c10d_)")
NCCL_KERNEL_RE = re.compile(r"^nccl(?:Dev)?Kernel_?([A-Za-z]+)?")


@dataclass(frozen=True, slots=True)
class RankTimeline:
    """What one rank contributes to the cross-rank attribution.

    Attributes:
        steps: profiler step numbers, in time order.
        step_start_us / step_end_us: each step's window on the loop thread.
        regions: CPU phase regions (merged intervals), by phase name.
        gpu_compute: GPU compute intervals (merged), by the phase that launched them.
        cpu_busy: time CPU operators were executing (not communication), split by region
            phase (``other`` outside every region); it outranks a collective in flight.
        collective_*: one entry per collective instance: step index (into ``steps``, -1 when
            outside every step), key (index into ``collective_keys``: type and process group),
            ordinal of that key within the step, start and end.
        has_gpu: the trace has GPU kernels (GPU activity outranks CPU regions).
        markers: which markers were found (for the report: annotations used or not).
        gc_seconds: per step, Python garbage collection (``Python GC`` events; zeros when the
            profiler did not record them).
        launch_gap_seconds: per step, GPU idle time the CPU caused: idle gaps that end with a
            kernel launched after the gap began (zeros on CPU-only traces).
        gpu_index: CUDA device index of the rank's kernels (see :class:`RankTrace`).
        epoch_offset_us: add to the trace's times to get Unix time in µs (Kineto's
            ``baseTimeNanoseconds``, or 0 when the times are already Unix µs); None when the
            trace does not say.
        comm: the events by communication class (:mod:`~hpcscope.analysis.traces.
            comm_timeline`); None when no class table was given.
    """

    rank: int
    source: str
    world_size: int | None
    backend: str | None
    has_gpu: bool
    steps: tuple[int, ...]
    step_start_us: F64
    step_end_us: F64
    regions: dict[str, Intervals]
    gpu_compute: dict[str, Intervals]
    cpu_busy: dict[str, Intervals]
    collective_step: I64
    collective_key: I64
    collective_ordinal: I64
    collective_start_us: F64
    collective_end_us: F64
    collective_keys: tuple[str, ...]
    gpu: GpuBreakdown | None
    problems: tuple[str, ...] = ()
    markers: tuple[str, ...] = ()
    events: int = 0
    bytes_read: int = 0
    device: str | None = None
    host: str | None = None
    gc_seconds: F64 = field(default_factory=lambda: np.zeros(0))
    launch_gap_seconds: F64 = field(default_factory=lambda: np.zeros(0))
    gpu_index: int | None = None
    epoch_offset_us: float | None = None
    comm: CommTimeline | None = None


#: The patterns tested against the names of CPU events (operators and annotations).
CPU_NAME_PATTERNS = (
    STEP_RE,
    DATALOADER_RE,
    DATA_ANNOTATION_RE,
    FORWARD_ANNOTATION_RE,
    BACKWARD_OP_RE,
    BACKWARD_ANNOTATION_RE,
    OPTIMIZER_RE,
    OPTIMIZER_ANNOTATION_RE,
    CPU_COLLECTIVE_RE,
    COMM_OP_RE,
)


@functools.lru_cache(maxsize=1 << 16)
def _cpu_name_bits(name: str) -> int:
    """Which of :data:`CPU_NAME_PATTERNS` match ``name``, as bits. Cached: every rank of a
    run uses the same few hundred operator names, tested once per process, not per rank."""
    bits = 0
    for i, pattern in enumerate(CPU_NAME_PATTERNS):
        if pattern.search(name) is not None:
            bits |= 1 << i
    return bits


@functools.lru_cache(maxsize=1 << 16)
def _is_nccl_kernel(name: str) -> bool:
    return NCCL_KERNEL_RE.search(name) is not None


class _NameFlags:
    """Per name id, which CPU patterns match; only ``candidates`` are tested (the names CPU
    events use: a GPU trace has thousands of kernel names no CPU pattern is about)."""

    def __init__(self, names: tuple[str, ...], candidates: npt.NDArray[np.int64]) -> None:
        self.bits = np.zeros(len(names), dtype=np.int64)
        if candidates.shape[0]:
            self.bits[candidates] = [_cpu_name_bits(names[i]) for i in candidates.tolist()]

    def __call__(self, pattern: re.Pattern[str]) -> npt.NDArray[np.bool_]:
        bit = 1 << CPU_NAME_PATTERNS.index(pattern)
        flags: npt.NDArray[np.bool_] = (self.bits & bit) != 0
        return flags


def _nccl_kernel_flags(
    names: tuple[str, ...], candidates: npt.NDArray[np.int64]
) -> npt.NDArray[np.bool_]:
    flags = np.zeros(len(names), dtype=bool)
    if candidates.shape[0]:
        flags[candidates] = [_is_nccl_kernel(names[i]) for i in candidates.tolist()]
    return flags


def _collective_key(name: str) -> str:
    match = NCCL_KERNEL_RE.match(name)
    if match:
        kind = match.group(1) or "Unknown"
        # ncclKernel_AllReduce_RING_LL_Sum_float / ncclDevKernel_AllReduce_Sum_f32_RING_LL
        return kind
    match = CPU_COLLECTIVE_RE.match(name)
    if match:
        return match.group(1).strip("_").replace("_", "").lower()
    return name


def _main_thread(events: EventTable, is_step: npt.NDArray[np.bool_]) -> int | None:
    rows = is_step[events.name] & (events.kind == EventKind.ANNOTATION)
    if not rows.any():
        rows = is_step[events.name]
    if not rows.any():
        return None
    threads, counts = np.unique(events.thread[rows], return_counts=True)
    return int(threads[np.argmax(counts)])


def rank_timeline(trace: RankTrace, classes: ClassTable | None = None) -> RankTimeline:
    """Reduce one rank's events to steps, phase regions and collective instances (and, with
    a class table, to communication classes)."""
    ev = trace.events
    names = ev.names
    kind = ev.kind
    cpu = (kind == EventKind.CPU_OP) | (kind == EventKind.ANNOTATION)
    gpu = (kind == EventKind.KERNEL) | (kind == EventKind.MEMCPY) | (kind == EventKind.MEMSET)
    end = ev.ts_us + ev.dur_us
    problems = list(trace.problems)
    markers: list[str] = []
    flags = _NameFlags(names, codes_present(ev.name[cpu], len(names)))

    is_step = flags(STEP_RE)
    main = _main_thread(ev, is_step)
    step_rows = np.flatnonzero(cpu & is_step[ev.name] & (ev.thread == main))
    if step_rows.shape[0]:
        order = step_rows[np.argsort(ev.ts_us[step_rows], kind="stable")]
        steps = tuple(int(STEP_RE.match(names[ev.name[i]]).group(1)) for i in order)  # type: ignore[union-attr]
        step_start = ev.ts_us[order].copy()
        step_end = end[order].copy()
    elif not cpu.any():
        problems.append("no CPU event at all: nothing to analyse")
        steps, step_start, step_end = (), np.zeros(0), np.zeros(0)
    else:
        problems.append("no ProfilerStep#N markers: the whole trace is analysed as one step")
        span = np.flatnonzero(cpu)
        lo, hi = float(ev.ts_us[span].min()), float(end[span].max())
        steps, step_start, step_end = (0,), np.array([lo]), np.array([hi])
        main = main if main is not None else _busiest_thread(ev, cpu)

    # ---- CPU phase regions
    annotation = kind == EventKind.ANNOTATION
    data_rows = cpu & flags(DATALOADER_RE)[ev.name]
    data_ann = annotation & flags(DATA_ANNOTATION_RE)[ev.name]
    if data_ann.any():
        markers.append("data annotations")
    if data_rows.any():
        markers.append("DataLoader")
    bwd_ops = cpu & flags(BACKWARD_OP_RE)[ev.name]
    bwd_ann = annotation & flags(BACKWARD_ANNOTATION_RE)[ev.name]
    opt_rows = cpu & flags(OPTIMIZER_RE)[ev.name]
    opt_ann = annotation & flags(OPTIMIZER_ANNOTATION_RE)[ev.name]
    fwd_ann = annotation & flags(FORWARD_ANNOTATION_RE)[ev.name]
    comm_op = flags(COMM_OP_RE)[ev.name]
    for flag, label in ((fwd_ann, "forward annotations"), (bwd_ann, "backward annotations")):
        if flag.any():
            markers.append(label)
    if bwd_ops.any():
        markers.append("autograd")
    if opt_rows.any():
        markers.append("Optimizer.step")

    data = merge(
        np.concatenate([ev.ts_us[data_rows | data_ann]]),
        np.concatenate([end[data_rows | data_ann]]),
    )
    optimizer = merge(ev.ts_us[opt_rows | opt_ann], end[opt_rows | opt_ann])
    loop_ops = np.flatnonzero(
        (kind == EventKind.CPU_OP) & (ev.thread == main) & ~comm_op & ~bwd_ops & ~opt_rows
    )
    loop_ops = loop_ops[~covers(data, ev.ts_us[loop_ops]) & ~covers(optimizer, ev.ts_us[loop_ops])]
    bwd_parts: list[Intervals] = []
    fwd_parts: list[Intervals] = []
    for lo, hi in zip(step_start, step_end, strict=True):
        in_step = (ev.ts_us >= lo) & (ev.ts_us < hi)
        ops = bwd_ops & in_step
        backward = hull(ev.ts_us[ops], end[ops])
        if not len(backward):
            ann = bwd_ann & in_step
            backward = merge(ev.ts_us[ann], np.minimum(end[ann], hi))
        bwd_parts.append(backward)
        ann = fwd_ann & in_step
        if ann.any():
            fwd_parts.append(merge(ev.ts_us[ann], np.minimum(end[ann], hi)))
            continue
        limit = float(backward.start[0]) if len(backward) else hi
        rows = loop_ops[(ev.ts_us[loop_ops] >= lo) & (ev.ts_us[loop_ops] < limit)]
        fwd_parts.append(hull(ev.ts_us[rows], np.minimum(end[rows], limit)))
    regions = {
        "data_load": data,
        "optimizer": optimizer,
        "backward": _concat(bwd_parts),
        "forward": _concat(fwd_parts),
    }

    # ---- CPU operators executing (what hides a collective on a CPU-only run)
    cpu_coll = cpu & flags(CPU_COLLECTIVE_RE)[ev.name]
    coll_threads = distinct(ev.thread[cpu_coll])
    busy_rows = (kind == EventKind.CPU_OP) & ~comm_op & ~member_of(ev.thread, coll_threads)
    busy = merge(ev.ts_us[busy_rows], end[busy_rows])
    cpu_busy: dict[str, Intervals] = {}
    claimed = Intervals.empty()
    for name in ("data_load", "optimizer", "backward", "forward"):
        part = intersect(busy, regions[name])
        cpu_busy[name] = _minus(part, claimed)
        claimed = _concat([claimed, regions[name]])
    cpu_busy["other"] = _minus(busy, claimed)

    # ---- GPU compute, by the phase of its launch
    has_gpu = bool(gpu.any())
    kernel_names = _nccl_kernel_flags(names, codes_present(ev.name[gpu], len(names)))
    nccl = gpu & (kind == EventKind.KERNEL) & kernel_names[ev.name]
    compute = gpu & ~nccl
    launch_at = launch_points(ev)  # shared with the class reduction below: one search
    launch = launch_at[0]
    gpu_compute: dict[str, Intervals] = {}
    if has_gpu:
        rows = np.flatnonzero(compute)
        phase = _phase_at(regions, launch[rows])
        for index, name in enumerate((*REGION_PHASES, "other")):
            sel = rows[phase == index]
            gpu_compute[name] = merge(ev.ts_us[sel], end[sel])

    # ---- collectives
    coll_rows = np.flatnonzero(nccl | cpu_coll)
    key_names: dict[str, int] = {}
    # one label per distinct (name, process group), numbered in order of first appearance,
    # as a loop over the rows numbers them (thousands of rows, a few dozen pairs)
    pair = ev.name[coll_rows].astype(np.int64) * (len(ev.groups) + 1) + ev.group[coll_rows] + 1
    _, first, inverse = np.unique(pair, return_index=True, return_inverse=True)
    codes = np.empty(first.shape[0], dtype=np.int64)
    for u in np.argsort(first, kind="stable").tolist():
        row = int(coll_rows[first[u]])
        label = _collective_key(names[ev.name[row]])
        group = int(ev.group[row])
        if group >= 0:
            label = f"{label}@{ev.groups[group]}"
        codes[u] = key_names.setdefault(label, len(key_names))
    keys = codes[inverse.reshape(-1)]
    anchor = np.where(nccl[coll_rows], launch[coll_rows], ev.ts_us[coll_rows])
    step_index = np.searchsorted(step_start, anchor, side="right") - 1
    outside = (step_index < 0) | (anchor >= step_end[np.clip(step_index, 0, None)])
    step_index = np.where(outside, -1, step_index)
    order = np.lexsort((ev.ts_us[coll_rows], keys, step_index))
    coll_rows, keys, step_index = coll_rows[order], keys[order], step_index[order]
    ordinal = _ordinals(step_index, keys)

    return RankTimeline(
        rank=trace.rank,
        source=trace.source,
        world_size=trace.world_size,
        backend=trace.backend,
        has_gpu=has_gpu,
        steps=steps,
        step_start_us=step_start,
        step_end_us=step_end,
        regions=regions,
        gpu_compute=gpu_compute,
        cpu_busy=cpu_busy,
        collective_step=step_index.astype(np.int64),
        collective_key=keys,
        collective_ordinal=ordinal,
        collective_start_us=ev.ts_us[coll_rows].copy(),
        collective_end_us=end[coll_rows].copy(),
        collective_keys=tuple(key_names),
        gpu=gpu_breakdown(ev, steps=step_start) if has_gpu else None,
        problems=tuple(problems),
        markers=tuple(markers),
        events=len(ev),
        bytes_read=trace.bytes_read,
        device=trace.device,
        host=host if isinstance(host := trace.metadata.get("host_name"), str) else None,
        gc_seconds=_per_step(ev.kind == EventKind.PYTHON_GC, ev, step_start, step_end),
        launch_gap_seconds=_launch_gaps(ev, gpu, launch, step_start, step_end),
        gpu_index=trace.gpu_index,
        epoch_offset_us=_epoch_offset(trace, ev),
        comm=None
        if classes is None
        else comm_timeline(ev, classes, step_start, step_end, launch=launch_at),
    )


#: Kineto times at or above this are Unix microseconds (2001-09-09) rather than relative.
_UNIX_US = 1e15


def _epoch_offset(trace: RankTrace, ev: EventTable) -> float | None:
    base = trace.metadata.get("baseTimeNanoseconds")
    if isinstance(base, int) and base > 0:
        return base / 1000.0
    if len(ev) and float(ev.ts_us.min()) >= _UNIX_US:
        return 0.0
    return None


def _per_step(rows: npt.NDArray[np.bool_], ev: EventTable, lo: F64, hi: F64) -> F64:
    """Seconds the (merged) intervals of ``rows`` cover inside each step window."""
    merged = merge(ev.ts_us[rows], ev.ts_us[rows] + ev.dur_us[rows])
    out = np.zeros(lo.shape[0])
    for i in range(lo.shape[0]):
        out[i] = clip(merged, float(lo[i]), float(hi[i])).total() / 1e6
    return out


def _launch_gaps(ev: EventTable, gpu: npt.NDArray[np.bool_], launch: F64, lo: F64, hi: F64) -> F64:
    """Per step, GPU idle time caused by the CPU: a gap between busy GPU intervals whose next
    kernel was launched after the gap began (the GPU waited for the launch, from the gap's
    start to the launch)."""
    out = np.zeros(lo.shape[0])
    rows = np.flatnonzero(gpu)
    if rows.shape[0] < 2:
        return out
    rows = rows[np.argsort(ev.ts_us[rows], kind="stable")]
    start, end = ev.ts_us[rows], ev.ts_us[rows] + ev.dur_us[rows]
    running = np.maximum.accumulate(end)
    opens = np.flatnonzero(start[1:] > running[:-1]) + 1  # first event after each gap
    gap_start, gap_end = running[opens - 1], start[opens]
    waited = np.clip(np.minimum(launch[rows[opens]], gap_end) - gap_start, 0.0, None)
    step = np.searchsorted(lo, gap_start, side="right") - 1
    inside = (step >= 0) & (gap_start < hi[np.clip(step, 0, None)])
    np.add.at(out, step[inside], waited[inside] / 1e6)
    return out


def _busiest_thread(ev: EventTable, cpu: npt.NDArray[np.bool_]) -> int | None:
    if not cpu.any():
        return None
    threads, counts = np.unique(ev.thread[cpu], return_counts=True)
    return int(threads[np.argmax(counts)])


def _concat(parts: list[Intervals]) -> Intervals:
    if not parts:
        return Intervals.empty()
    return merge(np.concatenate([p.start for p in parts]), np.concatenate([p.end for p in parts]))


def _minus(a: Intervals, b: Intervals) -> Intervals:
    """``a`` without ``b`` (both merged)."""
    if not len(a) or not len(b):
        return a
    points = distinct(np.concatenate([a.start, a.end, b.start, b.end]))
    lo, hi = points[:-1], points[1:]
    mid = (lo + hi) / 2
    keep = covers(a, mid) & ~covers(b, mid)
    return merge(lo[keep], hi[keep])


def _ordinals(step_index: I64, keys: I64) -> I64:
    """Position of each row within its (step, key) run; rows are sorted by step, key, time."""
    n = step_index.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    new_run = np.ones(n, dtype=bool)
    new_run[1:] = (step_index[1:] != step_index[:-1]) | (keys[1:] != keys[:-1])
    run_start = np.maximum.accumulate(np.where(new_run, np.arange(n), 0))
    return (np.arange(n) - run_start).astype(np.int64)


def _phase_at(regions: dict[str, Intervals], points: F64) -> npt.NDArray[np.int64]:
    """Index into ``(*REGION_PHASES, "other")`` of the region covering each point."""
    phase = np.full(points.shape[0], len(REGION_PHASES), dtype=np.int64)
    for index in reversed(range(len(REGION_PHASES))):
        phase[covers(regions[REGION_PHASES[index]], points)] = index
    return phase
