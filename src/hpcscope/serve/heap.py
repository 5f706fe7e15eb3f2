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
counting still frees them. The server settles at start-up, and after a collection cycle
when the old generation has grown again (:class:`HeapSettler`): the caches the first cycles and
reads build. Objects created later are collected as before.
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
    """An after-cycle hook that settles the heap again when the old generation has grown.

    The collector's first cycles build long-lived state after start-up (each target's parser
    keeps its series table, some 170 series per page; the diagram's and the snapshots' caches
    fill on the first reads). After a cycle, when the old generation holds more than
    ``old_objects`` objects, the heap is settled, at most ``max_settles`` times: cyclic
    garbage made of objects frozen is never collected, so freezing again and again could keep
    it for the life of the process.
    """

    def __init__(self, *, old_objects: int = 20_000, max_settles: int = 3) -> None:
        self.old_objects = old_objects
        self.max_settles = max_settles
        self.settles = 0
        self._lock = threading.Lock()

    def after_cycle(self) -> None:
        with self._lock:
            if self.settles >= self.max_settles:
                return
            if len(gc.get_objects(generation=2)) > self.old_objects:
                self.settles += 1
                settle_heap()


#: Allocations (minus deallocations) of container objects between two collections of the young
#: generation while serving. CPython's 700 ran about ten collections per 1,024-GPU scrape
#: round (each walking the round's parsed pages and tables): ~10 ms of CPU a round.
GC_YOUNG_THRESHOLD = 50_000


def tune_gc() -> None:
    """Once start-up is done: the heap settled (:func:`settle_heap`) and the young generation
    collected less often (:data:`GC_YOUNG_THRESHOLD`). Cycles are still collected, later."""
    settle_heap()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, oldest)
