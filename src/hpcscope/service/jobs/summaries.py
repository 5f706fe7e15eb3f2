"""Write the kept summary of every finished job, once.

A job is due when Slurm says it is finished (a terminal state with an end time) and its end is
at least :func:`~hpcscope.model.sampling.max_sample_weight_seconds` old, so that the last
scrapes of its GPUs have landed. The summary is computed from its raw samples by the same
analysis functions as the live report (``gpu_summary`` then ``job_reports``), and stored by
:func:`hpcscope.store.summaries.write_summaries`, which never overwrites one.

The same pass is the **backfill** of a store written before migration 7: on the first
collector cycle after the upgrade, every finished job without a summary is summarised (in
batches of :data:`BATCH_JOBS`, oldest first; a pass stops after ``max_jobs``).

Memory is bounded: a job with more than ``large_job_samples`` raw samples (a 1024-GPU job
sampled every second for a day has 88 M) is summarised node by node. ``gpu_summary`` aggregates
each GPU series on its own; only the verdicts compare a GPU with its peers, so the per-node
parts are joined and classified again with ``classify_gpus``: the result is the same as over
all samples at once (tested).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl
import pyarrow as pa

from hpcscope.analysis.jobs.efficiency import classify_gpus, gpu_summary
from hpcscope.analysis.jobs.report import job_reports
from hpcscope.analysis.jobs.summary import summary_rows
from hpcscope.model.backends import GpuMetrics
from hpcscope.model.sampling import max_sample_weight_seconds
from hpcscope.model.schemas import JOB_GPU_SUMMARY_SCHEMA, JOB_SUMMARY_SCHEMA
from hpcscope.service.jobs.reports import earliest_start, gpu_frame
from hpcscope.store import summaries as kept
from hpcscope.store.duck import Store

#: Jobs summarised per read of raw samples (bounds the memory of one step).
BATCH_JOBS = 50

#: Above this many raw samples a job is summarised node by node.
LARGE_JOB_SAMPLES = 2_000_000

#: Nodes read at once when a large job is summarised by parts.
NODES_PER_PART = 8


def _frame(table: pa.Table) -> pl.DataFrame:
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def large_job_frame(
    store: Store,
    job_id: str,
    *,
    scrape_interval_seconds: float,
    nodes_per_part: int = NODES_PER_PART,
) -> pl.DataFrame:
    """The ``gpu_summary`` rows of one job, computed ``nodes_per_part`` nodes at a time."""
    nodes = kept.job_sample_nodes(store, job_id)
    if not nodes:
        return gpu_frame(store, [], scrape_interval_seconds=scrape_interval_seconds)
    cap = max_sample_weight_seconds(scrape_interval_seconds)
    parts = [
        gpu_summary(
            _frame(kept.samples_of_job_nodes(store, job_id, nodes[i : i + nodes_per_part])),
            max_interval_seconds=cap,
        )
        for i in range(0, len(nodes), nodes_per_part)
    ]
    joined = pl.concat(parts, how="vertical_relaxed").drop("verdict", "peer_sm_active_ratio")
    return classify_gpus(joined).select(parts[0].columns)


def summarise_finished_jobs(
    store: Store,
    *,
    now: datetime,
    scrape_interval_seconds: float,
    max_jobs: int = 2000,
    large_job_samples: int = LARGE_JOB_SAMPLES,
    nodes_per_part: int = NODES_PER_PART,
    metrics: GpuMetrics | None = None,
) -> int:
    """Summarise the finished jobs that have no summary yet; returns how many were written.

    ``metrics``: where the GPU samples are read (default the store's own); a job is due once
    the backend's reads include its last samples (``lag_seconds``)."""
    if metrics is not None and metrics.backend != "embedded":
        return _summarise_from(
            store, metrics, now=now, interval=scrape_interval_seconds, most=max_jobs
        )
    settle = timedelta(seconds=max_sample_weight_seconds(scrape_interval_seconds))
    written = 0
    while written < max_jobs:
        due = kept.jobs_to_summarise(store, ended_before=now - settle, limit=BATCH_JOBS)
        if due.num_rows == 0:
            break
        jobs = _frame(due)
        ids = sorted(jobs["job_id"].to_list())
        counts = kept.sample_counts(store, ids)
        large = [i for i in ids if counts.get(i, 0) > large_job_samples]
        small = [i for i in ids if i not in set(large)]
        frames = [gpu_frame(store, small, scrape_interval_seconds=scrape_interval_seconds)]
        frames += [
            large_job_frame(
                store,
                i,
                scrape_interval_seconds=scrape_interval_seconds,
                nodes_per_part=nodes_per_part,
            )
            for i in large
        ]
        frame = pl.concat([f.select(frames[0].columns) for f in frames], how="vertical_relaxed")
        count = _write_batch(store, frame, jobs, ids, now=now)
        written += count
        if count == 0:  # a concurrent pass wrote them: nothing left for this one
            break
    return written


def _summarise_from(
    store: Store, metrics: GpuMetrics, *, now: datetime, interval: float, most: int
) -> int:
    """:func:`summarise_finished_jobs` reading a metrics engine: per batch of jobs, one read
    of their GPUs over their lives (the engine aggregates; no part-by-part read)."""
    settle = timedelta(seconds=max_sample_weight_seconds(interval) + metrics.lag_seconds)
    written = 0
    while written < most:
        due = kept.jobs_to_summarise(store, ended_before=now - settle, limit=BATCH_JOBS)
        if due.num_rows == 0:
            break
        jobs = _frame(due)
        ids = sorted(jobs["job_id"].to_list())
        frame = gpu_frame(
            store,
            ids,
            scrape_interval_seconds=interval,
            samples=metrics,
            since=earliest_start(jobs, ids),
            until=now,
        )
        count = _write_batch(store, frame, jobs, ids, now=now)
        written += count
        if count == 0:
            break
    return written


def _write_batch(
    store: Store, frame: pl.DataFrame, jobs: pl.DataFrame, ids: list[str], *, now: datetime
) -> int:
    """The reports of ``ids`` from their GPU samples in ``frame``, written as their summaries;
    how many the store took (0: a concurrent pass wrote them)."""
    wanted = set(ids)
    reports = [
        r
        for r in job_reports(frame, jobs, now=now, gpu_hour_price=0.0, currency="")
        if r.job_id in wanted
    ]
    rows, gpus = summary_rows(reports, frame, jobs, summarised_at=now)
    return kept.write_summaries(
        store,
        pa.Table.from_pylist(rows, schema=JOB_SUMMARY_SCHEMA),
        gpus.to_arrow().cast(JOB_GPU_SUMMARY_SCHEMA),
    ).result()
