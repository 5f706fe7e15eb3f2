"""The live reads of the prometheus backend: what the cluster overview and the diagram show.

- :func:`latest`: one instant query of every dcgm-exporter series (the newest value of each,
  within the engine's lookback) and one of ``timestamp()`` of the utilisation series (when
  each GPU really reported): a GPU is live when that time is at or after ``since``;
- :func:`last_seen`: the newest sample time of each GPU over a window, by a subquery of
  ``timestamp()`` at a step under the engine's 5-minute lookback (exact to the sample);
- :func:`jobs_seen`: the ``hpc_job`` values of utilisation samples in a window (the recording
  rules answer it cheaper when they are there, :mod:`hpcscope.service.backends.rule_reads`);
- :func:`bucket_means`: a job's per-GPU means per time bucket from raw samples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

import pyarrow as pa

from hpcscope.ingest.promql import (
    Series,
    dcgm_series_to_samples,
    job_matcher,
    promql_string,
    re2_escape,
)
from hpcscope.ingest.promql.aggregates import bucket_table, gpu_key, to_datetime
from hpcscope.ingest.promql.matrix import DCGM_METRIC_NAMES
from hpcscope.model.node_facts import GPU_XID_COUNT_SCHEMA
from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA
from hpcscope.model.timeutil import epoch_seconds
from hpcscope.service.backends.client import EngineClient
from hpcscope.service.backends.engine_rules import MEAN_FIELDS, UTIL
from hpcscope.service.backends.rule_reads import factor

#: The engine's lookback of an instant query (Prometheus' default, VictoriaMetrics' too).
LOOKBACK_SECONDS = 300
_WITH_JOB = 'hpc_job!~"|0"'
_NO_JOB = 'hpc_job=~"|0"'
#: Steps per query_range call (under Prometheus' 11,000 points per series).
MAX_POINTS_PER_QUERY = 10_000
#: dcgm-exporter's Xid counts (``hpcscope.ingest.exporters.node_facts``).
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
#: The columns the telemetry rules read of idle GPUs' samples.
IDLE_COLUMNS = (
    "ts",
    "node",
    "gpu",
    "job_id",
    "reported_util_ratio",
    "sm_active_ratio",
    "fb_used_bytes",
)


def read_grid(start: datetime, end: datetime, step_seconds: float) -> list[tuple[int, int, int]]:
    """The query_range calls that read ``[start, end]``: (start, end, step), epoch milliseconds.

    The step is the largest whole number of milliseconds, at most ``step_seconds``, that puts
    points on both ends of the window (within a millisecond a point): a job report weighs each
    point by the time to the next, so a window read at a step that does not divide it would lose
    up to a step at its end (1.1 % of a minute's GPU-hours at 1 s scrapes, measured). Chunks
    hold at most :data:`MAX_POINTS_PER_QUERY` steps.
    """
    start_ms = round(epoch_seconds(start) * 1000)
    end_ms = round(epoch_seconds(end) * 1000)
    span_ms = end_ms - start_ms
    if span_ms < 0:
        return []
    wanted_ms = max(1, round(step_seconds * 1000))
    if span_ms == 0:
        return [(start_ms, end_ms, wanted_ms)]
    steps = max(1, math.ceil(span_ms / wanted_ms))
    step_ms = max(1, span_ms // steps)
    grid = []
    done = 0
    while done <= steps:
        points = min(MAX_POINTS_PER_QUERY, steps - done)
        chunk_start = start_ms + done * step_ms
        grid.append((chunk_start, chunk_start + points * step_ms, step_ms))
        done += points + 1
    return grid


def _seconds(start: datetime, end: datetime) -> int:
    return max(1, math.ceil((end - start).total_seconds()))


def jobs_seen(
    engine: EngineClient,
    *,
    since: datetime,
    until: datetime,
    job_ids: Sequence[str] | None = None,
) -> list[str]:
    """Jobs with utilisation samples in ``[since, until]`` (raw samples)."""
    matcher = job_matcher(job_ids) if job_ids else _WITH_JOB
    span = _seconds(since, until)
    answer = engine.query(
        f"count by (hpc_job) (count_over_time({UTIL}{{{matcher}}}[{span}s]))", at=until
    )
    return sorted({s.labels["hpc_job"] for s in answer.series if s.labels.get("hpc_job")})


def latest(engine: EngineClient, *, since: datetime, until: datetime) -> pa.Table:
    """The newest sample of every GPU (and job copy) that reported since ``since``:
    ``GPU_SAMPLE_SCHEMA`` rows, ``ts`` the time the GPU's utilisation was sampled."""
    names = promql_string("|".join(DCGM_METRIC_NAMES))
    values = engine.query(f"{{__name__=~{names}}}", at=until)
    stamps = engine.query(f"timestamp({UTIL})", at=until)
    source = f"{engine.url} latest"
    when: dict[tuple[str | None, str, int, int | None], float] = {}
    for index, series in enumerate(stamps.series):
        key = gpu_key(series.labels, source=source, where=f"timestamp[{index}]")
        if key is not None and series.values.size and series.last >= epoch_seconds(since):
            when[key] = series.last
    fresh: list[Series] = []
    for index, series in enumerate(values.series):
        key = gpu_key(series.labels, source=source, where=f"latest[{index}]")
        if key is None or key not in when:
            continue
        at = when[key]
        fresh.append(Series(series.labels, series.times * 0 + at, series.values))
    # one row per GPU and job copy: the columns of a GPU sampled at once share its time
    return dcgm_series_to_samples(fresh, source=source)


def last_seen(
    engine: EngineClient, *, since: datetime, until: datetime, step: float
) -> dict[tuple[str, int], datetime]:
    """When each (node, GPU) last reported since ``since``."""
    span = _seconds(since, until)
    resolution = max(math.ceil(step), min(LOOKBACK_SECONDS // 2, math.ceil(span / 500)))
    answer = engine.query(
        f"max by (node, hostname, Hostname, instance, gpu) "
        f"(max_over_time(timestamp({UTIL})[{span}s:{resolution}s]))",
        at=until,
    )
    found: dict[tuple[str, int], datetime] = {}
    for index, series in enumerate(answer.series):
        key = gpu_key(series.labels, source=f"{engine.url} last seen", where=f"[{index}]")
        if key is None or not series.values.size or math.isnan(series.last):
            continue
        if series.last >= epoch_seconds(since):
            at = to_datetime(series.last)
            previous = found.get((key[1], key[2]))
            found[(key[1], key[2])] = at if previous is None else max(previous, at)
    return found


def bucket_means(
    engine: EngineClient,
    job_ids: Sequence[str],
    *,
    bucket_seconds: int,
    since: datetime,
    until: datetime,
) -> pa.Table:
    """Per job GPU and bucket: the means of utilisation, SM and tensor active (raw samples)."""
    if not job_ids:
        return bucket_table({}, bucket_seconds=bucket_seconds, source=engine.url)
    selector = "{" + job_matcher(job_ids) + "}"
    first = math.floor(epoch_seconds(since) / bucket_seconds) * bucket_seconds + bucket_seconds
    last = math.ceil(epoch_seconds(until) / bucket_seconds) * bucket_seconds
    wanted = ("reported_util_ratio", "sm_active_ratio", "tensor_active_ratio")
    answers = {
        column: engine.query_range(
            f"avg by (hpc_job, node, gpu) (avg_over_time({field}{selector}[{bucket_seconds}s]))",
            start=float(first),
            end=float(last),
            step=float(bucket_seconds),
        ).series
        for field, column in MEAN_FIELDS.items()
        if column in wanted
    }
    return bucket_table(
        answers,
        bucket_seconds=bucket_seconds,
        factors={"reported_util_ratio": factor(UTIL)},
        source=f"{engine.url}/api/v1/query_range",
    )


def raw_samples(
    engine: EngineClient, selector: str, *, since: datetime, until: datetime, step: float
) -> pa.Table:
    """Every sample of the dcgm-exporter series ``selector`` selects in ``[since, until]``, at
    the scrape interval ``step`` (:func:`read_grid`): ``GPU_SAMPLE_SCHEMA`` rows."""
    source = f"{engine.url}/api/v1/query_range"
    tables = [GPU_SAMPLE_SCHEMA.empty_table()]
    for chunk_start, chunk_end, step_ms in read_grid(since, until, step):
        answer = engine.query_range(
            selector, start=chunk_start / 1000, end=chunk_end / 1000, step=step_ms / 1000
        )
        tables.append(dcgm_series_to_samples(answer.series, source=source))
    return pa.concat_tables(tables)


def idle_gpu_samples(
    engine: EngineClient, *, since: datetime, until: datetime, step: float
) -> pa.Table:
    """Every sample in ``[since, until]`` of the GPUs with a sample of no job then (the
    telemetry rules' SC-4 and GM-1)."""
    span = _seconds(since, until)
    idle = engine.query(
        f"count by (node, hostname, Hostname, instance, gpu) "
        f"(count_over_time({UTIL}{{{_NO_JOB}}}[{span}s]))",
        at=until,
    )
    wanted: set[tuple[str, int]] = set()
    for index, series in enumerate(idle.series):
        key = gpu_key(series.labels, source=f"{engine.url} idle GPUs", where=f"[{index}]")
        if key is not None:
            wanted.add((key[1], key[2]))
    columns = list(IDLE_COLUMNS)
    if not wanted:
        return GPU_SAMPLE_SCHEMA.empty_table().select(columns)
    fields = promql_string("|".join((UTIL, "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_FB_USED")))
    nodes = promql_string("|".join(re2_escape(n) for n in sorted({n for n, _ in wanted})))
    table = raw_samples(
        engine, f"{{__name__=~{fields},node=~{nodes}}}", since=since, until=until, step=step
    )
    keep = [
        (node, int(gpu)) in wanted
        for node, gpu in zip(table["node"].to_pylist(), table["gpu"].to_pylist(), strict=True)
    ]
    chosen = table.filter(pa.array(keep, type=pa.bool_())).select(columns)
    return chosen.sort_by([("node", "ascending"), ("gpu", "ascending"), ("ts", "ascending")])


def xid_counts(engine: EngineClient, *, since: datetime, until: datetime, step: float) -> pa.Table:
    """dcgm-exporter's Xid counts in ``[since, until]``, one row per series and scrape."""
    rows: list[dict[str, object]] = []
    source = f"{engine.url}/api/v1/query_range"
    for chunk_start, chunk_end, step_ms in read_grid(since, until, step):
        answer = engine.query_range(
            XID_COUNT, start=chunk_start / 1000, end=chunk_end / 1000, step=step_ms / 1000
        )
        for index, series in enumerate(answer.series):
            key = gpu_key(series.labels, source=source, where=f"[{index}]")
            code = series.labels.get("xid", "")
            if key is None or not code.isdigit():
                continue
            for at, value in zip(series.times.tolist(), series.values.tolist(), strict=True):
                if not math.isnan(value):
                    rows.append(
                        {
                            "ts": to_datetime(at),
                            "node": key[1],
                            "gpu": key[2],
                            "job_id": key[0],
                            "xid": int(code),
                            "xid_count": value,
                        }
                    )
    table = pa.Table.from_pylist(rows, schema=GPU_XID_COUNT_SCHEMA)
    return table.sort_by([(k, "ascending") for k in ("node", "gpu", "ts", "xid")])
