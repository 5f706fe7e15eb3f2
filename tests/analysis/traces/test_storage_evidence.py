"""Storage evidence from Lustre job_stats: the straggler's node against its peers'."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.traces.storage_evidence import (
    LATENCY_MARGIN_SECONDS,
    bracket,
    entry_increases,
    job_throughput,
    node_storage,
    storage_evidence,
)

T0 = datetime(2026, 11, 29, 12, 0, 0)
BEFORE = T0 - timedelta(hours=1)  # entries that began before the analysed reads
SCHEMA: dict[str, Any] = {
    "ts": pl.Datetime("us"),
    "server": pl.String,
    "target": pl.String,
    "component": pl.String,
    "job_id_raw": pl.String,
    "job_id": pl.String,
    "host": pl.String,
    "operation": pl.String,
    "unit": pl.String,
    "samples": pl.Float64,
    "sum_value": pl.Float64,
    "min_value": pl.Float64,
    "max_value": pl.Float64,
    "start_ts": pl.Datetime("us"),
}
RANKS = {0: "gpu01", 1: "gpu01", 2: "gpu02", 3: "gpu02"}


def _op(
    host: str,
    operation: str,
    values: list[tuple[float, float | None]],
    *,
    job: str = "41231",
    target: str = "scratch-OST0000",
    unit: str | None = None,
    start: list[datetime | None] | datetime | None = None,
    step_seconds: float = 10.0,
) -> list[dict[str, Any]]:
    """One entry's operation read every ``step_seconds``: (samples, sum) per read; ``start``
    None: no ``start_time`` (pre-2.14), the first read is a baseline."""
    component = "mdt" if "MDT" in target else "ost"
    starts = start if isinstance(start, list) else [start] * len(values)
    return [
        {
            "ts": T0 + timedelta(seconds=step_seconds * i),
            "server": "mds1" if component == "mdt" else "oss1",
            "target": target,
            "component": component,
            "job_id_raw": f"{job}:10042:{host}",
            "job_id": job,
            "host": host,
            "operation": operation,
            "unit": unit or ("bytes" if operation.endswith("_bytes") else "usecs"),
            "samples": samples,
            "sum_value": total,
            "min_value": None,
            "max_value": None,
            "start_ts": starts[i],
        }
        for i, (samples, total) in enumerate(values)
    ]


def _reads(
    host: str, ops: list[float], latency_usecs: float, rpc_bytes: float = 2**20
) -> list[dict[str, Any]]:
    """Cumulative ``read`` and ``read_bytes`` of one entry with a fixed service time."""
    return _op(host, "read", [(n, n * latency_usecs) for n in ops]) + _op(
        host, "read_bytes", [(n, n * rpc_bytes) for n in ops]
    )


def _frame(*parts: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame([row for part in parts for row in part], schema=SCHEMA)


def test_slow_reads_on_the_stragglers_node_support_a_storage_cause() -> None:
    storage = node_storage(
        _frame(_reads("gpu01", [0, 1000, 2000], 900), _reads("gpu02", [0, 400, 800], 24_000))
    )
    slow = storage["gpu02"]
    assert slow.read_ops == 800 and slow.read_wait_seconds == pytest.approx(800 * 0.024)
    assert slow.mean_read_latency_seconds == pytest.approx(0.024)
    assert slow.read_bytes == 800 * 2**20
    # read and read_bytes are two operations of one entry (server, target, job id)
    assert slow.span_seconds == 20 and slow.entries == 1 and slow.reads == 3
    [item] = storage_evidence([3], RANKS, storage)[3]
    assert item.kind == "data" and item.supports and item.figures["source"] == "lustre"
    assert "24.00 ms per read RPC on gpu02 against 0.90 ms" in item.summary
    assert "MB/s per rank" in item.summary
    assert item.figures["mean_read_latency_seconds"] == pytest.approx(0.024)
    assert item.figures["peers_mean_read_latency_seconds"] == pytest.approx(0.0009)


def test_reads_as_fast_as_the_peers_rule_storage_out() -> None:
    storage = node_storage(
        _frame(_reads("gpu01", [0, 1000, 2000], 900), _reads("gpu02", [0, 900, 1900], 1100))
    )
    [item] = storage_evidence([2], RANKS, storage, data_phase_ranks=[2])[2]
    assert not item.supports
    assert item.summary.startswith("Lustre is not it: 1.10 ms per read RPC on gpu02")
    assert "against 0.90 ms" in item.summary


def test_twice_the_peers_latency_is_not_enough_below_the_margin() -> None:
    # 0.4 ms against 0.15 ms is 2.7x, but 0.25 ms more per read is nothing a loader notices
    storage = node_storage(_frame(_reads("gpu01", [0, 100], 150), _reads("gpu02", [0, 100], 400)))
    [item] = storage_evidence([3], RANKS, storage)[3]
    assert not item.supports and LATENCY_MARGIN_SECONDS == 1e-3


def test_less_throughput_supports_storage_only_when_data_load_is_the_slow_phase() -> None:
    # same latency, a quarter of the bytes per rank
    storage = node_storage(
        _frame(_reads("gpu01", [0, 4000], 1000), _reads("gpu02", [0, 1000], 1000))
    )
    [starved] = storage_evidence([3], RANKS, storage, data_phase_ranks={3})[3]
    assert starved.supports
    assert "gpu02 read 52.4 MB/s per rank against 209.7 MB/s" in starved.summary
    [other] = storage_evidence([3], RANKS, storage)[3]
    assert not other.supports


def test_one_node_cannot_be_compared_but_gives_its_latency() -> None:
    storage = node_storage(_frame(_reads("gpu01", [0, 50, 100], 3000)))
    [item] = storage_evidence([1], {0: "gpu01", 1: "gpu01"}, storage)[1]
    assert not item.supports and "every rank ran on gpu01" in item.summary
    assert "3.00 ms on average (100 read RPCs, 0.10 GB)" in item.summary
    assert item.figures["mean_read_latency_seconds"] == pytest.approx(0.003)
    # peers whose nodes have no rows: no comparison either
    [alone] = storage_evidence([3], RANKS, node_storage(_frame(_reads("gpu02", [0, 5], 900))))[3]
    assert not alone.supports and "none of its peers' 1 node(s)" in alone.summary


def test_nothing_is_said_without_rows_for_the_stragglers_node() -> None:
    storage = node_storage(_frame(_reads("gpu01", [0, 10], 900)))
    assert storage_evidence([3], RANKS, storage) == {}
    assert storage_evidence([9], RANKS, storage) == {}  # a rank that could not be placed
    assert node_storage(_frame()) == {}


def test_resets_restart_from_zero_and_metadata_is_counted_apart() -> None:
    rows = _frame(
        # samples go down: the server restarted, the increase is the new value
        _op("gpu02", "read", [(100, 1e5), (300, 3e5), (50, 5e4), (90, 9e4)]),
        # start_ts changes with a higher count: the entry was dropped and recreated
        _op(
            "gpu02",
            "read",
            [(10, 1e4), (20, 2e4), (25, 2.5e4)],
            target="scratch-OST0001",
            start=[BEFORE, BEFORE, T0 + timedelta(seconds=15)],
        ),
        _op("gpu02", "open", [(5, 500.0), (9, 900.0)], target="scratch-MDT0000"),
        _op("gpu02", "getattr", [(1, 60.0), (4, 240.0)], target="scratch-MDT0000"),
        _op("gpu02", "read", [(0, 0.0), (7, 700.0)], target="scratch-MDT0000"),  # Data-on-MDT
    )
    increases = entry_increases(rows)
    assert increases["reset"].sum() == 2
    storage = node_storage(rows)["gpu02"]
    # OST0000 has no start_ts: its first read is a baseline; OST0001's began at BEFORE and
    # counts from zero
    assert storage.read_ops == (200 + 50 + 40) + (10 + 10 + 25) + 7
    assert storage.read_wait_seconds == pytest.approx((290e3 + 45e3 + 700) / 1e6)
    assert storage.metadata_ops == 4 + 3 and storage.resets == 2


def test_pre_2_14_counts_without_sums_give_no_latency() -> None:
    rows = _frame(_op("gpu02", "read", [(10, None), (30, None)], unit="reqs"))
    storage = node_storage(rows)["gpu02"]
    assert storage.read_ops == 20 and storage.read_wait_seconds is None
    assert storage.mean_read_latency_seconds is None


def test_only_the_snapshots_that_bracket_the_window_count() -> None:
    # snapshots every 10 s; the window is 15-25 s: those at 10 and 30 s bracket it
    rows = _frame(
        _op("gpu02", "read", [(0, 0), (500, 5e5), (510, 5.1e5), (520, 5.2e5), (9e3, 9e6)])
    )
    window = (T0 + timedelta(seconds=15), T0 + timedelta(seconds=25))
    assert bracket(rows, *window)["samples"].to_list() == [500, 510, 520]
    assert node_storage(rows, window=window)["gpu02"].read_ops == 20
    inside = (T0 + timedelta(seconds=21), T0 + timedelta(seconds=22))
    assert bracket(rows, *inside)["samples"].to_list() == [510, 520]
    # an entry that began inside the window counts from zero at its start
    began = T0 - timedelta(seconds=5)
    late = _frame(_op("gpu02", "read", [(40, 4e4), (70, 7e4)], start=began))
    counted = node_storage(late, window=(T0 - timedelta(seconds=30), T0 + timedelta(seconds=9)))[
        "gpu02"
    ]
    assert counted.read_ops == 70 and counted.span_seconds == 15  # from its start to 10 s
    # an entry that began before the window: its first snapshot is the baseline
    early = node_storage(late, window=(T0 - timedelta(seconds=1), T0 + timedelta(seconds=9)))[
        "gpu02"
    ]
    assert early.read_ops == 30 and early.span_seconds == 10
    # rows without a host (a job id that is not %j:%u:%H) are not placed
    anonymous = _frame(_reads("gpu02", [0, 5], 900)).with_columns(pl.lit(None).alias("host"))
    assert node_storage(anonymous) == {}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 500), st.sampled_from(["none", "drop", "restart"]))))
def test_the_increase_is_every_step_up_with_resets_restarting_from_zero(
    steps: list[tuple[int, str]],
) -> None:
    """Snapshots built from increments; before some, the counters restarted from 0 (a server
    restart, seen as a value below the previous one, or the entry recreated, seen as a new
    ``start_ts``) and then counted ``step``: the host's increase is the sum of what was
    counted, in operations and in microseconds."""
    values: list[tuple[float, float | None]] = [(0.0, 0.0)]
    starts: list[datetime | None] = [BEFORE]
    expected = 0
    for step, reset in steps:
        samples = values[-1][0]
        if reset == "drop" and step < samples:
            values.append((float(step), 7.0 * step))
            starts.append(starts[-1])
        elif reset == "restart":
            values.append((float(step), 7.0 * step))
            starts.append(T0 + timedelta(seconds=len(starts)))
        else:
            values.append((samples + step, 7.0 * (samples + step)))
            starts.append(starts[-1])
        expected += step
    storage = node_storage(_frame(_op("gpu02", "read", values, start=starts)))
    assert storage["gpu02"].read_ops == expected
    assert storage["gpu02"].read_wait_seconds == 7.0 * expected / 1e6


def test_job_throughput_sums_every_entry_of_the_job_over_the_window() -> None:
    # job 41231 reads on two client hosts; job 41232 writes; an entry of no Slurm job is left out
    read_a = _op("gpu01", "read_bytes", [(0, 0), (10, 1e9), (20, 2e9), (30, 3e9)], start=BEFORE)
    read_b = _op("gpu02", "read_bytes", [(0, 0), (5, 5e8), (10, 1e9), (15, 1.5e9)], start=BEFORE)
    writes = _op(
        "gpu03", "write_bytes", [(0, 0), (1, 4e8), (2, 8e8), (3, 1.2e9)], job="41232", start=BEFORE
    )
    other = pl.DataFrame(
        _op("login1", "read_bytes", [(0, 0), (9, 9e9)], job="x", start=BEFORE), schema=SCHEMA
    ).with_columns(pl.lit(None, dtype=pl.String).alias("job_id"))
    rows = pl.concat([_frame(read_a, read_b, writes), other])
    rates = job_throughput(rows, T0, T0 + timedelta(seconds=30))
    assert set(rates) == {"41231", "41232"}
    assert rates["41231"] == pytest.approx((4.5e9 / 30, 0.0))
    assert rates["41232"] == pytest.approx((0.0, 1.2e9 / 30))
    # only the snapshots that bracket the window count: 10-20 s (those at 10 and 20 s)
    inside = job_throughput(rows, T0 + timedelta(seconds=10), T0 + timedelta(seconds=20))
    assert inside["41231"] == pytest.approx((1.5e9 / 10, 0.0))
    assert job_throughput(rows.clear(), T0, T0 + timedelta(seconds=30)) == {}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**9), st.booleans()), min_size=1, max_size=30))
def test_job_throughput_is_what_was_read_over_the_span(steps: list[tuple[int, bool]]) -> None:
    """Snapshots every 10 s built from increments, some after a server restart (the counter
    below its previous value): the rate is the sum of the increments over the span."""
    values: list[tuple[float, float | None]] = [(0.0, 0.0)]
    for step, restarted in steps:
        last = values[-1][1] or 0.0
        if restarted and 0 < step < last:
            values.append((values[-1][0] + 1, float(step)))
        else:
            values.append((values[-1][0] + 1, last + step))
    rows = _frame(_op("gpu01", "read_bytes", values, start=BEFORE))
    span = 10.0 * len(steps)
    rates = job_throughput(rows, T0, T0 + timedelta(seconds=span))
    total = sum(step for step, _ in steps)
    if total == 0:
        assert rates.get("41231", (0.0, 0.0)) == (0.0, 0.0)
    else:
        assert rates["41231"][0] == pytest.approx(total / span)
