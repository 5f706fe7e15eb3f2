from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.jobs.efficiency import (
    GpuVerdict,
    classify_gpus,
    gpu_summary,
    with_time_weights,
)
from hpcscope.analysis.jobs.report import job_reports
from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA

T0 = datetime(2026, 11, 29, 12, 0, 0)


def samples(rows: list[dict[str, object]]) -> pl.DataFrame:
    """Rows with the stored schema; unspecified metrics are null."""
    full = [{f.name: row.get(f.name) for f in GPU_SAMPLE_SCHEMA} for row in rows]
    empty = pl.from_arrow(GPU_SAMPLE_SCHEMA.empty_table())
    assert isinstance(empty, pl.DataFrame)
    return pl.from_dicts(full, schema=empty.schema)


def series(
    job: str | None,
    gpu: int,
    n: int,
    *,
    util: float,
    sm: float,
    step: float = 2.0,
    node: str = "gpu01",
    throttle: int = 0,
    xid: int = 0,
    start: int = 0,
    temperature: float = 60.0,
) -> list[dict[str, object]]:
    return [
        {
            "ts": T0 + timedelta(seconds=start + i * step),
            "node": node,
            "gpu": gpu,
            "job_id": job,
            "reported_util_ratio": util,
            "sm_active_ratio": sm,
            "tensor_active_ratio": sm * 0.5,
            "clock_throttle_reasons": throttle,
            "xid_last": xid,
            "gpu_temperature_celsius": temperature,
            "sm_clock_hertz": 1.98e9,
            "energy_joules": 1000.0 + i * 2 * 400,
        }
        for i in range(n)
    ]


def test_time_weights_cap_gaps_and_keep_the_last_sample() -> None:
    rows = series("1", 0, 3, util=1, sm=1) + series("1", 0, 2, util=1, sm=1, start=100)
    weighted = with_time_weights(samples(rows), max_interval_seconds=6)
    assert weighted["dt_seconds"].to_list() == [2.0, 2.0, 6.0, 2.0, 2.0]


def test_unknown_dcp_values_are_not_zero() -> None:
    rows = series("1", 0, 10, util=0.9, sm=0.8)
    for row in rows[5:]:
        row["sm_active_ratio"] = None  # profiling unit handed to a user: unknown
    summary = gpu_summary(samples(rows), max_interval_seconds=6)
    assert summary["sm_active_ratio"][0] == pytest.approx(0.8)
    assert summary["reported_util_ratio"][0] == pytest.approx(0.9)


def test_data_starved_job_reads_87_reported_19_real() -> None:
    rows = [r for gpu in range(4) for r in series("7", gpu, 30, util=0.87, sm=0.19)]
    summary = gpu_summary(samples(rows), max_interval_seconds=6)
    assert set(summary["verdict"]) == {GpuVerdict.BUSY_NOT_COMPUTING.value}
    [report] = job_reports(
        summary,
        pl.DataFrame(schema={"job_id": pl.String}),
        now=T0,
        gpu_hour_price=2.5,
        currency="USD",
    )
    assert report.reported_util_ratio == pytest.approx(0.87)
    assert report.sm_active_ratio == pytest.approx(0.19)
    assert report.verdict == "busy_not_computing"
    assert "87 % reported" in report.explanation and "19 % real" in report.explanation


def test_straggler_is_the_gpu_that_looks_best() -> None:
    rows = [r for gpu in range(8) if gpu != 2 for r in series("9", gpu, 20, util=1.0, sm=0.61)]
    rows += series("9", 2, 20, util=1.0, sm=0.85, throttle=0x40 | 0x20 | 0x8, temperature=88.0)
    summary = gpu_summary(samples(rows), max_interval_seconds=6)
    verdicts = dict(zip(summary["gpu"].to_list(), summary["verdict"].to_list(), strict=True))
    assert verdicts[2] == GpuVerdict.STRAGGLER.value
    assert {v for g, v in verdicts.items() if g != 2} == {GpuVerdict.WAITING_AT_BARRIER.value}
    [report] = job_reports(
        summary,
        pl.DataFrame(schema={"job_id": pl.String}),
        now=T0,
        gpu_hour_price=2.5,
        currency="USD",
    )
    assert report.verdict == "straggler"
    assert "gpu01 GPU 2" in report.explanation and "thermally throttled" in report.explanation


def test_two_gpu_straggler_uses_the_other_gpu_as_peer() -> None:
    rows = series("3", 0, 10, util=1.0, sm=0.85) + series("3", 1, 10, util=1.0, sm=0.6)
    summary = gpu_summary(samples(rows), max_interval_seconds=6).sort("gpu")
    assert summary["verdict"].to_list() == ["straggler", "waiting_at_barrier"]


def test_idle_xid_and_healthy() -> None:
    faulting = series("2", 1, 5, util=0.95, sm=0.8) + series(
        "2", 1, 5, util=0.95, sm=0.8, xid=79, start=10
    )
    rows = series("1", 0, 10, util=0.0, sm=0.0) + faulting + series("3", 2, 10, util=0.98, sm=0.82)
    summary = gpu_summary(samples(rows), max_interval_seconds=6)
    verdicts = dict(zip(summary["job_id"].to_list(), summary["verdict"].to_list(), strict=True))
    assert verdicts == {"1": "idle", "2": "xid_error", "3": "healthy"}


def test_useful_and_allocated_gpu_hours_and_cost() -> None:
    rows = series("5", 0, 1801, util=1.0, sm=0.5)  # one hour at 2 s
    summary = gpu_summary(samples(rows), max_interval_seconds=6)
    jobs = pl.DataFrame(
        {
            "job_id": ["5"],
            "gpus": [2],
            "state": ["COMPLETED"],
            "start_time": [T0],
            "end_time": [T0 + timedelta(hours=1)],
        }
    )
    [report] = job_reports(
        summary, jobs, now=T0 + timedelta(hours=5), gpu_hour_price=3.0, currency="EUR"
    )
    assert report.allocated_gpu_hours == pytest.approx(2.0)
    assert report.observed_gpu_hours == pytest.approx(1.0, rel=1e-3)
    assert report.useful_gpu_hours == pytest.approx(0.5, rel=1e-3)
    assert report.coverage_ratio == pytest.approx(0.5, rel=1e-3)
    assert report.cost_allocated == pytest.approx(6.0)
    assert report.cost_lost == pytest.approx((2.0 - 0.5) * 3.0, rel=1e-3)
    assert report.energy_joules == pytest.approx(1800 * 800)


@settings(max_examples=50, deadline=None)
@given(st.permutations(list(range(8))), st.floats(0.3, 0.7), st.integers(0, 7))
def test_verdicts_do_not_depend_on_gpu_order(order: list[int], peer_sm: float, slow: int) -> None:
    rows = []
    for position, gpu in enumerate(order):
        sm = 0.95 if gpu == slow else peer_sm
        rows += series("1", gpu, 5, util=1.0, sm=sm, start=position)
    summary = gpu_summary(samples(rows), max_interval_seconds=6)
    stragglers = summary.filter(pl.col("verdict") == "straggler")["gpu"].to_list()
    expected = [slow] if peer_sm * 1.2 < 0.95 and 0.95 - peer_sm >= 0.1 else []
    assert stragglers == expected


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=40))
def test_weighted_means_stay_within_the_sample_range(values: list[tuple[float, float]]) -> None:
    rows = [
        {
            "ts": T0 + timedelta(seconds=2 * i),
            "node": "n",
            "gpu": 0,
            "job_id": "1",
            "reported_util_ratio": u,
            "sm_active_ratio": s,
        }
        for i, (u, s) in enumerate(values)
    ]
    summary = gpu_summary(samples(rows), max_interval_seconds=6)
    util = summary["reported_util_ratio"][0]
    assert min(u for u, _ in values) - 1e-9 <= util <= max(u for u, _ in values) + 1e-9
    assert summary["useful_seconds"][0] <= summary["observed_seconds"][0] + 1e-9


def test_classify_handles_gpus_without_a_job() -> None:
    rows = series(None, 0, 5, util=0.9, sm=0.9)
    summary = classify_gpus(gpu_summary(samples(rows), max_interval_seconds=6))
    assert summary["verdict"].to_list() == ["healthy"]


def test_a_stale_xid_from_a_previous_job_is_not_this_jobs() -> None:
    # DCGM keeps the last Xid until the GPU is reset: a job that starts on such a GPU
    # sees the value from its first sample on, and it is not the job's fault
    rows = series("4", 0, 10, util=0.97, sm=0.8, xid=48)
    summary = gpu_summary(samples(rows), max_interval_seconds=6)
    assert summary["xid"].to_list() == [None]
    assert summary["verdict"].to_list() == ["healthy"]


_ratio = st.one_of(st.none(), st.sampled_from([0.0, 0.2, 0.5]), st.floats(0.0, 1.0))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([None, "1", "2", "3"]), _ratio, _ratio), min_size=0, max_size=30
    )
)
def test_peer_medians_are_the_median_of_the_other_gpus_of_the_job(
    rows: list[tuple[str | None, float | None, float | None]],
) -> None:
    frame = pl.DataFrame(
        [
            {"job_id": j, "node": f"n{i}", "gpu": 0, "sm_active_ratio": s, "reported_util_ratio": u}
            for i, (j, s, u) in enumerate(rows)
        ],
        schema={
            "job_id": pl.String,
            "node": pl.String,
            "gpu": pl.Int16,
            "sm_active_ratio": pl.Float64,
            "reported_util_ratio": pl.Float64,
        },
    ).with_columns(pl.lit(None, dtype=pl.Int64).alias("xid"))
    got = classify_gpus(frame)["peer_sm_active_ratio"].to_list()
    for i, (job, _, _) in enumerate(rows):
        others = [s for k, (j, s, _) in enumerate(rows) if j == job and k != i]
        expected = pl.Series(others, dtype=pl.Float64).median() if job is not None else None
        assert got[i] == expected, (i, rows)
