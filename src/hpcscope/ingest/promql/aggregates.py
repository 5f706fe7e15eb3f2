"""Instant-query answers over job GPUs (one value per series) -> hpcscope's per-GPU tables.

The prometheus backend asks its engine one question per column (``sum_over_time`` of a
recording rule over a window, ``timestamp`` of the newest sample...); every answer holds one
value per job GPU, keyed by its labels. This module joins the answers on the GPU: ``node``
(:func:`~hpcscope.ingest.promql.matrix.node_of`), ``gpu``, ``GPU_I_ID`` and ``hpc_job``, and
writes one row per GPU in base units. A series without ``gpu`` or a node is not a GPU's and is
skipped; a bad ``gpu`` label raises :class:`~hpcscope.ingest.promql.PromqlResponseError`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import pyarrow as pa

from hpcscope.ingest.promql.answer import Series
from hpcscope.ingest.promql.matrix import gpu_index, node_of
from hpcscope.model.sampling import job_id_from_label

__all__ = ["BUCKET_SCHEMA", "GpuKey", "bucket_table", "gpu_key", "gpu_table", "to_datetime"]

GpuKey = tuple[str | None, str, int, int | None]
"""(job id, node, gpu, MIG instance id)."""


def gpu_key(labels: dict[str, str], *, source: str, where: str) -> GpuKey | None:
    """The job GPU a series belongs to, None when it is no GPU's."""
    node = node_of(labels)
    if node is None or "gpu" not in labels:
        return None
    gpu = gpu_index(labels["gpu"], source=source, where=f"{where}.metric.gpu")
    instance_label = labels.get("GPU_I_ID")
    instance = (
        gpu_index(instance_label, source=source, where=f"{where}.metric.GPU_I_ID")
        if instance_label not in (None, "")
        else None
    )
    return job_id_from_label(labels.get("hpc_job")), node, gpu, instance


def to_datetime(epoch_seconds: float) -> datetime:
    """Naive UTC, as the store keeps times."""
    return datetime.fromtimestamp(epoch_seconds, tz=UTC).replace(tzinfo=None)


def gpu_table(
    columns: Mapping[str, Sequence[Series]],
    *,
    schema: pa.Schema,
    factors: Mapping[str, float] | None = None,
    source: str,
) -> pa.Table:
    """One row per job GPU found in any answer; each column from its answer (the newest value
    of each series, times the column's factor), null where its answer has no value.

    Args:
        columns: column name -> the series answering it.
        schema: the table's schema: ``job_id``, ``node``, ``gpu``, ``gpu_instance_id`` and the
            columns (timestamp columns take epoch seconds).
        factors: multiply a column's values by this (to base units).
        source: what errors name.
    """
    values: dict[GpuKey, dict[str, float]] = {}
    # every answer names the same GPUs: each label set is parsed once (the engine writes a
    # series' labels in one order: a set written in another is parsed again, no harm)
    keys_of: dict[tuple[tuple[str, str], ...], GpuKey | None] = {}
    for column, answer in columns.items():
        factor = (factors or {}).get(column, 1.0)
        for index, series in enumerate(answer):
            labels = series.labels
            seen = tuple(labels.items())
            if seen in keys_of:
                key = keys_of[seen]
            else:
                key = keys_of[seen] = gpu_key(labels, source=source, where=f"{column}[{index}]")
            if key is None or not series.values.size:
                continue
            value = float(series.values[-1])
            if math.isnan(value):
                continue
            values.setdefault(key, {})[column] = value * factor
    keys = sorted(values, key=lambda k: (k[1], k[2], k[3] if k[3] is not None else -1, k[0] or ""))
    arrays = []
    for field in schema:
        if field.name == "job_id":
            data: list[object] = [k[0] for k in keys]
        elif field.name == "node":
            data = [k[1] for k in keys]
        elif field.name == "gpu":
            data = [k[2] for k in keys]
        elif field.name == "gpu_instance_id":
            data = [k[3] for k in keys]
        else:
            found: list[float | None] = [values[k].get(field.name) for k in keys]
            if pa.types.is_timestamp(field.type):
                data = [None if v is None else to_datetime(v) for v in found]
            elif pa.types.is_integer(field.type):
                data = [None if v is None else round(v) for v in found]
            else:
                data = list(found)
        arrays.append(pa.array(data, type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


BUCKET_SCHEMA = pa.schema(
    [
        pa.field("bucket", pa.timestamp("us")),
        pa.field("job_id", pa.string()),
        pa.field("node", pa.string()),
        pa.field("gpu", pa.int16()),
        pa.field("reported_util_ratio", pa.float64()),
        pa.field("sm_active_ratio", pa.float64()),
        pa.field("tensor_active_ratio", pa.float64()),
    ]
)
"""A job GPU's means per time bucket (``bucket``: its start)."""


def bucket_table(
    columns: Mapping[str, Sequence[Series]],
    *,
    bucket_seconds: float,
    factors: Mapping[str, float] | None = None,
    source: str,
    delay_seconds: float = 0.0,
) -> pa.Table:
    """:data:`BUCKET_SCHEMA` rows from ``query_range`` answers whose point at ``t`` is the mean
    of ``(t - delay_seconds - bucket_seconds, t - delay_seconds]`` (its bucket starts at
    ``t - delay_seconds - bucket_seconds``); sorted by bucket, job, node and GPU."""
    cells: dict[tuple[int, str | None, str, int], dict[str, float]] = {}
    for column, answer in columns.items():
        factor = (factors or {}).get(column, 1.0)
        for index, series in enumerate(answer):
            key = gpu_key(series.labels, source=source, where=f"{column}[{index}]")
            if key is None:
                continue
            job, node, gpu, _ = key
            for at, value in zip(series.times.tolist(), series.values.tolist(), strict=True):
                if math.isnan(value):
                    continue
                start_ms = round((at - delay_seconds - bucket_seconds) * 1000)
                cells.setdefault((start_ms, job, node, gpu), {})[column] = value * factor
    keys = sorted(cells, key=lambda k: (k[0], k[1] or "", k[2], k[3]))
    data: dict[str, list[object]] = {
        "bucket": [to_datetime(k[0] / 1000) for k in keys],
        "job_id": [k[1] for k in keys],
        "node": [k[2] for k in keys],
        "gpu": [k[3] for k in keys],
    }
    for name in ("reported_util_ratio", "sm_active_ratio", "tensor_active_ratio"):
        data[name] = [cells[k].get(name) for k in keys]
    return pa.Table.from_pydict(data, schema=BUCKET_SCHEMA)
