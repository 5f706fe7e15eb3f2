"""The serving process settles its long-lived heap out of the cyclic collector's walks."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from hpcscope.serve.heap import GC_YOUNG_THRESHOLD, HeapSettler, settle_heap, tune_gc


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    gc.unfreeze()
    before = gc.get_threshold()
    yield
    gc.unfreeze()  # the rest of the test run collects as before
    gc.set_threshold(*before)


class Node:
    def __init__(self) -> None:
        self.me = self


def test_settling_freezes_what_is_alive_and_drops_the_cyclic_garbage() -> None:
    kept = Node()
    garbage = Node()
    garbage_id = id(garbage)
    del garbage  # a cycle: only the collector frees it
    frozen = settle_heap()
    assert frozen == gc.get_freeze_count() > 0
    assert not any(id(o) == garbage_id for o in gc.get_objects())
    assert not any(o is kept for o in gc.get_objects())  # out of every generation walked
    assert kept.me is kept


def test_a_settle_collects_the_cycles_an_earlier_settle_froze() -> None:
    frozen_then = Node()
    gone = weakref.ref(frozen_then)
    settle_heap()
    del frozen_then  # garbage now, but frozen: no collection walks it
    gc.collect()
    assert gone() is not None
    settle_heap()
    assert gone() is None


def test_full_collections_are_not_deferred_by_the_objects_frozen() -> None:
    """CPython skips a due full collection while the objects promoted since the last one are
    fewer than a quarter of its survivors: after a settle, that count is what is not frozen."""
    keep = [[i] for i in range(200_000)]  # a long-lived heap, frozen by the settle
    settle_heap()
    gc.set_threshold(700, 10, 10)
    full = gc.get_stats()[2]["collections"]
    old = [Node() for _ in range(2_000)]  # promoted to the old generation, then garbage
    for _ in range(11):  # the old generation's collection is due (11 > 10)
        gc.collect(1)
    del old
    young = [[i] for i in range(1_000)]  # past the young threshold: the collector runs
    assert gc.get_stats()[2]["collections"] == full + 1
    assert keep and young


def test_the_hook_settles_while_the_old_generation_grows_and_every_period() -> None:
    now = [0.0]
    settler = HeapSettler(
        old_objects=1_000, early_settles=2, every_seconds=300.0, clock=lambda: now[0]
    )
    settle_heap()
    settler.after_cycle()  # the old generation is small: nothing to do
    assert settler.settles == 0
    kept = [[i] for i in range(2_000)]  # new long-lived objects
    gc.collect()
    settler.after_cycle()
    assert settler.settles == 1 and not any(o is kept for o in gc.get_objects())
    frozen_then = Node()
    gone = weakref.ref(frozen_then)
    settle_heap()
    del frozen_then
    now[0] = 299.0
    settler.after_cycle()  # one early settle left, but the old generation is small
    assert settler.settles == 1 and gone() is not None
    now[0] = 300.0
    settler.after_cycle()  # a period since the last settle: frozen garbage collected
    assert settler.settles == 2 and gone() is None
    more = [[i] for i in range(2_000)]
    gc.collect()
    settler.after_cycle()
    assert settler.settles == 3  # the second early settle
    even_more = [[i] for i in range(2_000)]
    gc.collect()
    now[0] = 599.0
    settler.after_cycle()  # the early settles are done: the next one waits for its period
    assert settler.settles == 3
    now[0] = 600.0
    settler.after_cycle()
    assert settler.settles == 4
    assert kept and more and even_more


def test_tune_gc_freezes_start_up_and_raises_the_young_threshold() -> None:
    before = gc.get_threshold()
    tune_gc()
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, before[1], before[2])
    assert gc.get_freeze_count() > 0
    cycle: list[object] = []
    cycle.append(cycle)
    del cycle
    assert gc.collect() >= 1  # cycles made after start-up are still collected
