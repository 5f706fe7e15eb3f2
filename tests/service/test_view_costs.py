"""What the kept views cost: computations, seconds and misses by kind of view."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcscope.service.snapshots import SnapshotMiss, Snapshots, cache_only
from hpcscope.service.view_costs import ViewCost, ViewCosts, view_name
from tests.service.test_snapshots import Clock


def test_view_name_is_the_key_family() -> None:
    assert view_name(("serve.slo", ("team", "vision"), 30)) == "serve.slo"
    assert view_name("jobs.visible") == "jobs.visible"
    assert view_name(42) == "int"
    assert view_name(()) == "tuple"
    assert view_name((7, "x")) == "tuple"


def test_computations_and_their_seconds_are_counted_per_view() -> None:
    clock, writes = Clock(), [0]
    snapshots = Snapshots(lambda: writes[0], clock=clock, stale_seconds=0.0)

    def slow() -> int:
        clock.now += 0.25
        return 1

    snapshots.get(("serve.slo", "admin"), slow)
    snapshots.get(("serve.slo", "team"), slow)
    snapshots.get(("serve.slo", "admin"), slow)  # current: served, not computed
    writes[0] += 1
    snapshots.get(("serve.slo", "admin"), slow)  # a new generation: computed again
    snapshots.get(("jobs.visible", "admin"), lambda: 2)
    costs = snapshots.costs.snapshot()
    assert costs["serve.slo"] == ViewCost(computations=3, compute_seconds=0.75, misses=0)
    assert costs["jobs.visible"] == ViewCost(computations=1, compute_seconds=0.0, misses=0)


def test_a_read_on_the_loop_that_finds_nothing_is_a_miss() -> None:
    snapshots = Snapshots(lambda: 0, clock=Clock())
    with pytest.raises(SnapshotMiss):
        cache_only(snapshots.get, ("serve.cluster", "admin"), lambda: 1)
    assert snapshots.costs.snapshot()["serve.cluster"].misses == 1
    snapshots.get(("serve.cluster", "admin"), lambda: 1)  # the worker thread computes it
    cache_only(snapshots.get, ("serve.cluster", "admin"), lambda: 1)  # then served: no miss
    assert snapshots.costs.snapshot()["serve.cluster"] == ViewCost(1, 0.0, 1)


def test_versioned_keys_count_under_their_family() -> None:
    snapshots = Snapshots(lambda: 0, clock=Clock())
    snapshots.get(("serve.alerts", "admin"), lambda: b"a", version=1)
    snapshots.get(("serve.alerts", "admin"), lambda: b"b", version=2)
    assert snapshots.costs.snapshot() == {"serve.alerts": ViewCost(2, 0.0, 0)}


@given(st.lists(st.tuples(st.sampled_from("abc"), st.floats(0, 10), st.booleans()), max_size=50))
def test_counts_add_up_whatever_the_order(events: list[tuple[str, float, bool]]) -> None:
    costs = ViewCosts()
    for name, seconds, miss in events:
        if miss:
            costs.missed((name, 1))
        else:
            costs.computed((name, 1), seconds)
    for name, cost in costs.snapshot().items():
        mine = [(s, m) for n, s, m in events if n == name]
        assert cost.computations == sum(1 for _, m in mine if not m)
        assert cost.misses == sum(1 for _, m in mine if m)
        assert cost.compute_seconds == pytest.approx(sum(s for s, m in mine if not m))


def test_counts_from_many_threads_are_not_lost() -> None:
    costs = ViewCosts()

    def work() -> None:
        for _ in range(2000):
            costs.computed(("v",), 0.001)
            costs.missed(("v",))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cost = costs.snapshot()["v"]
    assert (cost.computations, cost.misses) == (8000, 8000)
    assert cost.compute_seconds == pytest.approx(8.0)


def test_a_nested_computation_counts_under_its_own_view_only() -> None:
    """A page that computes the document it shows: the page's seconds are its own, the
    document's count under the document; together, the wall time spent."""
    clock = Clock()
    snapshots = Snapshots(lambda: 0, clock=clock)

    def document() -> bytes:
        clock.now += 0.5
        return b"{}"

    def page() -> bytes:
        clock.now += 0.25
        body = snapshots.get(("serve.document", "admin"), document)
        clock.now += 0.125
        return b"<html>" + body

    snapshots.get(("serve.page", "admin"), page)
    costs = snapshots.costs.snapshot()
    assert costs["serve.page"] == ViewCost(1, 0.375, 0)
    assert costs["serve.document"] == ViewCost(1, 0.5, 0)


def test_a_failed_nested_computation_still_leaves_the_outer_its_own_seconds() -> None:
    clock = Clock()
    snapshots = Snapshots(lambda: 0, clock=clock)

    def broken() -> int:
        clock.now += 1.0
        raise ValueError("no")

    def outer() -> int:
        clock.now += 0.5
        try:
            snapshots.get(("inner",), broken)
        except ValueError:
            pass
        return 1

    snapshots.get(("outer",), outer)
    assert snapshots.costs.snapshot() == {"outer": ViewCost(1, 0.5, 0)}
