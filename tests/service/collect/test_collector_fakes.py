"""The collector over fake sources: it polls what it is given, in order, appends what they
return, keeps each one's health, and goes on when one of them fails or raises."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from hpcscope.model.schemas import GAP_SCHEMA, SCRAPE_SCHEMA
from hpcscope.service.collect.collector import Collector, CollectorConfig
from hpcscope.service.collect.source import Batch, FakeSource, Health, Poll, Source
from hpcscope.store import Store
from tests.support.clock import EPOCH, FakeClock


def _scrape_row(ts: datetime, target: str, *, ok: bool) -> pa.Table:
    row = {
        "ts": ts, "target": target, "exporter": "fake", "node": None, "ok": ok,
        "duration_seconds": 0.01, "samples": 3 if ok else 0, "rejected_lines": 0,
        "error": None if ok else "down",
    }  # fmt: skip
    return pa.Table.from_pylist([row], schema=SCRAPE_SCHEMA)


def _count(store: Store, table: str) -> int:
    rows: list[dict[str, int]] = store.query(f"SELECT count(*) AS n FROM {table}").to_pylist()
    return rows[0]["n"]


def test_sources_are_polled_in_order_and_their_batches_appended(tmp_path: Path) -> None:
    order: list[str] = []

    def answer(name: str, *, ok: bool) -> FakeSource:
        def handler(now: datetime) -> Poll:
            order.append(name)
            health = Health(name, now, targets=1, ok=int(ok), rows=3 if ok else 0,
                            errors=() if ok else (f"{name}: down",))  # fmt: skip
            return Poll(health, (Batch("scrapes", _scrape_row(now, name, ok=ok)),))

        return FakeSource(name, handler)

    first, second = answer("first", ok=True), answer("second", ok=False)
    clock = FakeClock()
    with Store(tmp_path / "s.duckdb") as store:
        collector = Collector(store, [first, second], clock=clock)
        report = asyncio.run(collector.collect_once())
        store.flush()
        assert order == ["first", "second"]
        assert (report.targets, report.ok, report.rows_written) == (2, 1, 3)
        assert report.errors == ["second: down"]
        assert [h.source for h in report.polls] == ["first", "second"]
        assert _count(store, "scrapes") == 2
        states = {state.name: state for state in collector.source_states()}
        assert states["first"].last_collected_ts == EPOCH and states["first"].last_error is None
        assert states["second"].last_error == "second: down"
        assert states["second"].last_collected_ts is None and states["second"].polls == 1


def test_a_source_that_raises_is_a_failed_poll_and_the_others_go_on(tmp_path: Path) -> None:
    def broken(now: datetime) -> Poll:
        raise RuntimeError("a bug")

    fine = FakeSource("fine", lambda now: Poll(Health("fine", now, rows=1)))
    with Store(tmp_path / "s.duckdb") as store:
        collector = Collector(store, [FakeSource("broken", broken), fine], clock=FakeClock())
        report = asyncio.run(collector.collect_once())
        assert report.errors == ["broken: a bug"]
        assert report.of("fine").rows == 1 and fine.polled_at == [EPOCH]
        broken_state, fine_state = collector.source_states()
        assert broken_state.last_error == "broken: a bug" and fine_state.last_ok_ts == EPOCH


def test_a_stage_is_polled_concurrently(tmp_path: Path) -> None:
    both_waiting = asyncio.Event()
    waiting: list[str] = []

    def waits(name: str) -> FakeSource:
        async def handler(now: datetime) -> Poll:
            waiting.append(name)
            if len(waiting) == 2:
                both_waiting.set()
            await asyncio.wait_for(both_waiting.wait(), timeout=5)  # alone it would time out
            return Poll(Health(name, now))

        return FakeSource(name, handler)

    with Store(tmp_path / "s.duckdb") as store:
        collector = Collector(store, [[waits("a"), waits("b")]], clock=FakeClock())
        assert asyncio.run(collector.collect_once()).errors == []
        assert sorted(waiting) == ["a", "b"]


def test_sources_not_due_keep_their_last_poll(tmp_path: Path) -> None:
    def every_other(now: datetime) -> Poll:
        due = (now - EPOCH).total_seconds() % 30 == 0
        return Poll(Health("slow", now, polled=due, rows=5 if due else 0))

    clock = FakeClock()
    source = FakeSource("slow", every_other)
    with Store(tmp_path / "s.duckdb") as store:
        collector = Collector(
            store, [source], config=CollectorConfig(scrape_interval_seconds=15), clock=clock
        )
        asyncio.run(collector.run(cycles=3))  # at 0, 15, 30 s
        (state,) = collector.source_states()
        assert (state.polls, state.rows) == (2, 10)
        assert state.last_poll_ts == EPOCH + timedelta(seconds=30)
        assert source.settled == 1 and source.closed  # run() settles and closes at its end


def test_settle_runs_unless_the_cycle_overlaps_and_finish_appends_once(tmp_path: Path) -> None:
    gap = {"target": "t", "node": None, "start_ts": EPOCH, "end_ts": EPOCH, "reason": "down"}
    closing = Batch("collection_gaps", pa.Table.from_pylist([gap], schema=GAP_SCHEMA))
    source = FakeSource("s", lambda now: Poll(Health("s", now)), finish_batches=[closing])
    with Store(tmp_path / "s.duckdb") as store:
        collector = Collector(store, [source], clock=FakeClock())
        asyncio.run(collector.collect_once(overlap=True))
        assert source.settled == 0
        asyncio.run(collector.collect_once())
        assert source.settled == 1
        collector.close_open_gaps()
        collector.close_open_gaps()  # once only
        store.flush()
        assert _count(store, "collection_gaps") == 1


def test_the_fake_is_a_source_and_names_must_be_unique(tmp_path: Path) -> None:
    fake = FakeSource("same", lambda now: Poll(Health("same", now)))
    assert isinstance(fake, Source)
    with Store(tmp_path / "s.duckdb") as store, pytest.raises(ValueError, match="unique"):
        Collector(store, [fake, FakeSource("same", fake.handler)])
