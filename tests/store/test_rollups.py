"""1-minute rollups: equal to the raw aggregates, incremental, final after the grace period."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA, JOB_SCHEMA
from hpcscope.store import Store, rollups
from hpcscope.store import reports as queries
from hpcscope.store.migrations import MIGRATIONS

T0 = datetime(2026, 11, 1, 0, 0, 0)


def _rows(points: Sequence[tuple[float, int, float | None]], *, job: str = "1") -> pa.Table:
    """Samples at ``T0 + seconds`` on ``gpu``, with ``util`` (SM active is half of it)."""
    out = []
    for seconds, gpu, util in points:
        row: dict[str, object] = {f.name: None for f in GPU_SAMPLE_SCHEMA}
        row.update(
            ts=T0 + timedelta(seconds=seconds),
            node="gpu01",
            gpu=gpu,
            job_id=job,
            reported_util_ratio=util,
            sm_active_ratio=None if util is None else util / 2,
            power_watts=100.0 + seconds,
        )
        out.append(row)
    return pa.Table.from_pylist(out, schema=GPU_SAMPLE_SCHEMA)


def _minutes(store: Store) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {
            "minute": r["minute"],
            "gpu": r["gpu"],
            "samples": r["samples"],
            "mean": r["reported_util_ratio_mean"],
            "final": r["final"],
        }
        for r in rollups.gpu_minutes(store).to_pylist()
    ]
    return rows


_point = st.tuples(
    st.floats(0.0, 1200.0, allow_nan=False),
    st.integers(0, 1),
    st.one_of(st.none(), st.floats(0.0, 1.0, allow_nan=False)),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.lists(_point, min_size=1, max_size=30), min_size=1, max_size=5),
    st.sampled_from([0, 120, 10**9]),
)
def test_rollups_built_append_by_append_equal_the_raw_aggregates(
    batches: list[list[tuple[float, int, float | None]]], grace: int
) -> None:
    # batches in time order (late samples of final minutes are, by design, not folded in)
    ordered: list[list[tuple[float, int, float | None]]] = []
    for batch in sorted((sorted(b, key=lambda p: p[0]) for b in batches), key=lambda b: b[0][0]):
        if not ordered or batch[0][0] >= ordered[-1][-1][0]:
            ordered.append(batch)
    with Store(":memory:", rollup_grace_seconds=float(grace)) as store:
        for batch in ordered:
            store.append("gpu_samples", _rows(batch)).result()
        raw = store.query(
            "SELECT time_bucket(INTERVAL '1 minute', ts) AS minute, gpu, count(*) AS n, "
            "min(reported_util_ratio) AS lo, avg(reported_util_ratio) AS mean, "
            "max(reported_util_ratio) AS hi, "
            "count(reported_util_ratio) AS known, max(power_watts) AS watts "
            "FROM gpu_samples GROUP BY ALL ORDER BY minute, gpu"
        ).to_pylist()
        kept = [
            {
                "minute": r["minute"],
                "gpu": r["gpu"],
                "n": r["samples"],
                "lo": r["reported_util_ratio_min"],
                "mean": r["reported_util_ratio_mean"],
                "hi": r["reported_util_ratio_max"],
                "known": r["reported_util_ratio_count"],
                "watts": r["power_watts_max"],
            }
            for r in rollups.gpu_minutes(store).to_pylist()
        ]
        assert len(raw) == len(kept)
        finals = store.query(
            "SELECT count(*) AS n FROM gpu_rollups_1m WHERE final GROUP BY minute, gpu "
            "HAVING count(*) > 1"
        )
        assert finals.num_rows == 0  # a final minute is one compacted row
        for a, b in zip(raw, kept, strict=True):
            for key, value in a.items():
                other = b[key]
                if isinstance(value, float) and isinstance(other, float):
                    assert math.isclose(value, other, rel_tol=1e-9, abs_tol=1e-12), key
                else:
                    assert value == other, key


def test_a_late_sample_updates_an_open_minute_and_leaves_a_final_one_alone() -> None:
    with Store(":memory:", rollup_grace_seconds=120.0) as store:
        store.append("gpu_samples", _rows([(s, 0, 0.5) for s in range(0, 120, 10)])).result()
        assert [m["final"] for m in _minutes(store)] == [False, False]
        # watermark 00:03:10: minute 00:00 ends at 00:01 + 120 s grace = 00:03 -> final;
        # minute 00:01 ends 00:04 -> still open
        store.append("gpu_samples", _rows([(190, 0, 0.5)])).result()
        assert [(m["minute"].minute, m["final"]) for m in _minutes(store)] == [
            (0, True),
            (1, False),
            (3, False),
        ]
        store.append("gpu_samples", _rows([(5, 0, 1.0), (65, 0, 1.0)])).result()  # late
        first, second, _ = _minutes(store)
        assert first["samples"] == 6 and first["mean"] == 0.5  # final: not reopened
        assert second["samples"] == 7 and math.isclose(second["mean"], (6 * 0.5 + 1.0) / 7)
        raw = store.query("SELECT count(*) AS n FROM gpu_samples").to_pylist()[0]["n"]
        assert raw == 15  # the late sample of the final minute is kept raw
        # collection stops: the clock-based rule finalises what no watermark will
        store.finalise_rollups(T0 + timedelta(minutes=10)).result()
        assert all(m["final"] for m in _minutes(store))


def test_the_per_job_view_folds_the_gpus_of_a_minute() -> None:
    with Store(":memory:") as store:
        store.append("gpu_samples", _rows([(1, 0, 0.2), (2, 1, 0.6), (3, 1, 1.0)])).result()
        (minute,) = rollups.job_rollups(store, "1").to_pylist()
        assert minute["gpus"] == 2 and minute["samples"] == 3
        assert minute["reported_util_ratio_min"] == 0.2
        assert minute["reported_util_ratio_max"] == 1.0
        assert math.isclose(minute["reported_util_ratio_mean"], 0.6)


def test_rollup_timeseries_equals_the_raw_one_at_whole_minutes() -> None:
    with Store(":memory:") as store:
        points = [(float(s), s % 2, (s % 13) / 13) for s in range(0, 900, 7)]
        store.append("gpu_samples", _rows(points)).result()
        raw = queries.gpu_timeseries(store, "1", bucket_seconds=180).to_pylist()
        kept = rollups.rollup_timeseries(store, "1", bucket_seconds=180).to_pylist()
        assert len(raw) == len(kept) > 0
        for a, b in zip(raw, kept, strict=True):
            assert (a["bucket"], a["node"], a["gpu"]) == (b["bucket"], b["node"], b["gpu"])
            assert math.isclose(a["sm_active_ratio"], b["sm_active_ratio"], rel_tol=1e-9)


def test_a_store_written_before_the_upgrade_gets_its_rollups_and_keeps_its_history(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.duckdb"
    before = tuple(m for m in MIGRATIONS if m.version <= 5)
    with Store(path, migrations=before) as old:
        rows = _rows([(s, 0, 0.5) for s in range(0, 600, 15)])
        # the column name those migrations created (migration 6 renamed it)
        rows = rows.rename_columns(
            ["gpu_util_ratio" if c == "reported_util_ratio" else c for c in rows.column_names]
        )
        old.append("gpu_samples", rows).result()
        job = {"job_id": "1", "state": "COMPLETED", "end_time": T0, "source": "test"}
        old.upsert_jobs(pa.Table.from_pylist([job], schema=JOB_SCHEMA)).result()
        assert old.schema_version() == 5
    with Store(path) as upgraded:
        assert upgraded.schema_version() == MIGRATIONS[-1].version
        assert upgraded.query("SELECT count(*) AS n FROM gpu_samples").to_pylist()[0]["n"] == 40
        minutes = _minutes(upgraded)
        assert len(minutes) == 10 and sum(m["samples"] for m in minutes) == 40
        # the newest sample is at 00:09:45: minutes up to 00:06 are final (60 s + 120 s grace)
        assert [m["final"] for m in minutes] == [True] * 7 + [False] * 3
        assert upgraded.query("SELECT count(*) AS n FROM jobs").to_pylist()[0]["n"] == 1


_job_point = st.tuples(st.floats(0.0, 900.0, allow_nan=False), st.sampled_from(["7", "8", "9"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example([[(620.0, "7"), (650.0, "8")], [(800.0, "9")], [(30.0, "8")]], 610.0, 20.0)
@example([[(60.0, "7"), (200.0, "9")], [(100.0, "8")]], 59.0, 60.0)
@given(
    st.lists(st.lists(_job_point, min_size=1, max_size=12), min_size=1, max_size=4),
    st.floats(0.0, 900.0, allow_nan=False),
    st.floats(0.0, 300.0, allow_nan=False),
)
def test_jobs_in_a_window_are_those_of_the_raw_samples(
    batches: list[list[tuple[float, str]]], start: float, length: float
) -> None:
    # batches in any order: a late one lands in final minutes, kept raw and not rolled up
    with Store(":memory:", rollup_grace_seconds=0.0) as store:
        for batch in batches:
            for job in sorted({j for _, j in batch}):
                points = [(s, 0, 0.5) for s, j in batch if j == job]
                store.append("gpu_samples", _rows(points, job=job)).result()
        since = T0 + timedelta(seconds=start)
        until = since + timedelta(seconds=length)
        raw = (
            store.query(
                "SELECT DISTINCT job_id FROM gpu_samples WHERE ts >= ? AND ts <= ? ORDER BY job_id",
                [since, until],
            )
            .column("job_id")
            .to_pylist()
        )
        assert queries.EmbeddedSamples(store).jobs_seen(since=since, until=until) == raw
        assert rollups.jobs_in_window(store, since=since, until=until, job_ids=["8"]) == [
            j for j in raw if j == "8"
        ]
