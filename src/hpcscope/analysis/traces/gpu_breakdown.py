"""Per-rank GPU time: idle, compute and non-compute, with HolisticTraceAnalysis' definitions.

So users can compare hpcscope with the tool they know, and so the benchmark can check it within
1 %: the same definitions as HTA 0.5.0's ``get_temporal_breakdown``:

* GPU events are kernels, memcpys and memsets (events with a stream);
* when the trace has two or more ``ProfilerStep``, only GPU events launched (runtime event with
  the same correlation id) before the *last* step starts are kept, as HTA does;
* ``kernel`` time = last end - first start of the merged GPU intervals; ``idle`` = that span
  minus the merged busy time; ``compute`` = merged time of computation kernels (names not
  matching ``^nccl.*Kernel``, not ``Memcpy``/``Memset``, not ``...Sync``); ``non_compute`` =
  kernel - compute - idle (communication and memory).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hpcscope.analysis.traces.arrays import codes_present, distinct, member_of
from hpcscope.analysis.traces.intervals import merge
from hpcscope.model.trace_events import EventKind, EventTable

_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")


@functools.lru_cache(maxsize=1 << 16)
def _is_compute(name: str) -> bool:
    """A computation kernel in HTA's sense (cached: ranks share their kernel names)."""
    return _NOT_COMPUTE.match(name) is None and _MEMORY.match(name) is None


@dataclass(frozen=True, slots=True)
class GpuBreakdown:
    """GPU time of one rank over the analysed span, in seconds."""

    kernel_seconds: float
    idle_seconds: float
    compute_seconds: float
    non_compute_seconds: float


def gpu_breakdown(ev: EventTable, *, steps: npt.NDArray[np.float64]) -> GpuBreakdown | None:
    """HTA-compatible temporal breakdown of one rank.

    Args:
        ev: the rank's events.
        steps: start times (µs) of its profiler steps, in time order.

    Returns:
        The breakdown, or None when the rank has no GPU event.
    """
    gpu = (
        (ev.kind == EventKind.KERNEL)
        | (ev.kind == EventKind.MEMCPY)
        | (ev.kind == EventKind.MEMSET)
    )
    rows = np.flatnonzero(gpu)
    if steps.shape[0] >= 2 and rows.shape[0]:
        last_start = float(steps.max())
        runtime = np.flatnonzero(ev.kind == EventKind.RUNTIME)
        early = runtime[ev.ts_us[runtime] < last_start]
        allowed = distinct(ev.correlation[early])
        rows = rows[member_of(ev.correlation[rows], allowed)]
    if rows.shape[0] == 0:
        return None
    start, end = ev.ts_us[rows], ev.ts_us[rows] + ev.dur_us[rows]
    busy = merge(start, end)
    span = float(busy.end[-1] - busy.start[0])
    idle = span - busy.total()
    is_compute = np.zeros(len(ev.names), dtype=bool)
    used = codes_present(ev.name[rows], len(ev.names))
    is_compute[used] = [_is_compute(ev.names[i]) for i in used.tolist()]
    comp_rows = is_compute[ev.name[rows]]
    compute = merge(start[comp_rows], end[comp_rows]).total()
    return GpuBreakdown(
        kernel_seconds=span / 1e6,
        idle_seconds=idle / 1e6,
        compute_seconds=compute / 1e6,
        non_compute_seconds=(span - compute - idle) / 1e6,
    )
