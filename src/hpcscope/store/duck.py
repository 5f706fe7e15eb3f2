"""The embedded DuckDB store: one writer thread, readers on per-thread cursors.

DuckDB is a single-writer-process database: while one process holds the file read-write, no
other process can open it, not even read-only. So one server process owns the file; inside it
a single thread owns every write (appends, upserts, migrations) and drains a queue, and callers
get a :class:`concurrent.futures.Future` (the datasette pattern). Reads run on a cursor per
calling thread. Never open a store before forking.

A write that fails (a batch that does not fit the schema, a constraint) fails alone, inside its
own transaction: nothing stored before it is lost, and the writer keeps running.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow as pa

from hpcscope.model.access import JobScope
from hpcscope.model.errors import StoreError
from hpcscope.store import connection, readings, rollups
from hpcscope.store.connection import StoreLimits, StoreMemory
from hpcscope.store.migrations import DEFAULT_ROLLUP_GRACE_SECONDS, MIGRATIONS, Migration

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Tables that accept plain appends, and the tables that merge by key.
APPEND_TABLES = frozenset({"gpu_samples", "scrapes", "collection_gaps", "job_allocations"})

#: Columns of ``jobs`` that several sources fill in turn (merged, never blanked).
JOB_MERGE_COLUMNS = (
    "cluster",
    "name",
    "user",
    "account",
    "partition",
    "qos",
    "state",
    "exit_code",
    "submit_time",
    "eligible_time",
    "start_time",
    "end_time",
    "time_limit_seconds",
    "gpus",
    "nodes",
)


#: The migration that creates ``gpu_rollups_1m``: appends maintain it once it exists.
ROLLUP_MIGRATION = 8


class StoreClosedError(StoreError):
    """A write was submitted after :meth:`Store.close`."""


_STOP = object()


class Store:
    """hpcscope's embedded store (one DuckDB file, or ``:memory:``).

    Args:
        path: the database file; created with its parent directory when missing.
        read_only: open without a writer (offline CLI reads while no server holds the file).
        rollup_grace_seconds: how long after its end a minute of rollups stays open to late
            samples (:mod:`hpcscope.store.rollups`).
        migrations: the migrations to apply (all of them; tests pass a prefix to build a store
            as an earlier release wrote it).
        limits: DuckDB's memory limit and checkpoint threshold (:mod:`hpcscope.store.connection`).

    Example::

        store = Store("var/hpcscope.duckdb")
        store.append("gpu_samples", batch).result()
        jobs = store.jobs(scope=principal.job_scope())
        store.close()
    """

    def __init__(
        self,
        path: str | Path,
        *,
        read_only: bool = False,
        rollup_grace_seconds: float = DEFAULT_ROLLUP_GRACE_SECONDS,
        migrations: Sequence[Migration] = MIGRATIONS,
        limits: StoreLimits = StoreLimits(),
    ) -> None:
        self.path = str(path)
        self.read_only = read_only
        self.rollup_grace_seconds = rollup_grace_seconds
        self._rollup_boundary: Any = None
        self._rollup_pending: Any = None  # ``pending_from`` (migration 17)
        self._has_rollups = False
        self._has_pending = False
        self._has_readings = False
        self._con = connection.connect(self.path, read_only=read_only, limits=limits)
        self._local = threading.local()
        self._queue: queue.Queue[Any] = queue.Queue()
        self._writes_committed = 0
        self._closed = False
        self._writer: threading.Thread | None = None
        self._write_failures = 0
        self._last_failure_log = 0.0
        try:  # what start-up reads (catalog, migrations, rollup boundary) is checksummed
            self._con.execute("SET TimeZone = 'UTC'")
            if not read_only:
                self._migrate(migrations)
                self._has_rollups = any(m.version == ROLLUP_MIGRATION for m in migrations)
                # whether the rename happened, from the catalog (migration numbers move on merges)
                self._has_readings = readings.raw_table(self._con) == readings.READINGS
                if self._has_rollups:
                    self._rollup_boundary = rollups.initial_boundary(self._con)
                    self._has_pending = rollups.has_pending(self._con)
                    if self._has_pending:
                        self._rollup_pending = rollups.pending_from(self._con)
        except duckdb.Error as exc:  # a block whose checksum fails, a truncated file
            self._con.close()
            raise StoreError(
                f"store {self.path} is corrupt: {exc}. Stop every process using it, move it "
                "aside and recover (docs/storage.md, 'A corrupt store')"
            ) from None
        if not read_only:
            self._writer = threading.Thread(
                target=self._write_loop, name="hpcscope-store-writer", daemon=True
            )
            self._writer.start()

    # ---------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Finish queued writes, then close the file."""
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            self._queue.put(_STOP)
            self._writer.join()
        self._con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _migrate(self, migrations: Sequence[Migration]) -> None:
        con = self._con
        con.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            "version INTEGER PRIMARY KEY, name VARCHAR NOT NULL, "
            "applied_at TIMESTAMP NOT NULL DEFAULT current_timestamp)"
        )
        applied = {
            row[0] for row in con.execute("SELECT version FROM schema_migrations").fetchall()
        }
        for migration in migrations:
            if migration.version in applied:
                continue
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute(migration.sql)
                con.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES (?, ?)",
                    [migration.version, migration.name],
                )
                con.execute("COMMIT")
            except duckdb.Error as exc:
                con.execute("ROLLBACK")
                raise StoreError(
                    f"store {self.path}: migration {migration.version:04d} {migration.name} "
                    f"failed: {exc}"
                ) from exc
            # a new store applies every migration: one line for it at INFO, not one per step;
            # an upgrade of an existing store says each step
            log.log(
                logging.DEBUG if not applied else logging.INFO,
                "store %s: applied migration %04d %s",
                self.path,
                migration.version,
                migration.name,
            )
        if not applied and migrations:
            newest = max(m.version for m in migrations)
            log.info("store %s: created at schema version %d", self.path, newest)

    def schema_version(self) -> int:
        """The highest applied migration number."""
        # fetchall, not fetchone: DuckDB 2 keeps a half-read result open on the cursor and
        # refuses the next query on it
        rows = self._cursor().execute("SELECT max(version) FROM schema_migrations").fetchall()
        return int(rows[0][0]) if rows and rows[0][0] is not None else 0

    # ---------------------------------------------------------------- writes

    def _write_loop(self) -> None:
        cursor = self._con.cursor()
        while True:
            item = self._queue.get()
            if item is _STOP:
                cursor.close()
                return
            fn, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                cursor.execute("BEGIN TRANSACTION")
                result = fn(cursor)
                cursor.execute("COMMIT")
                self._writes_committed += 1  # before the result: its waiter sees the new count
            except BaseException as exc:  # the writer must survive any bad write
                try:
                    cursor.execute("ROLLBACK")
                except duckdb.Error:
                    pass
                if isinstance(exc, duckdb.Error):  # callers never see duckdb's own types
                    refused = StoreError(f"store {self.path}: write refused: {exc}")
                    refused.__cause__ = exc
                    self._failed_write(refused)
                    future.set_exception(refused)
                else:
                    future.set_exception(exc)
            else:
                if self._write_failures:
                    log.warning(
                        "store %s: writes succeed again after %d refused",
                        self.path,
                        self._write_failures,
                    )
                    self._write_failures = 0
                future.set_result(result)

    def _failed_write(self, error: StoreError) -> None:
        """Log a refused write (disk full, ...): the first at once, then one line a minute;
        nothing committed before is touched, and the writer goes on."""
        self._write_failures += 1
        now = time.monotonic()
        if self._write_failures == 1 or now - self._last_failure_log >= 60.0:
            self._last_failure_log = now
            log.error("%s (%d refused so far)", error, self._write_failures)

    @property
    def writes_committed(self) -> int:
        """How many write transactions have committed since the store was opened: readers
        that keep a derived view (the diagram's live state) compare it to know it is current."""
        return self._writes_committed

    def submit_write(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> Future[T]:
        """Run ``fn(connection)`` on the writer thread inside one transaction."""
        if self.read_only:
            raise StoreError(f"store {self.path} is open read-only")
        if self._closed:
            raise StoreClosedError(f"store {self.path} is closed")
        future: Future[T] = Future()
        self._queue.put((fn, future))
        return future

    def append(self, table: str, data: pa.Table | pa.RecordBatch) -> Future[int]:
        """Append rows to an append-only table (matched by column name).

        ``gpu_samples`` rows go to ``gpu_readings`` (:mod:`hpcscope.store.readings`): one row
        per GPU and time, ``shared_job_ids`` holding the jobs beyond ``job_id`` of a shared GPU
        (a table without that column is one row per job, as before).

        Returns:
            A future with the number of rows written.
        """
        if table not in APPEND_TABLES:
            raise StoreError(f"{table!r} is not an append table ({sorted(APPEND_TABLES)})")
        arrow = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
        target = table
        if table == "gpu_samples":
            if self._has_readings:
                target = readings.READINGS
            else:  # a store before migration 15 keeps one row per job
                arrow = readings.by_job(arrow)

        def write(con: duckdb.DuckDBPyConnection) -> int:
            if arrow.num_rows == 0:
                return 0
            # DuckDB's replacement scan reads the local Arrow table by its variable name:
            # no register/unregister pair that could fail inside an aborted transaction.
            incoming = arrow  # noqa: F841
            con.execute(f"INSERT INTO {target} BY NAME SELECT * FROM incoming")
            if table == "gpu_samples" and self._has_pending:
                try:
                    self._rollup_boundary, self._rollup_pending = rollups.update_pending(
                        con,
                        arrow,
                        grace_seconds=self.rollup_grace_seconds,
                        boundary=self._rollup_boundary,
                        pending=self._rollup_pending,
                    )
                except BaseException:
                    self._reload_rollup_state(con)
                    raise
            elif table == "gpu_samples" and self._has_rollups:
                self._rollup_boundary = rollups.update_minutes(
                    con,
                    readings.by_job(arrow),
                    grace_seconds=self.rollup_grace_seconds,
                    boundary=self._rollup_boundary,
                )
            return int(arrow.num_rows)

        return self.submit_write(write)

    def upsert_jobs(self, jobs: pa.Table) -> Future[int]:
        """Merge job records by ``job_id``: known fields win over nulls, newer over older.

        Several sources describe the same job (prolog record, slurmrestd, sacct); each fills
        what it knows. ``source`` keeps the last writer.
        """
        columns = [c for c in JOB_MERGE_COLUMNS if c in jobs.column_names]
        updates = ", ".join(f'"{c}" = COALESCE(excluded."{c}", jobs."{c}")' for c in columns)
        select = ", ".join(f'"{c}"' for c in ["job_id", *columns, "source"])

        def write(con: duckdb.DuckDBPyConnection) -> int:
            if jobs.num_rows == 0:
                return 0
            incoming_jobs = jobs  # noqa: F841  (read by DuckDB's replacement scan)
            con.execute(
                f"INSERT INTO jobs ({select}) SELECT {select} FROM incoming_jobs "
                f"ON CONFLICT (job_id) DO UPDATE SET {updates}, source = excluded.source"
            )
            return int(jobs.num_rows)

        return self.submit_write(write)

    def replace_account_memberships(self, memberships: pa.Table) -> Future[int]:
        """Replace the user -> account associations with a fresh copy from Slurm."""

        def write(con: duckdb.DuckDBPyConnection) -> int:
            con.execute("DELETE FROM account_memberships")
            incoming_assoc = memberships  # noqa: F841  (read by DuckDB's replacement scan)
            con.execute(
                'INSERT OR REPLACE INTO account_memberships ("user", account, coordinator) '
                'SELECT "user", account, coordinator FROM incoming_assoc'
            )
            return int(memberships.num_rows)

        return self.submit_write(write)

    def close_allocations(self, job_id: str, end_time: Any) -> Future[int]:
        """Mark the open allocations of ``job_id`` as ended at ``end_time``."""

        def write(con: duckdb.DuckDBPyConnection) -> int:
            con.execute(
                "UPDATE job_allocations SET end_time = ? WHERE job_id = ? AND end_time IS NULL",
                [end_time, job_id],
            )
            return 0

        return self.submit_write(write)

    def close_allocations_of(self, ends: Sequence[tuple[str, Any]]) -> Future[int]:
        """:meth:`close_allocations` for several jobs, ``(job_id, end_time)`` each, in one
        write (a scheduler poll ends many jobs at once)."""
        rows = [[end_time, job_id] for job_id, end_time in ends]

        def write(con: duckdb.DuckDBPyConnection) -> int:
            if rows:
                con.executemany(
                    "UPDATE job_allocations SET end_time = ? WHERE job_id = ? AND end_time IS NULL",
                    rows,
                )
            return 0

        return self.submit_write(write)

    def finalise_rollups(self, cutoff: Any) -> Future[None]:
        """Finalise the rollup minutes that start at or before ``cutoff`` (the clock-based rule
        of :mod:`hpcscope.store.rollups`, for when collection stopped)."""

        def write(con: duckdb.DuckDBPyConnection) -> None:
            if self._has_pending:
                try:
                    self._rollup_boundary, self._rollup_pending = rollups.finalise_pending(
                        con,
                        cutoff=cutoff,
                        boundary=self._rollup_boundary,
                        pending=self._rollup_pending,
                    )
                except BaseException:
                    self._reload_rollup_state(con)
                    raise
            elif self._has_rollups:
                self._rollup_boundary = rollups.finalise_before(
                    con, cutoff=cutoff, boundary=self._rollup_boundary
                )

        return self.submit_write(write)

    def _reload_rollup_state(self, con: duckdb.DuckDBPyConnection) -> None:
        """After a failed rollup step: the committed state, once the write has rolled back."""
        con.execute("ROLLBACK")
        con.execute("BEGIN TRANSACTION")  # the write loop rolls back once more
        self._rollup_boundary = rollups.initial_boundary(con)
        self._rollup_pending = rollups.pending_from(con)

    def flush(self) -> None:
        """Wait until every write queued so far is done."""
        self.submit_write(lambda con: None).result()

    def size_bytes(self) -> int:
        """Bytes on disk: the database file and its write-ahead log (0 for ``:memory:``)."""
        return connection.file_size_bytes(self.path)

    def memory(self) -> StoreMemory:
        """What DuckDB's buffer manager holds now, by tag, and its limit."""
        return connection.memory_by_tag(self._cursor())

    # ---------------------------------------------------------------- reads

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        cursor: duckdb.DuckDBPyConnection | None = getattr(self._local, "cursor", None)
        if cursor is None:
            cursor = self._con.cursor()
            self._local.cursor = cursor
        return cursor

    def query(
        self, sql: str, params: Sequence[object] = (), *, tables: Mapping[str, pa.Table] = {}
    ) -> pa.Table:
        """Run a read-only SQL query and return Arrow. For the store's own query modules.
        ``tables``: Arrow tables the query reads by name (what a metrics engine answered).

        Raises:
            StoreError: DuckDB refused the query (a corrupt file, a bug in a query module).
        """
        cursor = self._cursor()
        for name, table in tables.items():
            cursor.register(name, table)
        try:
            return cursor.sql(sql, params=list(params)).to_arrow_table()
        except duckdb.Error as exc:
            raise StoreError(f"store {self.path}: query failed: {exc}") from exc
        finally:
            for name in tables:
                cursor.unregister(name)

    def query_row(self, sql: str, params: Sequence[object] = ()) -> tuple[Any, ...] | None:
        """The first row of a small read-only query as a tuple (None when it has none): half
        the CPU of :meth:`query` for a query asked every second (no Arrow result to build)."""
        try:
            rows = self._cursor().execute(sql, list(params)).fetchall()
        except duckdb.Error as exc:
            raise StoreError(f"store {self.path}: query failed: {exc}") from exc
        return tuple(rows[0]) if rows else None

    @staticmethod
    def scope_sql(
        scope: JobScope, *, user_column: str = '"user"', account_column: str = "account"
    ) -> tuple[str, list[object]]:
        """A WHERE fragment and its parameters that keep only jobs inside ``scope``."""
        if scope.all_jobs:
            return "TRUE", []
        clauses: list[str] = []
        params: list[object] = []
        if scope.users:
            clauses.append(f"{user_column} IN ({', '.join('?' for _ in scope.users)})")
            params.extend(sorted(scope.users))
        if scope.accounts:
            clauses.append(f"{account_column} IN ({', '.join('?' for _ in scope.accounts)})")
            params.extend(sorted(scope.accounts))
        return ("(" + " OR ".join(clauses) + ")" if clauses else "FALSE"), params

    def coordinated_accounts(self, user: str) -> frozenset[str]:
        """Accounts that ``user`` coordinates according to Slurm associations."""
        rows = (
            self._cursor()
            .execute(
                'SELECT account FROM account_memberships WHERE "user" = ? AND coordinator', [user]
            )
            .fetchall()
        )
        return frozenset(str(row[0]) for row in rows)
