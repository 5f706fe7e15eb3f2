"""The serve's garbage collector: start-up objects frozen, the young generation collected less."""

from __future__ import annotations

import gc

from hpcscope.serve.heap import GC_YOUNG_THRESHOLD, tune_gc


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
