"""The serving process's garbage collector: the long-lived heap out of its full collections.

CPython's cyclic collector stops the whole process, GIL held, for every collection, and a full
(generation 2) collection walks every tracked object alive. The server's start-up leaves a few
hundred thousand of them that live as long as the process (the web framework's routes and
schemas, templates, the topology and diagram layout, the store's catalog): measured under the
API load bench (``bench/api_load.py``, 128-node twin, 50 clients), a full collection took up to
146 ms of CPU (290 ms of wall time on the shared cores) about every 7 s, and every request in
flight waited for it, the tail of the latency figures.

:func:`settle_heap` collects everything (what an earlier settle froze too), then
:func:`gc.freeze` moves every object alive into the permanent generation, which no collection
walks; reference counting still frees them. Two things keep a settled heap from growing:

* cyclic garbage made of frozen objects is never collected while they stay frozen (a request in
  flight at the settle, a cache entry replaced later): each settle unfreezes first, and the
  server settles again every :data:`RESETTLE_SECONDS` (:class:`HeapSettler`), so such garbage
  lives one period at most, at the cost of one full walk per period;
* CPython defers a full collection until the objects promoted since the last one reach a
  quarter of what that one left alive: counted before the freeze, that is every object frozen,
  and the old generation's cyclic garbage (responses, their bodies) waited for some 100,000
  promotions. A collection after the freeze counts what is not frozen instead, so full
  collections walk the unfrozen old generation at CPython's usual pace.

What the collections freed is then given back to the system (:func:`~hpcscope.serve.allocator.
trim_allocator`): freed space inside glibc's arenas otherwise stays resident.

The server settles at start-up, after the collector's first cycles while the old generation
grows (the caches the first cycles and reads build), and every :data:`RESETTLE_SECONDS`.
Objects created later are collected as before.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable

from hpcscope.serve.allocator import trim_allocator

log = logging.getLogger(__name__)

#: Seconds between two settles once the first cycles' settles are done: a full walk of the heap
#: (~150 ms of CPU at 128 nodes) per period; frozen garbage lives at most that long.
RESETTLE_SECONDS = 300.0


def settle_heap() -> int:
    """Unfreeze and collect, freeze what is alive, collect what is not frozen, trim the C
    allocator (module docstring); returns the number of objects frozen."""
    started = time.perf_counter()
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    gc.collect()  # the survivors' count that gates full collections: what is not frozen
    trim_allocator()  # what the collections freed, given back (serve/allocator.py)
    frozen = gc.get_freeze_count()
    log.debug(
        "heap settled: %d objects frozen in %.1f ms",
        frozen,
        (time.perf_counter() - started) * 1000,
    )
    return frozen


class HeapSettler:
    """An after-cycle hook that settles the heap again (:func:`settle_heap`).

    The collector's first cycles build long-lived state after start-up (each target's parser
    keeps its series table, some 170 series per page; the diagram's and the snapshots' caches
    fill on the first reads): after a cycle, when the old generation holds more than
    ``old_objects`` objects, the heap is settled, ``early_settles`` times at most. And it is
    settled after the first cycle ``every_seconds`` after the last settle (or the hook's
    start), whatever the old generation holds: what became cyclic garbage while frozen is
    collected then: after a settle, the old generation may not grow for long (the 128-node
    soak's young generation, at :data:`GC_YOUNG_THRESHOLD`, was collected 5 times in 5
    minutes), so the early settles alone could leave frozen garbage for the process's life.
    """

    def __init__(
        self,
        *,
        old_objects: int = 20_000,
        early_settles: int = 3,
        every_seconds: float = RESETTLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.old_objects = old_objects
        self.early_settles = early_settles
        self.every_seconds = every_seconds
        self.settles = 0  # in all
        self.grown = 0  # of them, for the old generation's growth
        self._clock = clock
        self._last = clock()
        self._lock = threading.Lock()

    def after_cycle(self) -> None:
        with self._lock:
            now = self._clock()
            early = self.grown < self.early_settles and (
                len(gc.get_objects(generation=2)) > self.old_objects
            )
            if early or now - self._last >= self.every_seconds:
                self.grown += early
                self.settles += 1
                self._last = now
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
