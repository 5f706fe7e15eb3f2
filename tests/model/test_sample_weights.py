"""The sample-weight rule (:func:`hpcscope.model.sampling.sample_weights`): its cases, and the
frame form (``with_time_weights``) and the store's SQL (``gpu_time``) agreeing with it on random
series: several series per job, equal times, gaps past the cap, lone samples."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcscope.analysis.jobs.efficiency import with_time_weights
from hpcscope.model.access import JobScope
from hpcscope.model.sampling import sample_weights
from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA
from hpcscope.store import Store
from hpcscope.store.diagram import gpu_time

CAP = 45.0
Key = tuple[str, int, int | None]
T0 = datetime(2026, 1, 1)


def test_the_rule() -> None:
    # 15 s, then a 285 s silence clipped to the cap; the last weighs the median (150 -> cap)
    assert sample_weights([0.0, 15.0, 300.0], max_interval_seconds=CAP) == [15.0, CAP, CAP]
    assert sample_weights([0.0, 10.0, 20.0, 50.0], max_interval_seconds=CAP) == [10, 10, 30, 10]
    assert sample_weights([5.0], max_interval_seconds=CAP) == [CAP]
    assert sample_weights([5.0, 5.0], max_interval_seconds=CAP) == [0.0, 0.0]
    assert sample_weights([], max_interval_seconds=CAP) == []
    with pytest.raises(ValueError, match="time order"):
        sample_weights([2.0, 1.0], max_interval_seconds=CAP)


#: (job, gpu, MIG instance) -> sample offsets in milliseconds (sorted in the test).
series = st.dictionaries(
    st.tuples(st.sampled_from(["7", "8"]), st.integers(0, 2), st.sampled_from([None, 1])),
    st.lists(
        st.one_of(st.integers(0, 200_000), st.sampled_from([0, 45_000, 90_000])),
        min_size=1,
        max_size=10,
    ),
    min_size=1,
    max_size=4,
)


def _expected(case: dict[Key, list[int]]) -> dict[Key, list[float]]:
    return {
        key: sample_weights([ms / 1000 for ms in sorted(offsets)], max_interval_seconds=CAP)
        for key, offsets in case.items()
    }


def _rows(case: dict[Key, list[int]]) -> list[dict[str, object]]:
    return [
        {"ts": T0 + timedelta(milliseconds=ms), "node": "gpu01", "gpu": gpu,
         "gpu_instance_id": mig, "job_id": job, "sm_active_ratio": 1.0}
        for (job, gpu, mig), offsets in case.items()
        for ms in offsets
    ]  # fmt: skip


@given(series)
def test_the_frame_form_agrees(case: dict[Key, list[int]]) -> None:
    frame = pl.DataFrame(_rows(case), schema_overrides={"gpu_instance_id": pl.Int32})
    weighted = with_time_weights(frame, max_interval_seconds=CAP)
    got: dict[Key, list[float]] = {}
    for row in weighted.iter_rows(named=True):
        key = (row["job_id"], row["gpu"], row["gpu_instance_id"])
        got.setdefault(key, []).append(row["dt_seconds"])
    expected = _expected(case)
    assert got.keys() == expected.keys()
    for key, weights in expected.items():
        assert got[key] == pytest.approx(weights)


@pytest.fixture(scope="module")
def store_paths(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("weights")
    return (root / f"s-{i}.duckdb" for i in range(10**6))


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(series)
def test_the_sql_form_agrees(store_paths: Iterator[Path], case: dict[Key, list[int]]) -> None:
    with Store(next(store_paths)) as store:
        store.append("gpu_samples", pa.Table.from_pylist(_rows(case), GPU_SAMPLE_SCHEMA)).result()
        held = gpu_time(
            store, scope=JobScope(all_jobs=True), since=T0, until=T0 + timedelta(days=1),
            max_interval_seconds=CAP,
        )  # fmt: skip
    expected = sum(w for weights in _expected(case).values() for w in weights)
    assert held.allocated_seconds == pytest.approx(expected)
    assert held.useful_seconds == pytest.approx(expected)
