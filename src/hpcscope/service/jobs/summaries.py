"""Write the kept summary of every finished job, once.

A job is due when Slurm says it is finished (a terminal state with an end time) and its end is
at least :func:`~hpcscope.service.jobs.reports.max_interval_seconds` old, so that the last
scrapes of its GPUs have landed. The summary is computed from its raw samples by the same
analysis functions as the live report (``gpu_summary`` then ``job_reports``), and stored by
:func:`hpcscope.store.summaries.write_summaries`, which never overwrites one.

The same pass is the **backfill** of a store written before migration 7: on the first
collector cycle after the upgrade, every finished job without a summary is summarised (in
batches of :data:`BATCH_JOBS`, oldest first; a pass stops after ``max_jobs``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl
import pyarrow as pa

from hpcscope.analysis.jobs.report import job_reports
from hpcscope.analysis.jobs.summary import summary_rows
from hpcscope.model.schemas import JOB_GPU_SUMMARY_SCHEMA, JOB_SUMMARY_SCHEMA
from hpcscope.service.jobs.reports import gpu_frame, max_interval_seconds
from hpcscope.store import summaries as kept
from hpcscope.store.duck import Store

#: Jobs summarised per read of raw samples (bounds the memory of one step).
BATCH_JOBS = 50


def summarise_finished_jobs(
    store: Store, *, now: datetime, scrape_interval_seconds: float, max_jobs: int = 2000
) -> int:
    """Summarise the finished jobs that have no summary yet; returns how many were written."""
    settle = timedelta(seconds=max_interval_seconds(scrape_interval_seconds))
    written = 0
    while written < max_jobs:
        due = kept.jobs_to_summarise(store, ended_before=now - settle, limit=BATCH_JOBS)
        if due.num_rows == 0:
            break
        jobs = pl.from_arrow(due)
        assert isinstance(jobs, pl.DataFrame)
        ids = sorted(jobs["job_id"].to_list())
        frame = gpu_frame(store, ids, scrape_interval_seconds=scrape_interval_seconds)
        reports = [
            r
            for r in job_reports(frame, jobs, now=now, gpu_hour_price=0.0, currency="")
            if r.job_id in set(ids)
        ]
        rows, gpus = summary_rows(reports, frame, jobs, summarised_at=now)
        count = kept.write_summaries(
            store,
            pa.Table.from_pylist(rows, schema=JOB_SUMMARY_SCHEMA),
            gpus.to_arrow().cast(JOB_GPU_SUMMARY_SCHEMA),
        ).result()
        written += count
        if count == 0:  # a concurrent pass wrote them: nothing left for this one
            break
    return written
