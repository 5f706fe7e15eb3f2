"""Open rollup minutes kept raw (migration 17): the same rollups as the per-append rows."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcscope.model.schemas import GPU_READING_SCHEMA
from hpcscope.store import Store, rollups, summaries
from hpcscope.store.migrations import MIGRATIONS, ROLLUP_ROWS

T0 = datetime(2026, 11, 1, 0, 0, 0)

#: The store as the commit before migration 17 wrote it: one partial row set per append.
BEFORE = tuple(m for m in MIGRATIONS if m.version < 17)

Point = tuple[float, int, str | None, float | None]


def _rows(points: Sequence[Point]) -> pa.Table:
    """Readings at ``T0 + seconds`` of ``gpu`` with its job (job ``s`` shares with ``2``)."""
    out = []
    for seconds, gpu, job, util in points:
        row: dict[str, object] = {f.name: None for f in GPU_READING_SCHEMA}
        row.update(
            ts=T0 + timedelta(seconds=seconds),
            node="gpu01",
            gpu=gpu,
            job_id=job,
            shared_job_ids=["2"] if job == "s" else None,
            reported_util_ratio=util,
            sm_active_ratio=None if util is None else util / 2,
            power_watts=100.0 + seconds,
        )
        out.append(row)
    return pa.Table.from_pylist(out, schema=GPU_READING_SCHEMA)


def _folded(store: Store) -> list[dict[str, Any]]:
    return [dict(row) for row in rollups.gpu_minutes(store).to_pylist()]


def _assert_same(expected: list[dict[str, Any]], got: list[dict[str, Any]]) -> None:
    assert len(expected) == len(got)
    for a, b in zip(expected, got, strict=True):
        assert a.keys() == b.keys()
        for key, value in a.items():
            other = b[key]
            if isinstance(value, float) and isinstance(other, float):
                assert math.isclose(value, other, rel_tol=1e-9, abs_tol=1e-12), key
            else:
                assert value == other, (key, a, b)


_point = st.tuples(
    st.floats(0.0, 900.0, allow_nan=False),
    st.integers(0, 1),
    st.sampled_from(["1", "s", None]),
    st.one_of(st.none(), st.floats(0.0, 1.0, allow_nan=False)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.lists(_point, min_size=1, max_size=20), min_size=1, max_size=8),
    st.sampled_from([0, 30, 120, 10**9]),
    st.one_of(st.none(), st.floats(0.0, 1200.0)),
)
def test_pending_minutes_give_the_rollups_of_the_per_append_rows(
    batches: list[list[Point]], grace: int, clock_seconds: float | None
) -> None:
    # any order of appends, late samples included: both paths fold and skip the same samples
    with (
        Store(":memory:", rollup_grace_seconds=float(grace), migrations=BEFORE) as old,
        Store(":memory:", rollup_grace_seconds=float(grace)) as new,
    ):
        for batch in batches:
            old.append("gpu_samples", _rows(batch)).result()
            new.append("gpu_samples", _rows(batch)).result()
            _assert_same(_folded(old), _folded(new))
        if clock_seconds is not None:  # collection stopped: the clock finalises
            cutoff = T0 + timedelta(seconds=clock_seconds)
            old.finalise_rollups(cutoff).result()
            new.finalise_rollups(cutoff).result()
            _assert_same(_folded(old), _folded(new))
        jobs = "SELECT * FROM job_rollups_1m ORDER BY minute, job_id"
        _assert_same(old.query(jobs).to_pylist(), new.query(jobs).to_pylist())


def test_only_closed_minutes_are_written_and_an_open_one_is_read_from_raw() -> None:
    with Store(":memory:") as store:
        for second in range(0, 126):
            store.append("gpu_samples", _rows([(float(second), 0, "1", 0.5)])).result()
        stored = store.query(
            f"SELECT minute, samples FROM {ROLLUP_ROWS} ORDER BY minute"
        ).to_pylist()
        # the watermark 00:02:05 minus 5 s closed minutes 00:00 and 00:01 (one row each)
        assert [(r["minute"].minute, r["samples"]) for r in stored] == [(0, 60), (1, 60)]
        assert [(m["minute"].minute, m["samples"]) for m in _folded(store)] == [
            (0, 60),
            (1, 60),
            (2, 6),
        ]


def test_a_store_reopened_after_a_crash_loses_no_committed_sample(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    points = [(float(s), s % 2, "s" if s % 3 else "1", (s % 7) / 7) for s in range(0, 400, 3)]
    with Store(":memory:", migrations=BEFORE) as reference:
        for point in points:
            reference.append("gpu_samples", _rows([point])).result()
        expected = _folded(reference)
    half = len(points) // 2
    first = Store(path)
    for point in points[:half]:
        first.append("gpu_samples", _rows([point])).result()
    # no close: what a killed process leaves is what it committed (the file lock aside)
    first._con.execute("CHECKPOINT")
    first.close()
    with Store(path) as second:
        for point in points[half:]:
            second.append("gpu_samples", _rows([point])).result()
        _assert_same(expected, _folded(second))


def test_a_store_with_per_append_rows_upgrades_in_place(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    points = [(float(s), 0, "1", (s % 5) / 5) for s in range(0, 300, 2)]
    with Store(":memory:", migrations=BEFORE) as reference:
        for point in points:
            reference.append("gpu_samples", _rows([point])).result()
        expected = _folded(reference)
    with Store(path, migrations=BEFORE) as old:
        for point in points[:100]:  # up to 00:03:18, mid-minute: partial rows of open minutes
            old.append("gpu_samples", _rows([point])).result()
    with Store(path) as upgraded:
        assert upgraded.schema_version() == MIGRATIONS[-1].version
        for point in points[100:]:
            upgraded.append("gpu_samples", _rows([point])).result()
        _assert_same(expected, _folded(upgraded))


def test_retention_keeps_the_raw_samples_not_yet_rolled_up() -> None:
    with Store(":memory:", rollup_grace_seconds=0.0) as store:
        # minute 00:00 final (watermark 00:01:10), minute 00:01 open and pending
        points = [(float(s), 0, "1", 0.5) for s in range(0, 71, 10)]
        store.append("gpu_samples", _rows(points)).result()
        store.submit_write(
            lambda con: con.execute(
                "INSERT INTO job_summaries (job_id, summarised_at, exit_cause, gpus_observed, "
                "observed_gpu_seconds, useful_gpu_seconds, verdict) "
                "VALUES ('1', ?, 'success', 1, 70, 35, 'ok')",
                [T0],
            )
        ).result()
        summaries.delete_raw_samples(store, before=T0 + timedelta(days=1)).result()
        kept = store.query("SELECT ts FROM gpu_samples ORDER BY ts").to_pylist()
        assert [r["ts"] for r in kept] == [T0 + timedelta(seconds=s) for s in (60, 70)]
        assert [m["samples"] for m in _folded(store)] == [6, 2]
