"""Attribution uses allocations (prolog/epilog, scheduler) and platform labels only; a label a
user's process emits never decides whose a GPU sample is."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.jobs.attribution import attribute_gpu_samples
from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA, JOB_ALLOCATION_SCHEMA

T0 = datetime(2026, 1, 1, 12, 0, 0)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def samples(rows: list[dict[str, Any]]) -> pa.Table:
    base: dict[str, list[Any]] = {name: [] for name in GPU_SAMPLE_SCHEMA.names}
    extra: dict[str, list[Any]] = {"platform_job_id": [], "claimed_job_id": []}
    for row in rows:
        for name in base:
            base[name].append(row.get(name, 0.5 if name.endswith("_ratio") else None))
        for name in extra:
            extra[name].append(row.get(name))
    table = pa.table(base, schema=GPU_SAMPLE_SCHEMA)
    for name, values in extra.items():
        table = table.append_column(name, pa.array(values, pa.string()))
    return table


def allocations(rows: list[tuple[str, str, int, int | None, float, float | None]]) -> pa.Table:
    return pa.table(
        {
            "job_id": [r[0] for r in rows],
            "node": [r[1] for r in rows],
            "gpu": [r[2] for r in rows],
            "gpu_instance_id": [r[3] for r in rows],
            "start_time": [at(r[4]) for r in rows],
            "end_time": [None if r[5] is None else at(r[5]) for r in rows],
        },
        schema=JOB_ALLOCATION_SCHEMA,
    )


def s(ts: float, gpu: int, **kw: Any) -> dict[str, Any]:
    return {"ts": at(ts), "node": "n01", "gpu": gpu, **kw}


def jobs_of(result: Any) -> list[tuple[int, str | None]]:
    table = result.samples
    return list(
        zip(table.column("gpu").to_pylist(), table.column("job_id").to_pylist(), strict=True)
    )


ALLOC = allocations(
    [
        ("101", "n01", 0, None, 0, 100),  # job 101 on GPU 0 until its epilog at t=100
        ("202", "n01", 1, None, 0, None),  # shared GPU 1: two jobs
        ("303", "n01", 1, None, 10, None),
        ("3_1", "n01", 2, None, 0, None),  # array task (mapping label holds raw id 8)
        ("404", "n01", 3, 7, 0, None),  # MIG: GPU 3, instance 7
    ]
)


def test_allocations_attribute_shared_gpus_to_both_jobs() -> None:
    result = attribute_gpu_samples(samples([s(50, 0), s(50, 1), s(5, 1)]), ALLOC)
    assert jobs_of(result) == [(0, "101"), (1, "202"), (1, "303"), (1, "202")]
    assert result.sources.to_pylist() == ["allocation"] * 4
    assert result.samples.schema == GPU_SAMPLE_SCHEMA


def test_nothing_is_attributed_after_the_epilog_even_with_a_stale_label() -> None:
    result = attribute_gpu_samples(samples([s(100, 0), s(150, 0, platform_job_id="101")]), ALLOC)
    assert jobs_of(result) == [(0, None), (0, None)]
    assert result.mismatches.column("claimed_job_id").to_pylist() == ["101"]


def test_a_self_reported_job_id_is_never_used() -> None:
    claims = samples(
        [
            s(50, 0, claimed_job_id="999"),  # claims another job's GPU
            s(50, 5, claimed_job_id="999"),  # claims an idle GPU
        ]
    )
    result = attribute_gpu_samples(claims, ALLOC)
    assert jobs_of(result) == [(0, "101"), (5, None)]
    mism = result.mismatches.to_pylist()
    assert [(m["gpu"], m["claimed_job_id"], m["job_id"], m["claim_source"]) for m in mism] == [
        (0, "999", "101", "self-reported"),
        (5, "999", "", "self-reported"),
    ]


def test_raw_array_label_resolves_through_aliases_and_mig_instances_match() -> None:
    rows = samples(
        [
            s(20, 2, platform_job_id="8"),
            {"ts": at(20), "node": "n01", "gpu": 3, "gpu_instance_id": 7},
            {"ts": at(20), "node": "n01", "gpu": 3, "gpu_instance_id": 8},
        ]
    )
    result = attribute_gpu_samples(rows, ALLOC, aliases={"8": "3_1"})
    assert jobs_of(result) == [(2, "3_1"), (3, "404"), (3, None)]
    assert result.mismatches.num_rows == 0


def test_platform_label_is_the_fallback_without_any_allocation_record() -> None:
    result = attribute_gpu_samples(
        samples([s(20, 6, platform_job_id="555"), s(20, 6, platform_job_id="0")]), ALLOC
    )
    assert jobs_of(result) == [(6, "555"), (6, None)]
    assert result.sources.to_pylist() == ["platform-label", None]


@settings(max_examples=100, deadline=None)
@given(
    claims=st.lists(
        st.tuples(st.integers(0, 7), st.floats(0, 300), st.sampled_from(["101", "202", "999"])),
        min_size=1,
        max_size=30,
    )
)
def test_claims_never_change_the_result(claims: list[tuple[int, float, str]]) -> None:
    honest = samples([s(t, gpu) for gpu, t, _ in claims])
    lying = samples([s(t, gpu, claimed_job_id=claim) for gpu, t, claim in claims])
    assert jobs_of(attribute_gpu_samples(honest, ALLOC)) == jobs_of(
        attribute_gpu_samples(lying, ALLOC)
    )
