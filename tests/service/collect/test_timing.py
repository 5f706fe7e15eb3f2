"""The collector times its cycles, each source's poll and each after-cycle hook: which part
held a cycle that was late (``hpcscope_collector_phase_seconds`` on ``/metrics``)."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from hpcscope.service.collect.collector import Collector
from hpcscope.service.collect.source import FakeSource, Health, Poll
from hpcscope.service.collect.timing import CYCLE, CycleTimings, PhaseTotal, hook_phase
from hpcscope.store import Store
from tests.support.clock import FakeClock


class _Upkeep:
    def after_cycle(self) -> None:
        time.sleep(0.05)


def test_a_cycle_its_polls_and_its_hooks_are_timed(tmp_path: Path) -> None:
    async def slow(now: datetime) -> Poll:
        await asyncio.sleep(0.1)  # a spool read held up by the store, say
        return Poll(Health("slow", now, rows=1))

    def publish() -> None:
        return None

    quick = FakeSource("quick", lambda now: Poll(Health("quick", now, rows=1)))
    with Store(tmp_path / "s.duckdb") as store:
        collector = Collector(
            store,
            [quick, FakeSource("slow", slow)],
            clock=FakeClock(),
            after_cycle=[_Upkeep().after_cycle, publish],
        )
        for _ in range(2):
            asyncio.run(collector.collect_once())
        phases = collector.timings.snapshot()
    assert set(phases) == {
        CYCLE,
        "poll:quick",
        "poll:slow",
        "hook:_Upkeep.after_cycle",
        "hook:publish",
    }
    assert all(total.count == 2 for total in phases.values())
    assert 0.1 <= phases["poll:slow"].max_seconds <= phases[CYCLE].max_seconds
    assert phases["poll:quick"].max_seconds < 0.1
    assert phases["hook:_Upkeep.after_cycle"].sum_seconds >= 0.1
    # the cycle holds its polls and hooks, one after the other
    held = sum(phases[p].sum_seconds for p in phases if p != CYCLE)
    assert phases[CYCLE].sum_seconds >= held


def test_a_hook_that_raises_is_timed_and_collection_goes_on(tmp_path: Path) -> None:
    def broken() -> None:
        raise RuntimeError("a bug")

    with Store(tmp_path / "s.duckdb") as store:
        collector = Collector(store, [], clock=FakeClock(), after_cycle=[broken])
        report = asyncio.run(collector.collect_once())
    assert report.errors == ["after cycle: a bug"]
    assert collector.timings.snapshot()["hook:broken"].count == 1


def test_hook_names_say_the_class_and_method_or_the_function() -> None:
    def alert_owners() -> None:
        return None

    assert hook_phase(_Upkeep().after_cycle) == "hook:_Upkeep.after_cycle"
    assert hook_phase(alert_owners) == "hook:alert_owners"


@given(st.lists(st.tuples(st.sampled_from(["cycle", "poll:a", "hook:b"]), st.floats(0, 1e4))))
def test_totals_are_the_count_sum_and_longest_of_what_was_observed(
    observed: list[tuple[str, float]],
) -> None:
    timings = CycleTimings()
    for phase, seconds in observed:
        timings.observe(phase, seconds)
    expected: dict[str, PhaseTotal] = {}
    for phase in {p for p, _ in observed}:
        runs = [s for p, s in observed if p == phase]
        expected[phase] = PhaseTotal(len(runs), sum(runs), max(runs))
    got = timings.snapshot()
    assert set(got) == set(expected)
    for phase, total in expected.items():
        assert got[phase].count == total.count and got[phase].max_seconds == total.max_seconds
        assert abs(got[phase].sum_seconds - total.sum_seconds) <= 1e-9 * max(1.0, total.sum_seconds)
