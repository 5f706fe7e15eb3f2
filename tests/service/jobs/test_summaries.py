"""Kept job summaries: a finished job's report from its summary equals the raw recomputation."""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcscope.analysis.jobs.report import JobReport
from hpcscope.model.access import Principal, Role
from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA, JOB_SCHEMA
from hpcscope.service.jobs import reports, summaries
from hpcscope.store import Store

NOW = datetime(2026, 11, 20, 12, 0, 0)
ADMIN = Principal(name="admin", role=Role.ADMIN)

_ratio = st.one_of(st.none(), st.floats(0.0, 1.0, allow_nan=False))


@st.composite
def finished_job(draw: st.DrawFn, job_id: str) -> tuple[dict[str, object], list[dict[str, object]]]:
    """A finished job: its scheduler record and per-GPU samples (gaps, unknowns, an Xid)."""
    gpus = draw(st.integers(1, 6))
    start = NOW - timedelta(hours=draw(st.integers(2, 48)))
    length = draw(st.integers(2, 40))
    record = {
        "job_id": job_id,
        "user": draw(st.sampled_from(["alice", "bob"])),
        "account": "vision",
        "partition": "gpu",
        "state": draw(st.sampled_from(["COMPLETED", "FAILED", "TIMEOUT", "NODE_FAIL"])),
        "exit_code": draw(st.sampled_from([0, 1])),
        "start_time": start,
        "end_time": start + timedelta(seconds=15 * length + 30),
        "gpus": gpus,
        "source": "test",
    }
    samples: list[dict[str, object]] = []
    for gpu in range(gpus):
        energy = draw(st.floats(0.0, 1e6, allow_nan=False))
        for i in range(length):
            if draw(st.booleans()) and i % 7 == 3:  # a collection gap
                continue
            energy += draw(st.floats(0.0, 5000.0, allow_nan=False))
            row: dict[str, object] = {f.name: None for f in GPU_SAMPLE_SCHEMA}
            row.update(
                ts=start + timedelta(seconds=15 * i + draw(st.integers(0, 3))),
                node=f"gpu{gpu // 2:02d}",
                gpu=gpu % 2,
                job_id=job_id,
                reported_util_ratio=draw(_ratio),
                sm_active_ratio=draw(_ratio),
                tensor_active_ratio=draw(_ratio),
                power_watts=draw(st.floats(50.0, 700.0)),
                sm_clock_hertz=1.4e9,
                energy_joules=energy,
                gpu_temperature_celsius=draw(st.floats(30.0, 90.0)),
                clock_throttle_reasons=draw(st.sampled_from([0, 0, 0x20])),
                xid_last=draw(st.sampled_from([0, 0, 0, 0, 79])),
            )
            samples.append(row)
    return record, samples


def _close(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def _assert_equal_reports(raw: JobReport, kept: JobReport) -> None:
    assert raw.source == "raw" and kept.source == "summary"
    for name in JobReport.__dataclass_fields__:
        if name in ("gpus", "source", "metrics"):
            continue
        assert _close(getattr(raw, name), getattr(kept, name)), name
    assert len(raw.gpus) == len(kept.gpus)
    for a, b in zip(raw.gpus, kept.gpus, strict=True):
        for name, value in dataclasses.asdict(a).items():
            assert _close(value, getattr(b, name)), name


def _store_jobs(
    store: Store, jobs: list[tuple[dict[str, object], list[dict[str, object]]]]
) -> None:
    store.upsert_jobs(pa.Table.from_pylist([j for j, _ in jobs], schema=JOB_SCHEMA)).result()
    rows = [s for _, samples in jobs for s in samples]
    if rows:
        store.append("gpu_samples", pa.Table.from_pylist(rows, schema=GPU_SAMPLE_SCHEMA)).result()


def _reports(store: Store, ids: list[str]) -> dict[str, JobReport]:
    found = reports.reports_for(
        store,
        ADMIN,
        job_ids=ids,
        now=NOW,
        scrape_interval_seconds=15.0,
        gpu_hour_price=2.5,
        currency="EUR",
    )
    return {r.job_id: r for r in found}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.integers(1, 3), min_size=1, max_size=3).flatmap(
        lambda sizes: st.tuples(*[finished_job(str(100 + i)) for i in range(len(sizes))])
    ),
    st.booleans(),
)
def test_a_report_from_the_summary_equals_the_raw_recomputation(
    jobs: tuple[object, ...], by_parts: bool
) -> None:
    with Store(":memory:") as store:
        typed = list(jobs)
        _store_jobs(store, typed)  # type: ignore[arg-type]
        ids = [str(100 + i) for i in range(len(typed))]
        raw = _reports(store, ids)
        # by parts: every job is "large" and summarised one node at a time
        written = summaries.summarise_finished_jobs(
            store,
            now=NOW,
            scrape_interval_seconds=15.0,
            large_job_samples=0 if by_parts else summaries.LARGE_JOB_SAMPLES,
            nodes_per_part=1,
        )
        assert written == len(ids)
        kept = _reports(store, ids)
        for job_id in ids:
            _assert_equal_reports(raw[job_id], kept[job_id])


def _one_job(store: Store, *, state: str = "COMPLETED", end: datetime | None = None) -> None:
    start = NOW - timedelta(hours=3)
    record = {
        "job_id": "42",
        "user": "alice",
        "account": "vision",
        "state": state,
        "exit_code": 0,
        "start_time": start,
        "end_time": end or start + timedelta(minutes=10),
        "gpus": 1,
        "source": "test",
    }
    samples = []
    for i in range(40):
        row: dict[str, object] = {f.name: None for f in GPU_SAMPLE_SCHEMA}
        row.update(
            ts=start + timedelta(seconds=15 * i),
            node="gpu01",
            gpu=0,
            job_id="42",
            reported_util_ratio=0.9,
            sm_active_ratio=0.7,
            energy_joules=100.0 * i,
        )
        samples.append(row)
    _store_jobs(store, [(record, samples)])


def test_a_summary_is_written_once_and_keeps_the_exit_cause() -> None:
    with Store(":memory:") as store:
        _one_job(store, state="TIMEOUT")
        assert summaries.summarise_finished_jobs(store, now=NOW, scrape_interval_seconds=15.0) == 1
        assert summaries.summarise_finished_jobs(store, now=NOW, scrape_interval_seconds=15.0) == 0
        row = store.query("SELECT * FROM job_summaries").to_pylist()
        assert len(row) == 1
        assert row[0]["exit_cause"] == "timeout"
        assert row[0]["gpus_observed"] == 1
        assert row[0]["useful_gpu_seconds"] == row[0]["observed_gpu_seconds"] * 0.7
        assert row[0]["energy_joules"] == 3900.0
        assert row[0]["phases_json"] is None and row[0]["straggler_verdict"] is None
        assert store.query("SELECT count(*) AS n FROM job_gpu_summaries").to_pylist()[0]["n"] == 1


def test_running_and_just_ended_jobs_are_not_summarised() -> None:
    with Store(":memory:") as store:
        _one_job(store, state="RUNNING")
        assert summaries.summarise_finished_jobs(store, now=NOW, scrape_interval_seconds=15.0) == 0
    with Store(":memory:") as store:  # ended 10 s ago: its last scrapes may still be landing
        _one_job(store, end=NOW - timedelta(seconds=10))
        assert summaries.summarise_finished_jobs(store, now=NOW, scrape_interval_seconds=15.0) == 0
        later = NOW + timedelta(minutes=1)
        assert (
            summaries.summarise_finished_jobs(store, now=later, scrape_interval_seconds=15.0) == 1
        )


def test_the_report_of_a_running_job_reads_raw_samples(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        _one_job(store, state="RUNNING")
        report = _reports(store, ["42"])["42"]
        assert report.source == "raw"
        assert report.to_dict()["source"] == "raw"


def test_a_large_job_summarised_node_by_node_keeps_its_cross_node_straggler() -> None:
    start = NOW - timedelta(hours=2)
    record = {
        "job_id": "77",
        "user": "alice",
        "state": "COMPLETED",
        "exit_code": 0,
        "start_time": start,
        "end_time": start + timedelta(minutes=30),
        "gpus": 4,
        "source": "test",
    }
    samples = []
    for gpu in range(4):  # gpu00: GPUs 0, 1; gpu01: GPUs 2, 3 (the straggler)
        for i in range(100):
            row: dict[str, object] = {f.name: None for f in GPU_SAMPLE_SCHEMA}
            row.update(
                ts=start + timedelta(seconds=15 * i),
                node=f"gpu{gpu // 2:02d}",
                gpu=gpu % 2,
                job_id="77",
                reported_util_ratio=0.95,
                sm_active_ratio=0.8 if gpu == 3 else 0.2,
            )
            samples.append(row)
    with Store(":memory:") as store:
        _store_jobs(store, [(record, samples)])
        raw = _reports(store, ["77"])["77"]
        assert raw.verdict == "straggler"
        summaries.summarise_finished_jobs(
            store, now=NOW, scrape_interval_seconds=15.0, large_job_samples=10, nodes_per_part=1
        )
        kept = _reports(store, ["77"])["77"]
        assert [g.verdict for g in kept.gpus] == [
            "waiting_at_barrier",
            "waiting_at_barrier",
            "waiting_at_barrier",
            "straggler",
        ]
        _assert_equal_reports(raw, kept)
