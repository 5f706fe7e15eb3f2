"""The serving process settles its long-lived heap out of the cyclic collector's walks."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from hpcscope.serve.heap import HeapSettler, settle_heap


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


def test_the_hook_settles_once_after_its_cycles() -> None:
    settler = HeapSettler(after_cycles=3)
    settler.after_cycle()
    settler.after_cycle()
    assert gc.get_freeze_count() == 0
    settler.after_cycle()
    assert settler.settled
    frozen = gc.get_freeze_count()
    assert frozen > 0
    gc.unfreeze()
    settler.after_cycle()  # never again: later objects are collected as before
    assert gc.get_freeze_count() == 0
