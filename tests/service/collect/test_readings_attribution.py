"""One stored reading per GPU and time, with every job the platform says holds the GPU."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa

from hpcscope.ingest.exporters.dcgm import DcgmConverter, readings_table
from hpcscope.ingest.exposition.parser import ExpositionParser
from hpcscope.model.schemas import JOB_ALLOCATION_SCHEMA
from hpcscope.service.collect.attribution import attribute_readings, store_dcgm_readings
from hpcscope.store import Store
from hpcscope.store import slurm as slurm_store
from tests.support.dcgm_pages import render_dcgm_page

T0 = datetime(2026, 11, 1, 12)


def _readings(jobs: dict[str, list[str]]) -> pa.Table:
    text = render_dcgm_page("gpu01", rng=random.Random(4), gpus=4, jobs=jobs)
    page = ExpositionParser().parse(text, source="test")
    return readings_table([DcgmConverter().convert(page, ts=T0, node="gpu01")])


def test_hpc_job_copies_are_one_reading_with_both_jobs(tmp_path: Path) -> None:
    jobs = {str(gpu): ["501", "502"] for gpu in range(4)}
    with Store(tmp_path / "s.duckdb") as store:
        store_dcgm_readings(store, _readings(jobs))
        stored = store.query(
            "SELECT gpu, job_id, shared_job_ids FROM gpu_readings ORDER BY gpu"
        ).to_pylist()
        assert stored == [{"gpu": g, "job_id": "501", "shared_job_ids": ["502"]} for g in range(4)]
        per_job = store.query(
            "SELECT job_id, count(*) AS n FROM gpu_samples GROUP BY ALL ORDER BY 1"
        ).to_pylist()
        assert per_job == [{"job_id": "501", "n": 4}, {"job_id": "502", "n": 4}]


def test_the_allocations_decide_a_shared_gpus_jobs(tmp_path: Path) -> None:
    jobs = {"0": ["501", "502"], "1": ["501"], "2": [""]}
    allocation = {
        "job_id": "501",
        "node": "gpu01",
        "gpu": 0,
        "gpu_instance_id": None,
        "start_time": T0 - timedelta(hours=1),
        "end_time": None,
    }
    with Store(tmp_path / "s.duckdb") as store:
        table = pa.Table.from_pylist([allocation], schema=JOB_ALLOCATION_SCHEMA)
        slurm_store.merge_allocations(store, table).result()
        stored, result = attribute_readings(store, _readings(jobs))
        rows = stored.select(["gpu", "job_id", "shared_job_ids"]).to_pylist()
        assert rows == [
            {"gpu": 0, "job_id": "501", "shared_job_ids": None},  # 502 holds no allocation
            {"gpu": 1, "job_id": "501", "shared_job_ids": None},
            {"gpu": 2, "job_id": None, "shared_job_ids": None},
            {"gpu": 3, "job_id": None, "shared_job_ids": None},
        ]
        claims = result.mismatches.select(["gpu", "claimed_job_id", "job_id"]).to_pylist()
        assert claims == [{"gpu": 0, "claimed_job_id": "502", "job_id": "501"}]
