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
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import pyarrow as pa

from hpcscope.ingest.dcgm_fields import COLUMN_OF_FIELD, FIELDS_BY_EXPORTED_NAME
from hpcscope.ingest.promql import (
    Series,
    dcgm_series_to_samples,
    job_matcher,
    promql_string,
    re2_escape,
)
from hpcscope.ingest.promql.aggregates import bucket_table, gpu_key, to_datetime
from hpcscope.ingest.promql.matrix import DCGM_METRIC_NAMES, dcgm_instant_to_samples
from hpcscope.model.node_facts import GPU_XID_COUNT_SCHEMA
from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA
from hpcscope.model.timeutil import epoch_seconds
from hpcscope.service.backends.client import EngineClient
from hpcscope.service.backends.engine_rules import MEAN_FIELDS, UTIL
from hpcscope.service.backends.rule_reads import factor

#: The engine's lookback of an instant query (Prometheus' default, VictoriaMetrics' too).
LOOKBACK_SECONDS = 300
_WITH_JOB = 'hpc_job!~"|0"'
#: Parallel queries of :func:`latest` (one per column: the engine answers each on a core).
LATEST_THREADS = 6
#: The labels a GPU's series is told apart by (``gpu_key``: node, GPU, MIG instance, job).
KEY_LABELS = "node, hostname, Hostname, instance, gpu, GPU_I_ID, hpc_job"
_NO_JOB = 'hpc_job=~"|0"'
#: Steps per query_range call (under Prometheus' 11,000 points per series).
MAX_POINTS_PER_QUERY = 10_000
#: Scrape intervals in the first window of a raw read (the series count is not known yet).
FIRST_WINDOW_STEPS = 120
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


def latest(
    engine: EngineClient,
    *,
    since: datetime,
    until: datetime,
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """The newest sample of every GPU (and job copy) that reported since ``since``:
    ``GPU_SAMPLE_SCHEMA`` rows, ``ts`` the time the GPU's utilisation was sampled.

    One instant query per column (``columns``, default all: the others stay null), asked in
    parallel; the engine drops every label but the GPU's key (:data:`KEY_LABELS`) before it
    answers: dcgm-exporter's UUID, PCI bus id, model and driver labels would double it."""
    wanted = set(columns) if columns is not None else None
    by_column: dict[str, list[str]] = {}
    for name in DCGM_METRIC_NAMES:
        column = COLUMN_OF_FIELD[FIELDS_BY_EXPORTED_NAME[name].name]
        if wanted is None or column in wanted:
            by_column.setdefault(column, []).append(name)
    exprs = [
        f"max by (__name__, {KEY_LABELS}) ({{__name__=~{promql_string('|'.join(names))}}})"
        for names in by_column.values()
    ]
    exprs.append(f"max by ({KEY_LABELS}) (timestamp({UTIL}))")
    with ThreadPoolExecutor(LATEST_THREADS, thread_name_prefix="engine-latest") as pool:
        answers = list(pool.map(lambda expr: engine.query_vector(expr, at=until), exprs))
    stamps = answers.pop()
    source = f"{engine.url} latest"
    when: dict[tuple[str | None, str, int, int | None], float] = {}
    fresh_from = epoch_seconds(since)
    stamped = zip(stamps.labels, stamps.values.tolist(), strict=True)
    for index, (labels, stamp) in enumerate(stamped):
        key = gpu_key(labels, source=source, where=f"timestamp[{index}]")
        if key is not None and stamp >= fresh_from:
            when[key] = stamp
    # one row per GPU and job copy: the columns of a GPU sampled at once share its time
    return dcgm_instant_to_samples(
        [labels for answer in answers for labels in answer.labels],
        [value for answer in answers for value in answer.values.tolist()],
        source=source,
        at=when,
    )


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


def raw_range(
    engine: EngineClient, selector: str, *, since: datetime, until: datetime, step: float
) -> list[Series]:
    """Every raw sample, at its own time, of the series ``selector`` selects in ``[since,
    until]``: instant queries of a range selector (``selector[<ms>ms]``), each answering the
    samples themselves (not points of a ``query_range`` grid, which repeat a sample or skip one
    when the grid and the scrapes drift). Read newest first in windows that tile the span (a
    window's range is closed on Prometheus 2, so the next ends a millisecond before it starts),
    the first of :data:`FIRST_WINDOW_STEPS` scrapes, the next sized to half the point budget
    at the series count seen."""
    start_ms = round(epoch_seconds(since) * 1000)
    at = round(epoch_seconds(until) * 1000)
    span_ms = max(1, round(FIRST_WINDOW_STEPS * step * 1000))
    found: list[Series] = []
    while at >= start_ms:
        low = max(start_ms, at - span_ms + 1)
        answer = engine.query(f"{selector}[{max(1, at - low)}ms]", at=at / 1000)
        found.extend(answer.series)
        series = max(1, len(answer.series))
        steps = max(1, min(MAX_POINTS_PER_QUERY, engine.config.max_points // (2 * series)))
        span_ms = max(1, round(steps * step * 1000))
        at = low - 1
    return found


def raw_samples(
    engine: EngineClient, selector: str, *, since: datetime, until: datetime, step: float
) -> pa.Table:
    """Every sample of the dcgm-exporter series ``selector`` selects in ``[since, until]``
    (:func:`raw_range`): ``GPU_SAMPLE_SCHEMA`` rows."""
    series = raw_range(engine, selector, since=since, until=until, step=step)
    table = dcgm_series_to_samples(series, source=f"{engine.url}/api/v1/query {selector}")
    return table if table.num_rows else GPU_SAMPLE_SCHEMA.empty_table()


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
    source = f"{engine.url}/api/v1/query {XID_COUNT}"
    answer = raw_range(engine, XID_COUNT, since=since, until=until, step=step)
    if answer:
        for index, series in enumerate(answer):
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
