"""What collection brought in lately, per kind of input: the collectors' last events.

The diagram's collector panel says, for each collector, when hpcscope last received something
from it. Scraped exporters and tailed files answer from ``scrapes`` (:func:`last_data`: the
last attempt that brought rows); the golden path's captures from ``trace_captures`` (a window
analysed: the PyTorch profiler; a window with NCCL debug logs beside it: NCCL); the eBPF
sensors on the checkpoints from ``file_access`` (an access to a protected path recorded).
"""

from __future__ import annotations

from datetime import datetime
from typing import TypedDict, cast

from hpcscope.store.duck import Store


class Activity(TypedDict):
    """The last event of one kind of input, and how many since the window's start."""

    last_ts: datetime | None
    recent: int


def last_data(store: Store, *, since: datetime) -> dict[str, Activity]:
    """Per exporter (``scrapes.exporter``): the last scrape or poll that brought rows."""
    sql = """
SELECT exporter, max(ts) AS last_ts, CAST(count(*) FILTER (WHERE ts >= ?) AS BIGINT) AS recent
FROM scrapes WHERE ok AND samples > 0 GROUP BY exporter
"""
    rows = store.query(sql, [since]).to_pylist()
    return {
        str(r["exporter"]): cast(Activity, {"last_ts": r["last_ts"], "recent": r["recent"]})
        for r in rows
    }


def capture_activity(store: Store, *, since: datetime) -> dict[str, Activity]:
    """``pytorch-profiler``: capture windows analysed; ``nccl-logs``: those with NCCL debug
    logs in the job's spool (the window's ``nccl_logs``)."""
    sql = """
SELECT max(updated) AS last_ts,
       CAST(count(*) FILTER (WHERE updated >= ?) AS BIGINT) AS recent,
       max(updated) FILTER (WHERE coalesce(json_array_length(result_json, '$.nccl_logs'), 0) > 0)
         AS nccl_last_ts,
       CAST(count(*) FILTER (WHERE updated >= ?
         AND coalesce(json_array_length(result_json, '$.nccl_logs'), 0) > 0) AS BIGINT)
         AS nccl_recent
FROM trace_captures
"""
    row = store.query(sql, [since, since]).to_pylist()[0]
    return {
        "pytorch-profiler": {"last_ts": row["last_ts"], "recent": int(row["recent"] or 0)},
        "nccl-logs": {"last_ts": row["nccl_last_ts"], "recent": int(row["nccl_recent"] or 0)},
    }


def access_activity(store: Store, *, since: datetime) -> Activity:
    """Accesses to protected paths (checkpoints, weights, datasets) the sensors recorded."""
    sql = """
SELECT max(ts) AS last_ts, CAST(count(*) FILTER (WHERE ts >= ?) AS BIGINT) AS recent
FROM file_access
"""
    row = store.query(sql, [since]).to_pylist()[0]
    return {"last_ts": row["last_ts"], "recent": int(row["recent"] or 0)}
