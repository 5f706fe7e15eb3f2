"""Access records of protected paths (``file_access``, migration 14): append, and scoped reads.

Rows are :data:`~hpcscope.model.file_access.FILE_ACCESS_SCHEMA`; a row is identified by its
source line (``source_name``, ``source_line``, ``path``, ``access``), so a source read twice
adds nothing.

Visibility (the principal's :class:`~hpcscope.model.access.JobScope`, applied in SQL): a
record is visible when the **accessing job** is in scope (what my jobs touched), or when the
**path's owner** is: the user and account of the job that first wrote the record's directory
(the creator, as W-1 defines it). So alice sees bob's job reading her checkpoint, and bob sees
what his own job read. A principal whose ``scope.all_jobs`` is set sees every record; records
of no known job on a path of no known owner are visible to them only (deny by default).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from datetime import datetime
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

from hpcscope.model.access import JobScope
from hpcscope.model.file_access import FILE_ACCESS_SCHEMA

if TYPE_CHECKING:
    from hpcscope.store.duck import Store

FILE_ACCESS_DDL = """
CREATE TABLE file_access (
    ts TIMESTAMP NOT NULL,
    path VARCHAR NOT NULL,
    access VARCHAR NOT NULL,
    bytes BIGINT,
    node VARCHAR,
    job_id VARCHAR,
    pid BIGINT,
    uid BIGINT,
    "binary" VARCHAR,
    arguments VARCHAR,
    exec_id VARCHAR,
    function VARCHAR,
    source_kind VARCHAR NOT NULL,
    source_name VARCHAR NOT NULL,
    source_line BIGINT NOT NULL
);
CREATE INDEX file_access_path ON file_access (path);
"""

_KEY = ("source_name", "source_line", "path", "access")
_SAME = " AND ".join(f"s.{c} IS NOT DISTINCT FROM i.{c}" for c in _KEY)
_DIRECTORY = "regexp_replace({}, '/[^/]*$', '')"


def append_file_access(store: Store, table: pa.Table) -> Future[int]:
    """Append access records not stored yet (by source line, path and access).

    Returns:
        A future with the number of rows written.
    """
    rows = table.select(FILE_ACCESS_SCHEMA.names).cast(FILE_ACCESS_SCHEMA)
    names = ", ".join(f'"{n}"' for n in FILE_ACCESS_SCHEMA.names)

    def write(con: duckdb.DuckDBPyConnection) -> int:
        if rows.num_rows == 0:
            return 0
        incoming = rows  # noqa: F841  (DuckDB reads the Arrow table by its variable name)
        found = con.execute(
            f"INSERT INTO file_access ({names}) SELECT DISTINCT ON "
            f"({', '.join('i.' + c for c in _KEY)}) i.* FROM incoming i "
            f"WHERE NOT EXISTS (SELECT 1 FROM file_access s WHERE {_SAME}) RETURNING 1"
        ).fetchall()
        return len(found)

    return store.submit_write(write)


def file_access(
    store: Store,
    scope: JobScope,
    *,
    path: str,
    since: datetime | None = None,
    limit: int = 5000,
) -> pa.Table:
    """Access records of ``path`` and everything under it that ``scope`` may see, newest first.

    Columns: those of :data:`~hpcscope.model.file_access.FILE_ACCESS_SCHEMA`, plus ``user``
    and ``account`` (the accessing job's, from ``jobs``), ``owner_job_id``, ``owner_user``,
    ``owner_account`` (the creator of the record's directory) and ``own_job`` (whether the
    accessing job is in scope: False means the record is visible through path ownership, and
    its arguments are redacted by the service).

    Args:
        path: a file or a directory (a trailing ``/`` is ignored).
        since: only records at or after this time (naive UTC).
        limit: at most this many records.
    """
    base = path.rstrip("/") or "/"
    params: list[object] = [base, base.rstrip("/") + "/%"]
    time_clause = ""
    if since is not None:
        time_clause = " AND f.ts >= ?"
        params.append(since)
    job_sql, job_params = store.scope_sql(scope, user_column='j."user"', account_column="j.account")
    owner_sql, owner_params = store.scope_sql(
        scope, user_column='oj."user"', account_column="oj.account"
    )
    creators = (
        f"SELECT {_DIRECTORY.format('path')} AS directory, arg_min(job_id, ts) AS job_id "
        "FROM file_access WHERE access IN ('write', 'truncate') AND job_id IS NOT NULL "
        "GROUP BY directory"
    )
    sql = (
        f"WITH creators AS ({creators}) "
        'SELECT f.*, j."user" AS "user", j.account AS account, c.job_id AS owner_job_id, '
        'oj."user" AS owner_user, oj.account AS owner_account, '
        f"coalesce(j.job_id IS NOT NULL AND {job_sql}, FALSE) AS own_job "
        "FROM file_access f LEFT JOIN jobs j ON j.job_id = f.job_id "
        f"LEFT JOIN creators c ON c.directory = {_DIRECTORY.format('f.path')} "
        "LEFT JOIN jobs oj ON oj.job_id = c.job_id "
        f"WHERE (f.path = ? OR f.path LIKE ? ESCAPE '\\'){time_clause} "
        f"AND (({job_sql}) AND j.job_id IS NOT NULL OR ({owner_sql}) AND oj.job_id IS NOT NULL"
        f"{' OR TRUE' if scope.all_jobs else ''}) "
        f"ORDER BY f.ts DESC, f.source_name, f.source_line LIMIT {int(limit)}"
    )
    like_safe = [params[0], _escape_like(base.rstrip("/")) + "/%", *params[2:]]
    return store.query(sql, [*job_params, *like_safe, *job_params, *owner_params])


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def protected_paths(store: Store, *, limit: int = 200) -> list[tuple[str, int]]:
    """Directories with access records and their record counts, most records first (for
    an admin's overview)."""
    table = store.query(
        f"SELECT {_DIRECTORY.format('path')} AS directory, count(*) AS records "
        f"FROM file_access GROUP BY directory ORDER BY records DESC, directory LIMIT {int(limit)}"
    )
    return [(str(r["directory"]), int(r["records"])) for r in table.to_pylist()]


__all__: Sequence[str] = ("FILE_ACCESS_DDL", "append_file_access", "file_access", "protected_paths")
