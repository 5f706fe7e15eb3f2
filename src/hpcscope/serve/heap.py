"""The serving process's garbage collector: the long-lived heap out of its full collections.

CPython's cyclic collector stops the whole process, GIL held, for every collection, and a full
(generation 2) collection walks every tracked object alive. The server's start-up leaves a few
hundred thousand of them that live as long as the process (the web framework's routes and
schemas, templates, the topology and diagram layout, the store's catalog): measured under the
API load bench (``bench/api_load.py``, 128-node twin, 50 clients), a full collection took up to
146 ms of CPU (290 ms of wall time on the shared cores) about every 7 s, and every request in
flight waited for it, the tail of the latency figures.

:func:`settle_heap` collects once (so that no garbage is kept), then :func:`gc.freeze` moves
every object alive into the permanent generation, which no collection walks again; reference
counting still frees them. The server settles at start-up and once more after its first
collection cycles (:class:`HeapSettler`), when the caches the first cycles and reads build are
in place. Objects created later are collected as before.
"""

from __future__ import annotations

import gc
import logging
import threading
import time

log = logging.getLogger(__name__)


def settle_heap() -> int:
    """Collect, then freeze what is alive; returns the number of objects frozen in all."""
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.debug(
        "heap settled: %d objects frozen in %.1f ms",
        frozen,
        (time.perf_counter() - started) * 1000,
    )
    return frozen


class HeapSettler:
    """An after-cycle hook that settles the heap once, after ``after_cycles`` cycles."""

    def __init__(self, *, after_cycles: int = 5) -> None:
        self._left = after_cycles
        self._lock = threading.Lock()

    @property
    def settled(self) -> bool:
        return self._left <= 0

    def after_cycle(self) -> None:
        with self._lock:
            if self._left <= 0:
                return
            self._left -= 1
            if self._left == 0:
                settle_heap()
