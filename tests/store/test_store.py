from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pytest

from hpcscope.model.access import JobScope
from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA, JOB_SCHEMA
from hpcscope.store import Store, StoreError
from hpcscope.store.migrations import MIGRATIONS


def _samples(n: int, *, node: str = "gpu01") -> pa.Table:
    columns: dict[str, list[object]] = {f.name: [None] * n for f in GPU_SAMPLE_SCHEMA}
    columns["ts"] = [datetime(2026, 11, 29, 12, 0, i) for i in range(n)]
    columns["node"] = [node] * n
    columns["gpu"] = [i % 8 for i in range(n)]
    columns["reported_util_ratio"] = [0.87] * n
    columns["sm_active_ratio"] = [0.19] * n
    return pa.table(columns, schema=GPU_SAMPLE_SCHEMA)


def test_migrations_apply_once_and_are_numbered(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    with Store(path) as store:
        assert store.schema_version() == MIGRATIONS[-1].version
    with Store(path) as store:  # reopening applies nothing twice
        assert store.schema_version() == MIGRATIONS[-1].version
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))


def test_migration_6_renames_gpu_util_and_keeps_the_samples(tmp_path: Path) -> None:
    """A store written before migration 6 keeps its GPU_UTIL samples under the new name."""
    import duckdb

    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, "
        "applied_at TIMESTAMP NOT NULL DEFAULT current_timestamp)"
    )
    for migration in MIGRATIONS[:5]:
        con.execute(migration.sql)
        con.execute(
            "INSERT INTO schema_migrations (version, name) VALUES (?, ?)",
            [migration.version, migration.name],
        )
    con.execute(
        "INSERT INTO gpu_samples (ts, node, gpu, gpu_util_ratio) "
        "VALUES ('2026-11-29 12:00:00', 'gpu01', 0, 0.87)"
    )
    con.close()
    with Store(path) as store:
        assert store.schema_version() == MIGRATIONS[-1].version
        rows = store.query("SELECT node, reported_util_ratio FROM gpu_samples").to_pylist()
    assert rows == [{"node": "gpu01", "reported_util_ratio": 0.87}]


def test_stored_tables_match_the_arrow_schemas(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        for table, schema in (("gpu_samples", GPU_SAMPLE_SCHEMA), ("jobs", JOB_SCHEMA)):
            stored = store.query(f"SELECT * FROM {table} LIMIT 0").schema
            assert stored.names == schema.names


def test_append_and_read_back(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        assert store.append("gpu_samples", _samples(16)).result() == 16
        table = store.query("SELECT count(*) AS n, avg(sm_active_ratio) AS real FROM gpu_samples")
        assert table.to_pylist() == [{"n": 16, "real": pytest.approx(0.19)}]


def test_a_bad_batch_fails_alone_and_loses_nothing(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        store.append("gpu_samples", _samples(8)).result()
        bad = pa.table({"ts": [None], "node": ["gpu01"], "gpu": [0]})
        with pytest.raises(StoreError, match=r"write refused: .*(NOT NULL|null)"):
            store.append("gpu_samples", bad).result()
        store.append("gpu_samples", _samples(4)).result()
        assert store.query("SELECT count(*) AS n FROM gpu_samples").to_pylist() == [{"n": 12}]


def test_a_failed_query_is_a_store_error_naming_the_store(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store, pytest.raises(StoreError, match=r"s\.duckdb"):
        store.query("SELECT * FROM no_such_table")


def test_a_file_that_is_not_a_store_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "not-a-store.duckdb"
    path.write_bytes(b"garbage" * 1000)
    with pytest.raises(StoreError, match="cannot open store"):
        Store(path)


def test_unknown_table_is_refused(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store, pytest.raises(StoreError):
        store.append("jobs; DROP TABLE jobs", _samples(1))


def test_concurrent_writers_are_serialised(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        futures = []

        def writer(node: str) -> None:
            for _ in range(10):
                futures.append(store.append("gpu_samples", _samples(8, node=node)))

        threads = [threading.Thread(target=writer, args=(f"n{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sum(f.result() for f in futures) == 320
        assert store.query("SELECT count(*) AS n FROM gpu_samples").to_pylist() == [{"n": 320}]


def test_job_upsert_merges_sources(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        prolog = pa.table(
            {
                "job_id": ["42"],
                "user": ["alice"],
                "account": ["vision"],
                "gpus": [8],
                "state": [None],
                "source": ["prolog"],
            }
        )
        sacct = pa.table(
            {
                "job_id": ["42"],
                "user": [None],
                "account": [None],
                "gpus": [None],
                "state": ["COMPLETED"],
                "source": ["sacct"],
            }
        )
        store.upsert_jobs(prolog).result()
        store.upsert_jobs(sacct).result()
        row = store.query('SELECT "user", account, gpus, state, source FROM jobs').to_pylist()
        assert row == [
            {
                "user": "alice",
                "account": "vision",
                "gpus": 8,
                "state": "COMPLETED",
                "source": "sacct",
            }
        ]


def test_read_only_store_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    Store(path).close()
    with Store(path, read_only=True) as store, pytest.raises(StoreError, match="read-only"):
        store.append("gpu_samples", _samples(1))


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        (JobScope(all_jobs=True), {"1", "2", "3"}),
        (JobScope(all_jobs=False, users=frozenset({"alice"})), {"1"}),
        (
            JobScope(
                all_jobs=False, users=frozenset({"carol"}), accounts=frozenset({"vision", "nlp"})
            ),
            {"1", "2"},
        ),
        (JobScope(all_jobs=False), set()),
    ],
)
def test_scope_sql_constrains_jobs(tmp_path: Path, scope: JobScope, expected: set[str]) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        jobs = pa.table(
            {
                "job_id": ["1", "2", "3"],
                "user": ["alice", "bob", "dave"],
                "account": ["vision", "nlp", "speech"],
                "source": ["test"] * 3,
            }
        )
        store.upsert_jobs(jobs).result()
        where, params = Store.scope_sql(scope)
        rows = store.query(f"SELECT job_id FROM jobs WHERE {where}", params).to_pylist()
        assert {r["job_id"] for r in rows} == expected
