"""One rank's events reduced to communication classes: per class the intervals its transfers
cover, the compute that can hide them, and the events no rule classifies.

Runs in the per-rank worker, next to :func:`~hpcscope.analysis.traces.rank_timeline.
rank_timeline` (pure: events and a :class:`~hpcscope.analysis.traces.kernel_classes.
ClassTable` in, merged intervals out).

* **Which events.** On a rank with GPU events: every kernel, memcpy and memset is classified
  (transfer or compute; none left out: an unknown one is *unclassified*, with its time), and
  CPU events only to find the operator that launched a transfer. On a CPU-only rank (gloo):
  CPU operators and ranges; an operator no rule knows is unclassified (a range no rule knows,
  such as a user annotation, is not an operator and is ignored).
* **Launch.** A transfer whose launch operator names another operation (an NCCL ``SendRecv``
  kernel under ``nccl:all_to_all``, a gloo ``all_reduce`` range of a reduce-scatter) takes the
  operation and dimension of that operator: the one that encloses its launch (GPU: the
  runtime call with its correlation id; CPU: the event itself) on the launching thread, or for
  a CPU transfer run by a worker thread (gloo), the last one started before it on another
  thread.
* **Step windows on the GPU.** A kernel runs after the CPU step that launched it, often into
  the next step's CPU window (a one-step trace ends with its GPU work cut off): on a GPU rank
  step ``s`` is, on the GPU, from the start of the first GPU event its CPU window launched to
  the start of the next step's (the last step: to the end of the last event), so the
  steps split the GPU time between them and none of a step's kernels is left out.
* **Compute that hides.** GPU: the union of compute kernels, memcpy and memset on any stream
  (a stream runs one thing at a time, so it never overlaps its own transfers). CPU: per
  thread, its compute operators minus that thread's own transfers (an operator nested inside a
  blocking send is not overlap), then the union over threads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hpcscope.analysis.traces.arrays import distinct
from hpcscope.analysis.traces.intervals import Intervals, covers, merge
from hpcscope.analysis.traces.kernel_classes import BUBBLE_OPS, ClassTable, Match
from hpcscope.model.trace_events import EventKind, EventTable

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class CommTimeline:
    """What one rank contributes to the per-class analysis.

    Attributes:
        classes: per communication class, the merged intervals (µs) of its transfers.
        bubble: merged intervals of pipeline receives (their exposed part is the bubble).
        compute: merged intervals of compute that can hide a transfer (see module docstring).
        unclassified: event name -> seconds (union of its events) of events no rule matched.
        transfers: number of transfer events classified.
        step_windows_us: on a GPU rank, ``[step, 2]`` start and end (µs) of each step on the
            GPU (see the module docstring), aligned with the rank's steps; None on a CPU rank
            (its steps' own windows hold its transfers).
    """

    classes: dict[str, Intervals] = field(default_factory=dict)
    bubble: Intervals = field(default_factory=Intervals.empty)
    compute: Intervals = field(default_factory=Intervals.empty)
    unclassified: dict[str, float] = field(default_factory=dict)
    transfers: int = 0
    step_windows_us: F64 | None = None


def gpu_step_windows(
    launch_us: F64, start_us: F64, end_us: F64, step_start_us: F64, step_end_us: F64
) -> F64:
    """``[step, 2]`` windows on the GPU (module docstring) from the GPU events' launch times,
    starts and ends. A step starts where its first GPU event starts (a step that launched
    nothing: at its CPU start), never before the previous step; it ends where the next one
    starts, the last at the steps' last event's end (or its CPU end): the windows are
    contiguous and hold every event the steps launched."""
    n = step_start_us.shape[0]
    if n == 0:
        return np.zeros((0, 2))
    step = np.searchsorted(step_start_us, launch_us, side="right") - 1
    inside = (step >= 0) & (launch_us < step_end_us[np.clip(step, 0, None)])
    step, start, end = step[inside], start_us[inside], end_us[inside]
    first = np.full(n, np.inf)
    last = np.full(n, -np.inf)
    np.minimum.at(first, step, start)
    np.maximum.at(last, step, end)
    seen = np.isfinite(first)
    lo = np.maximum.accumulate(np.where(seen, first, step_start_us.astype(np.float64)))
    hi = np.empty(n)
    hi[:-1] = lo[1:]
    tail = float(step_end_us[-1]) if not seen[-1] else float(lo[-1])
    hi[-1] = max(tail, float(last[seen].max()) if seen.any() else tail)
    return np.stack([lo, hi], axis=1)


def _minus(a: Intervals, b: Intervals) -> Intervals:
    """``a`` without ``b`` (both merged)."""
    if not len(a) or not len(b):
        return a
    points = distinct(np.concatenate([a.start, a.end, b.start, b.end]))
    lo, hi = points[:-1], points[1:]
    mid = (lo + hi) / 2
    keep = covers(a, mid) & ~covers(b, mid)
    return merge(lo[keep], hi[keep])


def launch_points(ev: EventTable) -> tuple[F64, npt.NDArray[np.int64]]:
    """For every event: the time and thread of the runtime call with its correlation id (its
    own start and thread when there is none)."""
    time = ev.ts_us.copy()
    thread = ev.thread.copy()
    runtime = np.flatnonzero((ev.kind == EventKind.RUNTIME) & (ev.correlation >= 0))
    targets = np.flatnonzero((ev.kind != EventKind.RUNTIME) & (ev.correlation >= 0))
    if runtime.shape[0] == 0 or targets.shape[0] == 0:
        return time, thread
    order = runtime[np.argsort(ev.correlation[runtime], kind="stable")]
    corr = ev.correlation[order]
    pos = np.clip(np.searchsorted(corr, ev.correlation[targets]), 0, corr.shape[0] - 1)
    found = corr[pos] == ev.correlation[targets]
    time[targets[found]] = ev.ts_us[order[pos[found]]]
    thread[targets[found]] = ev.thread[order[pos[found]]]
    return time, thread


class _Launchers:
    """The launch operators of a rank, searchable by (thread, time); each is kept as its name
    code and its rule found through ``by_name`` (no per-operator Python list)."""

    def __init__(
        self, ev: EventTable, rows: npt.NDArray[np.int64], by_name: dict[int, Match | None]
    ) -> None:
        self.by_name = by_name
        self.by_thread: dict[int, tuple[F64, F64, npt.NDArray[np.int32]]] = {}
        order = rows[np.argsort(ev.ts_us[rows], kind="stable")]
        self.start = ev.ts_us[order]
        self.thread = ev.thread[order]
        self.name = ev.name[order]
        for t in distinct(self.thread.astype(np.float64)).astype(np.int64).tolist():
            sel = np.flatnonzero(self.thread == t)
            self.by_thread[t] = (
                self.start[sel],
                ev.ts_us[order[sel]] + ev.dur_us[order[sel]],
                self.name[sel],
            )

    def enclosing(self, thread: int, time: float) -> Match | None:
        """The innermost launch operator on ``thread`` running at ``time``."""
        found = self.by_thread.get(thread)
        if found is None:
            return None
        start, end, name = found
        i = int(np.searchsorted(start, time, side="right")) - 1
        while i >= 0:  # the latest start first: the innermost of nested operators
            if end[i] > time:
                return self.by_name[int(name[i])]
            i -= 1
        return None

    def enclosing_each(self, threads: npt.NDArray[np.int64], times: F64) -> list[Match | None]:
        """:meth:`enclosing` of every (thread, time) pair: one search per thread; only a
        point whose latest-started operator has already ended walks back one by one."""
        out: list[Match | None] = [None] * int(times.shape[0])
        by_name = self.by_name
        for thread in distinct(threads).tolist():
            found = self.by_thread.get(int(thread))
            if found is None:
                continue
            start, end, name = found
            sel = np.flatnonzero(threads == thread)
            at = times[sel]
            latest = np.searchsorted(start, at, side="right") - 1
            hit = (latest >= 0) & (end[np.clip(latest, 0, None)] > at)
            for k, code in zip(sel[hit].tolist(), name[latest[hit]].tolist(), strict=True):
                out[k] = by_name[code]
            for k in sel[~hit & (latest > 0)].tolist():
                out[k] = self.enclosing(int(thread), float(times[k]))
        return out

    def before(self, thread: int, time: float) -> Match | None:
        """The last launch operator started at or before ``time`` on another thread."""
        i = int(np.searchsorted(self.start, time, side="right")) - 1
        while i >= 0:
            if int(self.thread[i]) != thread:
                return self.by_name[int(self.name[i])]
            i -= 1
        return None


def comm_timeline(
    ev: EventTable,
    table: ClassTable,
    step_start_us: F64 | None = None,
    step_end_us: F64 | None = None,
    launch: tuple[F64, npt.NDArray[np.int64]] | None = None,
) -> CommTimeline:
    """Classify one rank's events (see the module docstring); with the rank's CPU step
    windows, a GPU rank's steps are also placed on the GPU (``step_windows_us``). ``launch``
    is :func:`launch_points` of ``ev`` when the caller has it already."""
    names = ev.names
    kind = ev.kind
    gpu = (kind == EventKind.KERNEL) | (kind == EventKind.MEMCPY) | (kind == EventKind.MEMSET)
    cpu = (kind == EventKind.CPU_OP) | (kind == EventKind.ANNOTATION)
    has_gpu = bool(gpu.any())
    end = ev.ts_us + ev.dur_us
    gpu_match = {int(i): table.classify(names[i], "gpu") for i in distinct(ev.name[gpu]).tolist()}
    cpu_match = {int(i): table.classify(names[i], "cpu") for i in distinct(ev.name[cpu]).tolist()}

    is_launch = np.zeros(len(names), dtype=bool)
    for n, m in cpu_match.items():
        is_launch[n] = m is not None and m.role == "launch"
    launch_rows = np.flatnonzero(cpu & is_launch[ev.name])
    launchers = _Launchers(ev, launch_rows, cpu_match)

    # per name id: 0 unknown, 1 compute, 2 transfer, 3 launch (or nothing to count)
    code = np.full(len(names), 3, dtype=np.int8)
    if has_gpu:
        scope, matches = gpu, gpu_match
    else:
        scope, matches = cpu, cpu_match
    for n, m in matches.items():
        code[n] = 0 if m is None else 1 if m.op == "compute" else 2 if m.role == "transfer" else 3
    row_code = np.where(scope, code[ev.name], 3)
    if not has_gpu:  # a CPU range no rule knows is not an operator
        row_code = np.where((row_code == 0) & (kind != EventKind.CPU_OP), 3, row_code)
    transfer_rows = np.flatnonzero(row_code == 2).tolist()
    transfer_matches: list[Match] = [matches[int(n)] for n in ev.name[transfer_rows].tolist()]  # type: ignore[misc]
    compute_rows = np.flatnonzero(row_code == 1)
    unknown_rows = np.flatnonzero(row_code == 0)

    launch_time, launch_thread = launch_points(ev) if launch is None else launch
    by_class: dict[str, list[int]] = {}
    bubble_rows: list[int] = []
    enclosing = launchers.enclosing_each(launch_thread[transfer_rows], launch_time[transfer_rows])
    for row, match, found in zip(transfer_rows, transfer_matches, enclosing, strict=True):
        if found is None and not has_gpu:
            found = launchers.before(int(launch_thread[row]), float(ev.ts_us[row]))
        # the launcher decides only what the transfer's own name leaves open or says otherwise
        # (a SendRecv kernel under nccl:all_to_all; a gloo all_reduce of a reduce-scatter)
        chosen = match if found is None or found.op in ("collective", match.op) else found
        klass = chosen.klass
        by_class.setdefault(klass, []).append(row)
        if klass == "pp_send_recv" and chosen.op in BUBBLE_OPS:
            bubble_rows.append(row)

    classes = {
        k: merge(ev.ts_us[np.array(r)], end[np.array(r)]) for k, r in sorted(by_class.items())
    }
    bubble = merge(ev.ts_us[np.array(bubble_rows, dtype=np.int64)], end[bubble_rows])
    rows = compute_rows
    if has_gpu:
        compute = merge(ev.ts_us[rows], end[rows])
    else:
        transfer = np.array(transfer_rows, dtype=np.int64)
        parts = []
        for t in distinct(ev.thread[rows]).tolist():
            mine = rows[ev.thread[rows] == t]
            own = transfer[ev.thread[transfer] == t]
            parts.append(_minus(merge(ev.ts_us[mine], end[mine]), merge(ev.ts_us[own], end[own])))
        compute = merge(
            np.concatenate([p.start for p in parts] or [np.zeros(0)]),
            np.concatenate([p.end for p in parts] or [np.zeros(0)]),
        )
    unclassified: dict[str, float] = {}
    unknown = unknown_rows
    for n in distinct(ev.name[unknown]).tolist():
        sel = unknown[ev.name[unknown] == n]
        unclassified[names[n]] = merge(ev.ts_us[sel], end[sel]).total() / 1e6
    windows = None
    if has_gpu and step_start_us is not None and step_end_us is not None:
        windows = gpu_step_windows(
            launch_time[gpu], ev.ts_us[gpu], end[gpu], step_start_us, step_end_us
        )
    return CommTimeline(
        classes=classes,
        bubble=bubble,
        compute=compute,
        unclassified=unclassified,
        transfers=len(transfer_rows),
        step_windows_us=windows,
    )
