"""Snapshots: one computation per generation and key, stale-while-refresh, single flight."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from hpcscope.service.snapshots import SnapshotMiss, Snapshots, cache_only, caching_only


class Writes:
    """A fake committed-write counter."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> int:
        return self.count


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Held:
    """A refresh runner that keeps the jobs until the test runs them."""

    def __init__(self) -> None:
        self.jobs: list[Callable[[], None]] = []

    def __call__(self, job: Callable[[], None]) -> None:
        self.jobs.append(job)

    def run(self) -> None:
        jobs, self.jobs = self.jobs, []
        for job in jobs:
            job()


def counter() -> tuple[list[int], Callable[[], int]]:
    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        return len(calls)

    return calls, compute


def make(writes: Writes, clock: Clock, held: Held, *, stale_seconds: float = 30.0) -> Snapshots:
    """Snapshots whose every generation counts (no minimum refresh: the generations' tests)."""
    return Snapshots(
        writes,
        max_age_seconds=10.0,
        stale_seconds=stale_seconds,
        min_refresh_seconds=0.0,
        clock=clock,
        refresh=held,
    )


def test_one_computation_per_generation_and_key() -> None:
    writes, clock, held = Writes(), Clock(), Held()
    snapshots = make(writes, clock, held)
    calls, compute = counter()
    assert snapshots.get("a", compute) == 1
    assert snapshots.get("a", compute) == 1
    assert snapshots.get("b", compute) == 2  # another key: its own value
    assert len(calls) == 2
    assert snapshots.computations == 2


def test_a_write_serves_the_old_value_once_and_refreshes_it_behind() -> None:
    writes, clock, held = Writes(), Clock(), Held()
    snapshots = make(writes, clock, held)
    _, compute = counter()
    snapshots.publish()
    assert snapshots.get("a", compute) == 1
    writes.count += 1
    snapshots.publish()
    assert snapshots.get("a", compute) == 1  # stale, served at once
    assert snapshots.get("a", compute) == 1  # one refresh only is queued
    assert len(held.jobs) == 1
    held.run()
    assert snapshots.get("a", compute) == 2


@pytest.mark.parametrize("published", [False, True])
def test_without_stale_serving_a_write_is_seen_by_the_next_read(published: bool) -> None:
    writes, clock, held = Writes(), Clock(), Held()
    # without a collector publishing its cycles, nothing stale is served whatever the setting
    snapshots = make(writes, clock, held, stale_seconds=0.0 if published else 30.0)
    if published:
        snapshots.publish()
    _, compute = counter()
    assert snapshots.get("a", compute) == 1
    writes.count += 1
    if published:
        snapshots.publish()
    assert snapshots.get("a", compute) == 2
    assert held.jobs == []


def test_published_generation_hides_writes_until_the_cycle_ends() -> None:
    writes, clock, held = Writes(), Clock(), Held()
    snapshots = make(writes, clock, held, stale_seconds=0.0)
    _, compute = counter()
    snapshots.publish()
    assert snapshots.get("a", compute) == 1
    writes.count += 3  # a cycle's writes, the cycle not over yet
    assert snapshots.get("a", compute) == 1
    snapshots.publish()  # the cycle is over: one new generation
    assert snapshots.get("a", compute) == 2
    snapshots.publish()  # a cycle that wrote nothing changes nothing
    assert snapshots.get("a", compute) == 2


def test_age_alone_ends_an_entry() -> None:
    writes, clock, held = Writes(), Clock(), Held()
    snapshots = make(writes, clock, held)
    _, compute = counter()
    snapshots.publish()
    assert snapshots.get("a", compute) == 1
    clock.now += 10.5  # past max_age: stale, refreshed behind
    assert snapshots.get("a", compute) == 1
    held.run()
    assert snapshots.get("a", compute) == 2
    clock.now += 31.0  # past stale_seconds: computed in the request
    assert snapshots.get("a", compute) == 3
    assert held.jobs == []


def test_concurrent_requests_share_one_computation() -> None:
    writes, clock, held = Writes(), Clock(), Held()
    snapshots = make(writes, clock, held)
    started, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def slow() -> int:
        calls.append(1)
        started.set()
        assert release.wait(10)
        return 7

    results: list[int] = []
    first = threading.Thread(target=lambda: results.append(snapshots.get("a", slow)))
    first.start()
    assert started.wait(10)
    second = threading.Thread(target=lambda: results.append(snapshots.get("a", slow)))
    second.start()
    release.set()
    first.join(10)
    second.join(10)
    assert results == [7, 7]
    assert calls == [1]


def test_a_failed_computation_raises_and_the_next_read_retries() -> None:
    writes, clock, held = Writes(), Clock(), Held()
    snapshots = make(writes, clock, held)

    def broken() -> int:
        raise RuntimeError("store gone")

    with pytest.raises(RuntimeError, match="store gone"):
        snapshots.get("a", broken)
    assert snapshots.get("a", lambda: 5) == 5


def test_a_failed_refresh_keeps_the_old_value() -> None:
    writes, clock, held = Writes(), Clock(), Held()
    snapshots = make(writes, clock, held)
    snapshots.publish()
    assert snapshots.get("a", lambda: 1) == 1
    writes.count += 1
    snapshots.publish()

    def broken() -> int:
        raise RuntimeError("store gone")

    assert snapshots.get("a", broken) == 1
    held.run()  # logged, not raised
    assert snapshots.get("a", lambda: 2) == 1  # still the old one, and a new refresh queued
    held.run()
    assert snapshots.get("a", lambda: 3) == 2


def test_entries_are_bounded_least_recently_used_first() -> None:
    writes, clock, held = Writes(), Clock(), Held()
    snapshots = Snapshots(writes, max_entries=2, clock=clock, refresh=held)
    snapshots.get("a", lambda: 1)
    snapshots.get("b", lambda: 2)
    snapshots.get("a", lambda: 1)  # a used last
    snapshots.get("c", lambda: 3)  # b goes
    assert snapshots.get("b", lambda: 20) == 20
    assert snapshots.get("c", lambda: 30) == 3


def test_a_refresh_computes_at_the_generation_it_starts_in_and_skips_a_current_entry() -> None:
    writes, clock, held = Writes(), Clock(), Held()
    snapshots = make(writes, clock, held)
    calls, compute = counter()
    snapshots.publish()
    assert snapshots.get("a", compute) == 1
    writes.count += 1
    snapshots.publish()
    assert snapshots.get("a", compute) == 1  # refresh queued at this generation
    writes.count += 1
    snapshots.publish()  # another cycle ends before the refresh runs
    held.run()
    assert snapshots.get("a", compute) == 2  # current: computed at the newest generation
    assert held.jobs == [] and len(calls) == 2
    writes.count += 1
    snapshots.publish()
    assert snapshots.get("a", compute) == 2  # refresh queued
    clock.now += 31.0  # too old to serve: computed in the request
    assert snapshots.get("a", compute) == 3
    held.run()  # the queued refresh finds the entry current and computes nothing
    assert len(calls) == 3


def test_cache_only_serves_hits_and_raises_instead_of_computing() -> None:
    writes, clock, held = Writes(), Clock(), Held()
    snapshots = make(writes, clock, held)
    calls, compute = counter()
    with pytest.raises(SnapshotMiss):
        cache_only(snapshots.get, "a", compute)
    assert calls == []  # nothing computed on a miss
    assert snapshots.get("a", compute) == 1
    assert cache_only(snapshots.get, "a", compute) == 1  # a hit, served
    assert not caching_only()  # the mode ends with the call
    snapshots.publish()
    writes.count += 1
    snapshots.publish()
    assert cache_only(snapshots.get, "a", compute) == 1  # stale: served, refreshed behind
    assert len(held.jobs) == 1
    held.run()  # the refresh computes outside the mode
    assert cache_only(snapshots.get, "a", compute) == 2
    clock.now += 31.0  # too old to serve: a miss again
    with pytest.raises(SnapshotMiss):
        cache_only(snapshots.get, "a", compute)
    assert calls == [1, 1]


def test_cache_only_does_not_wait_for_another_computation() -> None:
    writes, clock, held = Writes(), Clock(), Held()
    snapshots = make(writes, clock, held)
    started, release = threading.Event(), threading.Event()

    def slow() -> int:
        started.set()
        release.wait(10)
        return 7

    worker = threading.Thread(target=lambda: snapshots.get("a", slow))
    worker.start()
    try:
        assert started.wait(10)
        with pytest.raises(SnapshotMiss):  # at once, not after the computation
            cache_only(snapshots.get, "a", slow)
    finally:
        release.set()
        worker.join(10)
    assert cache_only(snapshots.get, "a", slow) == 7


def test_an_inline_value_is_computed_in_cache_only_mode_unless_another_computes_it() -> None:
    """A value read from memory only (``inline``: the alert lists from the store's alert
    index) is computed on the read lane, once per version; another caller's computation in
    flight is not done twice."""
    writes, clock, held = Writes(), Clock(), Held()
    snapshots = make(writes, clock, held)
    calls, compute = counter()
    assert cache_only(snapshots.get, "a", compute, version=1, inline=True) == 1
    assert cache_only(snapshots.get, "a", compute, version=1, inline=True) == 1  # kept
    assert cache_only(snapshots.get, "a", compute, version=2, inline=True) == 2
    with pytest.raises(SnapshotMiss):
        cache_only(snapshots.get, "a", compute, version=3)
    assert calls == [1, 1]
    started, release = threading.Event(), threading.Event()

    def slow() -> int:
        started.set()
        release.wait(10)
        return 7

    worker = threading.Thread(target=lambda: snapshots.get("b", slow))
    worker.start()
    try:
        assert started.wait(10)
        with pytest.raises(SnapshotMiss) as miss:
            cache_only(snapshots.get, "b", slow, inline=True)
        assert miss.value.pending is not None
    finally:
        release.set()
        worker.join(10)


def test_a_report_read_every_n_seconds_stays_current_across_generations() -> None:
    writes, clock, held = Writes(), Clock(), Held()
    snapshots = make(writes, clock, held)
    snapshots.publish()
    calls, compute = counter()
    assert snapshots.get("slo", compute, every_seconds=15.0) == 1
    for _ in range(6):  # a 2-second cycle's new generations: still current
        clock.now += 2.0
        writes.count += 1
        snapshots.publish()
        assert snapshots.get("slo", compute, every_seconds=15.0) == 1
    assert held.jobs == [] and len(calls) == 1
    clock.now += 4.0  # 16 s old, and a newer generation: served once more, refreshed behind
    assert snapshots.get("slo", compute, every_seconds=15.0) == 1
    held.run()
    assert snapshots.get("slo", compute, every_seconds=15.0) == 2


def test_sized_values_are_bounded_by_bytes_least_recently_used_first() -> None:
    writes, clock, held = Writes(), Clock(), Held()
    snapshots = Snapshots(writes, max_bytes=100, clock=clock, refresh=held)

    def size(value: bytes) -> int:
        return len(value)

    snapshots.get("a", lambda: b"a" * 40, size=size)
    snapshots.get("b", lambda: b"b" * 40, size=size)
    assert snapshots.kept_bytes == 80
    snapshots.get("a", lambda: b"x", size=size)  # a used last
    snapshots.get("c", lambda: b"c" * 40, size=size)  # 120 bytes: b goes
    assert snapshots.kept_bytes == 80 and len(snapshots) == 2
    assert snapshots.get("b", lambda: b"new", size=size) == b"new"
    assert snapshots.get("c", lambda: b"", size=size) == b"c" * 40
    snapshots.clear()
    assert snapshots.kept_bytes == 0 and len(snapshots) == 0


def test_bytes_read_without_a_size_count_against_the_budget_too() -> None:
    snapshots = Snapshots(Writes(), max_bytes=100, refresh=Held())
    snapshots.get("page", lambda: b"p" * 60)  # a rendered page
    snapshots.get("doc", lambda: (b"d" * 30, '"etag"'))  # a document and its ETag
    snapshots.get("report", lambda: {"figures": b"x" * 500})  # not a serialised answer
    assert snapshots.kept_bytes == 90 and len(snapshots) == 3
    snapshots.get("other", lambda: (200, b"o" * 20))  # a page's status and body: page goes
    assert snapshots.kept_bytes == 50 and len(snapshots) == 3


def test_a_new_version_replaces_the_old_one_and_an_old_one_is_never_served() -> None:
    writes, clock, held = Writes(), Clock(), Held()
    snapshots = Snapshots(writes, clock=clock, refresh=held)
    snapshots.publish()  # a collector's cycles: stale entries would be served
    for version in range(50):  # an alert written 50 times: one entry, not 50

        def body(v: int = version) -> bytes:
            return b"a" * (v + 1)

        value = snapshots.get("alerts", body, version=version)
        assert value == b"a" * (version + 1)
    assert len(snapshots) == 1 and snapshots.kept_bytes == 50
    assert snapshots.get("alerts", lambda: b"fresh", version=49) == b"a" * 50  # current
    clock.now += 15  # stale (served for its own version): another version is computed
    assert snapshots.get("alerts", lambda: b"older", version=48) == b"older"
    assert snapshots.get("other", lambda: b"o") == b"o"  # a plain key beside it
    assert len(snapshots) == 2 and snapshots.kept_bytes == 6
    with pytest.raises(SnapshotMiss):
        cache_only(snapshots.get, "alerts", lambda: b"new", version=50)
    snapshots = Snapshots(writes, max_entries=2, refresh=held)  # eviction forgets the family
    snapshots.get("a", lambda: 1, version=1)
    snapshots.get("b", lambda: 2)
    snapshots.get("c", lambda: 3)  # a goes
    assert snapshots.get("a", lambda: 4, version=2) == 4 and len(snapshots) == 2


def test_one_value_over_the_budget_is_still_kept_alone() -> None:
    snapshots = Snapshots(Writes(), max_bytes=10, refresh=Held())
    assert snapshots.get("big", lambda: b"z" * 50, size=len) == b"z" * 50
    assert len(snapshots) == 1 and snapshots.kept_bytes == 50


def test_published_cycles_shorter_than_the_minimum_refresh_do_not_recompute() -> None:
    writes, clock, held = Writes(), Clock(), Held()
    snapshots = Snapshots(writes, min_refresh_seconds=5.0, clock=clock, refresh=held)
    calls, compute = counter()
    writes.count += 1  # without a collector: a write is seen by the next read, whatever
    assert snapshots.get("view", compute) == 1
    writes.count += 1
    assert snapshots.get("view", compute) == 2
    for _ in range(2):  # a collector's 2-second cycles: the entry current for 5 s
        clock.now += 2.0
        writes.count += 1
        snapshots.publish()
        assert snapshots.get("view", compute) == 2
    clock.now += 2.0  # 6 s old and a newer generation: served, refreshed behind
    assert snapshots.get("view", compute) == 2
    held.run()
    assert snapshots.get("view", compute) == 3 and len(calls) == 3


def test_how_often_may_depend_on_the_value() -> None:
    writes, clock, held = Writes(), Clock(), Held()
    snapshots = make(writes, clock, held)
    snapshots.publish()

    def every(value: str) -> float:
        return 60.0 if value.startswith("finished") else 0.0

    assert snapshots.get("done", lambda: "finished job", every_seconds=every) == "finished job"
    assert snapshots.get("live", lambda: "running job", every_seconds=every) == "running job"
    clock.now += 20.0
    writes.count += 1
    snapshots.publish()
    assert snapshots.get("done", lambda: "again", every_seconds=every) == "finished job"
    assert snapshots.get("live", lambda: "again", every_seconds=every) == "running job"
    held.run()  # the running job's entry was refreshed, the finished one's was current
    assert snapshots.get("live", lambda: "later", every_seconds=every) == "again"
    assert snapshots.get("done", lambda: "later", every_seconds=every) == "finished job"


def test_an_entry_current_for_minutes_is_served_stale_as_long_past_that() -> None:
    """A finished job's entry (current 60 s) is served while it refreshes for the stale window
    past its minute, not computed in the request as soon as it turns stale."""
    writes, clock, held = Writes(), Clock(), Held()
    snapshots = make(writes, clock, held)
    snapshots.publish()
    calls, compute = counter()
    assert snapshots.get("job", compute, every_seconds=60.0) == 1
    clock.now += 60.0 + 29.0
    assert snapshots.get("job", compute, every_seconds=60.0) == 1  # stale: refreshed behind
    assert len(calls) == 1 and len(held.jobs) == 1
    held.run()
    clock.now += 60.0 + 31.0  # past the window: computed in the request
    assert snapshots.get("job", compute, every_seconds=60.0) == 3


def test_an_offered_value_is_kept_unless_a_current_one_is_there() -> None:
    writes, clock, held = Writes(), Clock(), Held()
    snapshots = make(writes, clock, held)
    calls, compute = counter()
    snapshots.offer("report", 7, every_seconds=15.0)
    assert snapshots.get("report", compute, every_seconds=15.0) == 7 and calls == []
    snapshots.offer("report", 8)  # a current entry stays
    assert snapshots.get("report", compute) == 7
    writes.count += 1  # a new generation: what is offered then replaces the old entry
    clock.now += 16.0
    snapshots.offer("report", 9)
    assert snapshots.get("report", compute) == 9 and calls == []


def test_an_offer_renews_an_entry_past_half_its_time() -> None:
    """The job list offers its finished jobs' reports (current a minute) at every computation:
    an entry in the first half of its minute stays, one past it is renewed, so the reports one
    list offered together never expire together, and a page that reads one between two list
    computations is served it, never a refresh of its own."""
    writes, clock, held = Writes(), Clock(), Held()
    snapshots = make(writes, clock, held)
    snapshots.publish()
    calls, compute = counter()
    snapshots.offer("finished", 1, every_seconds=60.0)
    clock.now += 29.0
    snapshots.offer("finished", 2, every_seconds=60.0)  # in its first half: stays
    assert snapshots.get("finished", compute, every_seconds=60.0) == 1
    for step in range(3, 40):  # a list every 5 s for three minutes
        clock.now += 5.0
        writes.count += 1
        snapshots.publish()
        snapshots.offer("finished", step, every_seconds=60.0)
        assert snapshots.get("finished", compute, every_seconds=60.0) >= 2
    assert calls == [] and held.jobs == []  # never stale: nothing refreshed on its own
    # a value that lives one generation (a running job's) is still kept while current
    snapshots.offer("running", 1)
    snapshots.offer("running", 2)
    assert snapshots.get("running", compute) == 1


def test_a_value_offered_while_computing_is_as_old_as_that_computation() -> None:
    """The job list offers each job's report: written at the list's generation, so a write
    that landed while the list was computed makes the report old, as it makes the list."""
    writes, clock, held = Writes(), Clock(), Held()
    snapshots = make(writes, clock, held, stale_seconds=0.0)
    calls, compute = counter()

    def listing() -> list[int]:
        writes.count += 1  # a write commits while the list is computed
        snapshots.offer("one", 5)
        return [5]

    assert snapshots.get("list", listing) == [5]
    assert snapshots.get("one", compute) == 1 and len(calls) == 1  # old: computed again
