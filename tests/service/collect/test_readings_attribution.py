"""One stored reading per GPU and time, with every job the platform says holds the GPU."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa

from hpcscope.ingest.exporters.dcgm import DcgmConverter, readings_table
from hpcscope.ingest.exposition.parser import ExpositionParser
from hpcscope.model.schemas import JOB_ALIAS_SCHEMA, JOB_ALLOCATION_SCHEMA
from hpcscope.service.collect.attribution import (
    ReadingsAttributor,
    attribute_readings,
    store_dcgm_readings,
)
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


def _at(readings: pa.Table, seconds: float) -> pa.Table:
    index = readings.schema.get_field_index("ts")
    ts = pa.array(
        [T0 + timedelta(seconds=seconds)] * readings.num_rows, readings.schema.field(index).type
    )
    return readings.set_column(index, readings.schema.field(index), ts)


def test_a_round_reuses_the_last_jobs_only_while_nothing_they_depend_on_changed(
    tmp_path: Path,
) -> None:
    """Each round's answer equals attribute_readings' from scratch: same rows (reused), a
    new allocation, an allocation starting between two rounds, an alias, other labels."""
    jobs = {"0": ["501", "502"], "1": ["501"], "2": [""], "3": ["7"]}

    def allocation(job: str, gpu: int, start: float, end: float | None = None) -> pa.Table:
        row = {"job_id": job, "node": "gpu01", "gpu": gpu, "gpu_instance_id": None,
               "start_time": T0 + timedelta(seconds=start),
               "end_time": None if end is None else T0 + timedelta(seconds=end)}  # fmt: skip
        return pa.Table.from_pylist([row], schema=JOB_ALLOCATION_SCHEMA)

    with Store(tmp_path / "s.duckdb") as store:
        attributor = ReadingsAttributor(store)
        base = _readings(jobs)
        reused = []

        def check(readings: pa.Table) -> None:
            stored, _ = attributor.attribute(readings)
            expected, _ = attribute_readings(store, readings)
            assert stored.equals(expected)
            reused.append(attributor.reused)

        check(_at(base, 0))
        check(_at(base, 1))  # nothing changed
        slurm_store.merge_allocations(store, allocation("501", 1, -60)).result()
        check(_at(base, 2))  # a new allocation: 501 holds GPU 1, 502's label is no fallback
        slurm_store.merge_allocations(store, allocation("900", 2, 3.5, 10)).result()
        check(_at(base, 3))  # 900's allocation starts after this round...
        check(_at(base, 4))  # ...and before this one
        check(_at(base, 5))
        check(_at(base, 11))  # ...and ends between these two
        slurm_store.upsert_aliases(
            store,
            pa.Table.from_pylist(
                [{"raw_job_id": "7", "job_id": "7_1", "cluster": None}], schema=JOB_ALIAS_SCHEMA
            ),
        ).result()
        check(_at(base, 12))  # an alias renames GPU 3's label
        check(_at(_readings({**jobs, "3": ["8"]}), 13))  # other labels
        check(_at(_readings({**jobs, "3": ["8"]}), 14))
        assert reused == [0, 1, 1, 1, 1, 2, 2, 2, 2, 3]
