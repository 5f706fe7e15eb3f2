"""The serving process settles its long-lived heap out of the cyclic collector's walks."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from hpcscope.serve.heap import GC_YOUNG_THRESHOLD, HeapSettler, settle_heap, tune_gc


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the rest of the test run collects as before


def test_settling_freezes_what_is_alive_and_drops_the_cyclic_garbage() -> None:
    class Node:
        def __init__(self) -> None:
            self.me = self

    kept = Node()
    garbage = Node()
    garbage_id = id(garbage)
    del garbage  # a cycle: only the collector frees it
    frozen = settle_heap()
    assert frozen == gc.get_freeze_count() > 0
    assert not any(id(o) == garbage_id for o in gc.get_objects())
    assert not any(o is kept for o in gc.get_objects())  # out of every generation walked
    assert kept.me is kept


def test_the_hook_settles_when_the_old_generation_grew_at_most_max_settles_times() -> None:
    settler = HeapSettler(old_objects=1_000, max_settles=2)
    settle_heap()
    gc.unfreeze()  # all alive in the old generation now
    gc.collect()
    assert len(gc.get_objects(generation=2)) > 1_000
    settler.after_cycle()
    assert settler.settles == 1 and gc.get_freeze_count() > 1_000
    settler.after_cycle()  # the old generation is small now: nothing to do
    assert settler.settles == 1
    kept = [[i] for i in range(2_000)]  # new long-lived objects
    gc.collect()
    settler.after_cycle()
    assert settler.settles == 2
    assert not any(o is kept for o in gc.get_objects())
    gc.unfreeze()
    gc.collect()
    settler.after_cycle()  # never again: later objects are collected as before
    assert settler.settles == 2 and gc.get_freeze_count() == 0


def test_tune_gc_freezes_start_up_and_raises_the_young_threshold() -> None:
    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, before[1], before[2])
        assert gc.get_freeze_count() > 0
        cycle: list[object] = []
        cycle.append(cycle)
        del cycle
        assert gc.collect() >= 1  # cycles made after start-up are still collected
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
