"""The sensor's records back in kernel order before they are translated.

bpftrace writes each CPU's events to that CPU's perf ring and prints the rings one after
the other, so two events of one thread that ran on two CPUs can reach user space in the
wrong order: a ``dup2`` or a ``close`` before the ``open`` it refers to, which the
translator then cannot match to a protected file (and loses the bytes read). A busy node,
where the scheduler moves threads more often, shows it most.

:class:`KernelOrder` holds each record for ``hold_ns`` after its kernel time
(``CLOCK_MONOTONIC``, the clock of bpftrace's ``nsecs`` and of :func:`time.monotonic_ns`)
and releases records in kernel-time order. Records without a kernel time (a flushed byte
map, ``attached``, ``lost``) take their arrival time: a byte map holds what was counted up
to the moment bpftrace read it, which is after every event that produced those bytes.
A record that arrives later than the hold (a ring read very late) is released at once, still
after everything already released: order is kept as far as the hold allows.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterable

from hpcscope.ingest.security.bpftrace import SensorRecord

#: how long a record waits for earlier ones from other CPUs' rings (bpftrace polls every
#: ring within milliseconds; half a second covers a loaded node and keeps answers prompt)
DEFAULT_HOLD_NS = 500_000_000


class KernelOrder:
    """A reorder buffer: push records as they arrive, pop them in kernel-time order."""

    def __init__(self, hold_ns: int = DEFAULT_HOLD_NS) -> None:
        if hold_ns < 0:
            raise ValueError(f"hold_ns must be >= 0, got {hold_ns}")
        self.hold_ns = hold_ns
        self._heap: list[tuple[int, int, SensorRecord]] = []
        self._sequence = 0
        self._released_ns = 0

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, records: Iterable[SensorRecord], *, arrival_ns: int) -> None:
        """Queue the records of one output line (``arrival_ns``: monotonic ns now)."""
        for record in records:
            if record.ns is None:
                record = dataclasses.replace(record, ns=arrival_ns)
            # never before what was already released: a very late record keeps its place
            # after them rather than jumping the queue
            key = max(record.ns or 0, self._released_ns)
            heapq.heappush(self._heap, (key, self._sequence, record))
            self._sequence += 1

    def pop_ready(self, now_ns: int) -> list[SensorRecord]:
        """Records whose hold is over, oldest kernel time first."""
        ready: list[SensorRecord] = []
        limit = now_ns - self.hold_ns
        while self._heap and self._heap[0][0] <= limit:
            key, _, record = heapq.heappop(self._heap)
            self._released_ns = key
            ready.append(record)
        return ready

    def drain(self) -> list[SensorRecord]:
        """Every queued record in order (at the end of bpftrace's output)."""
        ready = [record for _, _, record in sorted(self._heap)]
        if self._heap:
            self._released_ns = max(key for key, _, _ in self._heap)
        self._heap.clear()
        return ready
