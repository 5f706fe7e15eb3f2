"""The twin's month: deterministic, on the grid, every shape of job, all over before the end."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

from hpcscope.model.topology import load_topology
from hpcscope.service.settings import bundled_topology
from hpcscope.twin.history import FIRST_JOB_ID, HistoryChunk, simulate_history

END = 1_796_000_000.0  # 2026-11-30 (a Monday), 04:53 UTC
STEP = 600.0


def _month(tmp_path: Path, days: float = 6.0) -> list[HistoryChunk]:
    topology = load_topology(bundled_topology())
    return list(simulate_history(topology, tmp_path, end=END, days=days, step_seconds=STEP))


def _jobs(chunks: list[HistoryChunk]) -> dict[int, dict[str, Any]]:
    """The last state slurmrestd reported of every job."""
    jobs: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for job in json.loads(chunk.slurmrestd)["jobs"]:
            jobs[int(job["job_id"])] = job
    return jobs


def test_the_month_is_on_the_grid_and_over_before_the_end(tmp_path: Path) -> None:
    chunks = _month(tmp_path)
    times = sorted({ts for c in chunks for ts, _, _ in c.pages})
    assert all(b - a == STEP for a, b in itertools.pairwise(times))
    assert times[-1] < END - 1800  # settled before the live twin starts
    assert len(times) == 6 * 86400 / STEP
    assert {node for c in chunks for _, node, _ in c.pages} == {"gpu01", "gpu02"}
    jobs = _jobs(chunks)
    assert min(jobs) == FIRST_JOB_ID
    for job in jobs.values():
        state = job["job_state"][0]
        assert state in {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED"}, job
        end = job["end_time"]["number"]
        assert end <= times[-1] + STEP
        start = job["start_time"]
        if start["set"] and state in ("COMPLETED", "TIMEOUT"):
            assert (end - start["number"]) % STEP == 0  # samples of one step add up


def test_every_shape_of_job_and_four_accounts(tmp_path: Path) -> None:
    jobs = _jobs(_month(tmp_path))
    states = Counter(j["job_state"][0] for j in jobs.values())
    assert {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED"} <= set(states)
    assert {j["account"] for j in jobs.values()} == {"vision", "nlp", "speech", "robotics"}
    names = " ".join(str(j["name"]) for j in jobs.values())
    for kind in ("jupyter", "bert", "llama-7b"):  # idle, data-starved, straggler
        assert kind in names
    waits = [
        j["start_time"]["number"] - j["submit_time"]["number"]
        for j in jobs.values()
        if j["start_time"]["set"]
    ]
    assert max(waits) >= 3600  # a busy afternoon makes a queue


def test_an_xid_is_seen_by_one_scrape_of_its_job(tmp_path: Path) -> None:
    chunks = _month(tmp_path)
    marker = "DCGM_EXP_XID_ERRORS_COUNT{"
    faulted = [
        (ts, node, page)
        for c in chunks
        for ts, node, page in c.pages
        if marker in page and 'hpc_job="' in page.split(marker)[1]
    ]
    assert faulted, "no scrape saw a job's Xid"


def test_the_same_seed_gives_the_same_month(tmp_path: Path) -> None:
    first = _month(tmp_path / "a", days=2)
    second = _month(tmp_path / "b", days=2)
    assert [c.slurmrestd for c in first] == [c.slurmrestd for c in second]
    assert [c.pages[-1] for c in first] == [c.pages[-1] for c in second]


def test_incidents_are_played_in_running_jobs_in_real_lines(tmp_path: Path) -> None:
    chunks = _month(tmp_path, days=10)
    played = [c for c in chunks if c.incident is not None]
    assert len(played) >= 5
    for chunk in played:
        assert chunk.incident is not None
        job = str(chunk.incident.job.job_id)
        lines = chunk.falco + chunk.tetragon
        assert lines
        for line in chunk.falco:
            assert f"job_{job}/" in json.loads(line)["output_fields"]["thread.cgroups"]
        for line in chunk.tetragon:
            event = json.loads(line)
            assert event["node_name"] == chunk.incident.node
            assert "/lustre/checkpoints/" not in line  # under the topology's root
        assert all("job_4410" not in text for text in chunk.cgroups.values())
