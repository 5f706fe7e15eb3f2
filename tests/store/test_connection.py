"""The store's DuckDB settings (memory limit, checkpoint threshold) and what its memory holds,
on real DuckDB files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from hpcscope.model.errors import StoreError
from hpcscope.store import Store
from hpcscope.store.connection import (
    DEFAULT_CHECKPOINT_THRESHOLD_BYTES,
    StoreLimits,
    connect,
    file_size_bytes,
    memory_by_tag,
)

MIB = 1024 * 1024


def _execute(sql: str) -> Callable[[duckdb.DuckDBPyConnection], object]:
    return lambda con: con.execute(sql)


def _append_in_small_batches(store: Store, rows: int, batch: int = 10_000) -> None:
    """``rows`` BIGINTs into a new table ``t``, one transaction per ``batch``."""
    store.submit_write(_execute("CREATE TABLE t (i BIGINT)")).result()
    for start in range(0, rows, batch):
        sql = f"INSERT INTO t SELECT range FROM range({start}, {start + batch})"
        store.submit_write(_execute(sql)).result()


def _setting(store: Store, name: str) -> str:
    row = store.query_row("SELECT current_setting(?)", [name])
    assert row is not None
    return str(row[0])


def test_the_store_opens_with_its_limits(tmp_path: Path) -> None:
    limits = StoreLimits(memory_limit_bytes=96 * MIB, checkpoint_threshold_bytes=2 * MIB)
    with Store(tmp_path / "s.duckdb", limits=limits) as store:
        assert _setting(store, "memory_limit") == "96.0 MiB"
        assert _setting(store, "checkpoint_threshold") == "2.0 MiB"
        assert store.memory().limit_bytes == 96 * MIB
    with Store(tmp_path / "s.duckdb", read_only=True, limits=limits) as store:
        assert store.memory().limit_bytes == 96 * MIB


def test_defaults_are_duckdbs(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        assert _setting(store, "checkpoint_threshold") == "16.0 MiB"
        assert DEFAULT_CHECKPOINT_THRESHOLD_BYTES == 16 * MIB
        # DuckDB's own default: 80 % of the host's RAM, shown to three digits
        assert store.memory().limit_bytes > 256 * MIB


@pytest.mark.parametrize(
    "limits",
    [{"memory_limit_bytes": 0}, {"memory_limit_bytes": -1}, {"checkpoint_threshold_bytes": 0}],
)
def test_limits_refuse_sizes_that_are_not_positive(limits: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="must be > 0"):
        StoreLimits(**limits)


def test_memory_counts_rows_waiting_for_a_checkpoint_then_blocks(tmp_path: Path) -> None:
    """Rows appended since the last checkpoint are IN_MEMORY_TABLE; after a checkpoint they
    are the file's blocks (BASE_TABLE), kept while under the limit."""
    limits = StoreLimits(checkpoint_threshold_bytes=1024 * MIB)  # no checkpoint on its own
    with Store(tmp_path / "s.duckdb", limits=limits) as store:
        assert set(store.memory().by_tag_bytes) >= {"BASE_TABLE", "IN_MEMORY_TABLE"}
        _append_in_small_batches(store, 1_000_000)  # as the collector appends
        before = store.memory().by_tag_bytes
        assert before["IN_MEMORY_TABLE"] >= 4 * MIB  # 1 M BIGINTs, uncompressed
        store.submit_write(lambda con: con.execute("CHECKPOINT")).result()
        after = store.memory().by_tag_bytes
        assert after["IN_MEMORY_TABLE"] < before["IN_MEMORY_TABLE"] // 4
        assert after["BASE_TABLE"] > 0


def test_the_memory_limit_bounds_what_a_larger_store_holds(tmp_path: Path) -> None:
    """A store of ~100 MiB read whole under a 48 MiB limit: DuckDB evicts, never holds more."""
    path = tmp_path / "big.duckdb"
    with Store(path) as store:
        store.submit_write(
            lambda con: con.execute(
                "CREATE TABLE t AS SELECT range AS i, hash(range) AS h, random() AS r "
                "FROM range(6000000)"
            )
        ).result()
    assert file_size_bytes(str(path)) > 64 * MIB
    with Store(path, limits=StoreLimits(memory_limit_bytes=48 * MIB)) as store:
        row = store.query_row("SELECT sum(h % 7), sum(r) FROM t")
        assert row is not None and row[0] > 0
        held = store.memory()
        assert held.total_bytes <= 48 * MIB
        assert held.by_tag_bytes["BASE_TABLE"] > 0
    with Store(path) as store:  # the default keeps what it read
        store.query_row("SELECT sum(h % 7), sum(r) FROM t")
        assert store.memory().total_bytes > 64 * MIB


def test_file_size_counts_the_file_and_its_log(tmp_path: Path) -> None:
    assert file_size_bytes(":memory:") == 0
    assert file_size_bytes(str(tmp_path / "none.duckdb")) == 0
    path = tmp_path / "s.duckdb"
    with Store(path) as store:
        assert store.size_bytes() == file_size_bytes(str(path)) > 0


def test_a_file_that_is_not_duckdb_names_the_store(tmp_path: Path) -> None:
    path = tmp_path / "not.duckdb"
    path.write_bytes(b"not a database" * 1000)
    with pytest.raises(StoreError, match=f"cannot open store {path}"):
        connect(str(path), read_only=False, limits=StoreLimits())


def test_memory_of_a_plain_connection() -> None:
    con = connect(":memory:", read_only=False, limits=StoreLimits(memory_limit_bytes=64 * MIB))
    con.execute("CREATE TABLE t AS SELECT * FROM range(100000)")
    memory = memory_by_tag(con)
    assert memory.limit_bytes == 64 * MIB and memory.temporary_bytes == 0
    assert memory.total_bytes == sum(memory.by_tag_bytes.values()) > 0


@pytest.mark.parametrize("threshold_mib", [1, 1024])
def test_the_checkpoint_threshold_bounds_the_rows_waiting(
    tmp_path: Path, threshold_mib: int
) -> None:
    """The same 1 M rows in 100 appends: under a 1 MiB threshold DuckDB checkpoints as the
    log grows and holds a fraction of them uncompressed; under 1 GiB it holds them all."""
    limits = StoreLimits(checkpoint_threshold_bytes=threshold_mib * MIB)
    with Store(tmp_path / "s.duckdb", limits=limits) as store:
        _append_in_small_batches(store, 1_000_000)
        waiting = store.memory().by_tag_bytes["IN_MEMORY_TABLE"]
        if threshold_mib == 1:
            assert waiting < 2 * MIB
        else:
            assert waiting >= 4 * MIB
