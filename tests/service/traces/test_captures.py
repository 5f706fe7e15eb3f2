"""Collecting capture spools: attribution against the platform, incremental windows, errors.

The spool is the twin's (:mod:`hpcscope.twin.traces`: real-format Kineto traces and meta
files of an 8-rank job over two nodes, GPUs 4-7 of each, whose rank 6, gpu02 GPU 6, is slow in
its backward).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpcscope.service.traces.captures import CaptureSpool
from hpcscope.store import Store
from hpcscope.store.captures import job_captures
from hpcscope.twin.scheduler import JobState, SimJob
from hpcscope.twin.traces import TraceSpool
from hpcscope.twin.workloads import Profile

START = 1.79e9


def straggler_job(job_id: int = 5001) -> SimJob:
    job = SimJob(
        job_id, "llama", "alice", "vision", Profile.STRAGGLER, 8, 3600.0, START,
        straggler_gpu=6, spread_nodes=2,
    )  # fmt: skip
    job.state, job.start_time = JobState.RUNNING, START
    job.allocation = [(n, g) for n in ("gpu01", "gpu02") for g in range(4, 8)]
    return job


def platform(job: SimJob) -> dict[tuple[str, int | None], str]:
    return {(n, g): str(job.job_id) for n, g in job.allocation}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(tmp_path / "s.duckdb")
    yield opened
    opened.close()


def test_the_straggler_is_named_with_its_node_gpu_and_phase(tmp_path: Path, store: Store) -> None:
    job = straggler_job()
    TraceSpool(tmp_path / "spool").write_window(job, 0, at=START + 10)
    held = platform(job)
    spool = CaptureSpool(store, tmp_path / "spool", placement=lambda n, g, at: held.get((n, g)))
    cycle = spool.collect_once()
    assert (cycle.ranks_read, cycle.windows_analysed, cycle.errors) == (8, 1, [])
    (row,) = job_captures(store, "5001")
    assert row.attribution == "verified" and row.notes == ()
    assert (row.straggler_rank, row.straggler_phase) == (6, "backward")
    assert (row.straggler_node, row.straggler_gpu) == ("gpu02", 6)
    assert row.nodes == ("gpu01", "gpu02")
    assert row.delay_seconds_per_step == pytest.approx(0.020, abs=0.003)  # 40 ms vs 20 ms
    assert row.what_if_gain_seconds_per_step == pytest.approx(0.020, abs=0.003)
    payload = json.loads(row.result_json)
    assert payload["nccl_logs"] and len(payload["nccl_logs"]) == 8
    assert spool.collect_once().windows_analysed == 0  # nothing new: nothing redone


def test_claims_the_platform_does_not_confirm_are_flagged(tmp_path: Path, store: Store) -> None:
    job = straggler_job()
    TraceSpool(tmp_path / "spool").write_window(job, 0, at=START + 10)
    # the platform puts gpu02 under another job: the claim of job 5001 is not confirmed there
    held = {k: ("5001" if k[0] == "gpu01" else "6000") for k in platform(job)}
    spool = CaptureSpool(store, tmp_path / "spool", placement=lambda n, g, at: held.get((n, g)))
    spool.collect_once()
    (row,) = job_captures(store, "5001")
    assert row.attribution == "mismatch"
    assert any("the platform maps it to job 6000" in note for note in row.notes)
    unplaced = CaptureSpool(store, tmp_path / "spool", placement=lambda n, g, at: None)
    unplaced.collect_once()
    (row,) = job_captures(store, "5001")
    assert row.attribution == "unverified"
    assert row.straggler_node == "gpu02"  # the claim, shown as such


def test_a_window_waits_for_its_ranks_then_is_redone_when_a_late_one_comes(
    tmp_path: Path, store: Store
) -> None:
    job = straggler_job()
    TraceSpool(tmp_path / "all").write_window(job, 0, at=START + 10)
    spool_dir = tmp_path / "spool" / "5001"
    spool_dir.mkdir(parents=True)
    late = "rank-00003.window-00000000"
    for path in (tmp_path / "all" / "5001").iterdir():
        if not path.name.startswith(late):
            shutil.copy(path, spool_dir / path.name)
    now = [100.0]
    held = platform(job)
    spool = CaptureSpool(
        store, tmp_path / "spool", grace_seconds=30, clock=lambda: now[0],
        placement=lambda n, g, at: held.get((n, g)),
    )  # fmt: skip
    assert spool.collect_once().windows_analysed == 0  # 7 of 8 ranks, within the grace time
    now[0] += 31
    assert spool.collect_once().windows_analysed == 1
    (row,) = job_captures(store, "5001")
    assert row.ranks == 7 and any("without rank(s) 3" in n for n in row.notes)
    for path in (tmp_path / "all" / "5001").glob(f"{late}*"):
        shutil.copy(path, spool_dir / path.name)
    assert spool.collect_once().windows_analysed == 1
    (row,) = job_captures(store, "5001")
    assert row.ranks == 8 and row.straggler_rank == 6


def test_a_bad_meta_or_trace_is_reported_and_the_rest_goes_on(tmp_path: Path, store: Store) -> None:
    job = straggler_job()
    TraceSpool(tmp_path / "spool").write_window(job, 0, at=START + 10)
    directory = tmp_path / "spool" / "5001"
    (directory / "rank-00009.window-00000000.meta.json").write_text("{not json")
    trace = directory / "rank-00002.window-00000000.pt.trace.json"
    trace.write_text(trace.read_text()[:5000])  # cut mid-event: a partial trace, kept
    held = platform(job)
    spool = CaptureSpool(
        store, tmp_path / "spool", grace_seconds=0.0,
        placement=lambda n, g, at: held.get((n, g)),
    )  # fmt: skip
    cycle = spool.collect_once()
    assert any("rank-00009" in e and "not a capture meta file" in e for e in cycle.errors)
    (row,) = job_captures(store, "5001")
    assert row.straggler_rank == 6


def test_an_absent_root_is_no_error(tmp_path: Path, store: Store) -> None:
    assert CaptureSpool(store, tmp_path / "absent").collect_once().ranks_read == 0
