"""One stored row per GPU and time, with its job(s): ``gpu_readings`` behind ``gpu_samples``.

dcgm-exporter writes a copy of every series of a GPU per line of its hpc-job-mapping file, so a
GPU shared by two jobs reads twice with the same counters. Up to migration 16 the store kept
one ``gpu_samples`` row per copy. Migration 15 renames that table ``gpu_readings`` (the rows
stored so far stay, as they are) and adds ``shared_job_ids``: the jobs of a GPU beyond
``job_id`` (null for a GPU with one job or none, which compresses to nothing). ``gpu_samples``
becomes a view with the old shape, one row per (GPU, time, job):

* the reading itself, with its ``job_id``;
* one more row per element of ``shared_job_ids``, with that job.

Every reader of ``gpu_samples`` keeps its SQL and its answers. Writers go to ``gpu_readings``:
:meth:`hpcscope.store.Store.append` (``"gpu_samples"`` appends land there; the rollups still
see one row per job, :func:`by_job`), the alias renames of :mod:`hpcscope.store.slurm` and the
retention of :mod:`hpcscope.store.summaries` (:func:`raw_table`).
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["MIGRATION_SQL", "READINGS", "SHARED_JOB_IDS", "by_job", "raw_table"]

READINGS = "gpu_readings"
SHARED_JOB_IDS = "shared_job_ids"

MIGRATION_SQL = f"""
ALTER TABLE gpu_samples RENAME TO {READINGS};
ALTER TABLE {READINGS} ADD COLUMN {SHARED_JOB_IDS} VARCHAR[];
CREATE VIEW gpu_samples AS
SELECT * EXCLUDE ({SHARED_JOB_IDS}) FROM {READINGS}
UNION ALL BY NAME
SELECT * EXCLUDE (job_id, {SHARED_JOB_IDS}), unnest({SHARED_JOB_IDS}) AS job_id
FROM {READINGS} WHERE {SHARED_JOB_IDS} IS NOT NULL;
"""
"""Migration 15: the table keeps its rows and its name changes; the view keeps the old shape
(``UNION ALL BY NAME``: the view's columns are the table's, in its order, whatever columns a
later migration adds)."""


def raw_table(con: duckdb.DuckDBPyConnection) -> str:
    """The table that holds the raw samples: ``gpu_readings``, or ``gpu_samples`` in a store
    not yet at migration 15."""
    rows = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = ? AND NOT temporary", [READINGS]
    ).fetchall()
    return READINGS if rows[0][0] else "gpu_samples"


def by_job(readings: pa.Table) -> pa.Table:
    """``readings`` as ``gpu_samples`` rows: one per (GPU, time, job), without
    ``shared_job_ids`` (the rows the view shows, for the rollups and stores before 17)."""
    if SHARED_JOB_IDS not in readings.column_names:
        return readings
    shared = readings.column(SHARED_JOB_IDS).combine_chunks()
    base = readings.drop_columns([SHARED_JOB_IDS])
    if shared.null_count == len(shared):
        return base
    assert isinstance(shared, pa.ListArray)
    lengths = pc.fill_null(pc.list_value_length(shared), 0).to_numpy()
    extra = base.take(pa.array(np.repeat(np.arange(len(shared)), lengths), type=pa.int64()))
    index = base.schema.get_field_index("job_id")
    extra = extra.set_column(index, base.schema.field(index), pc.list_flatten(shared))
    return pa.concat_tables([base, extra])
