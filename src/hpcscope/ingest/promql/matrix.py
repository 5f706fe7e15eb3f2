"""A Prometheus ``matrix`` answer over dcgm-exporter series -> rows of ``GPU_SAMPLE_SCHEMA``.

``/api/v1/query_range`` answers (Prometheus, VictoriaMetrics, Thanos and Mimir write the same
JSON)::

    {"status": "success",
     "data": {"resultType": "matrix",
              "result": [{"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0",
                                     "node": "gpu01", "hpc_job": "4410001", ...},
                          "values": [[1764633600.123, "87"], ...]}, ...]}}

Each series is one (DCGM field, GPU[, MIG instance][, job]); this module puts every value in
the same cell the embedded collector would (:mod:`hpcscope.ingest.exporters.dcgm` for a page):
one row per (time, node, ``gpu``, ``GPU_I_ID``, ``hpc_job``), every field in its column, in
base units (factors from :mod:`hpcscope.ingest.dcgm_fields`, nowhere else), DCGM blank sentinels
and NaN dropped.

- Node: the ``node`` label (the target label hpcscope's file_sd targets carry, and that a site's
  relabelling sets), else ``hostname``/``Hostname`` (the exporter's own), else the host of
  ``instance``.
- Series with no ``gpu`` label (placeholders, per-link entities) and metric names with no
  column are skipped: they are not GPU samples.
- Bad answers (not JSON, ``status: error``, not a matrix, a ``gpu`` that is no small integer, a
  value that is no number) raise :class:`PromqlResponseError` naming the source and the JSON
  path of the culprit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, cast

import pyarrow as pa

from hpcscope.ingest.dcgm_fields import (
    COLUMN_OF_FIELD,
    FIELDS_BY_EXPORTED_NAME,
    ValueType,
    is_blank,
)
from hpcscope.ingest.promql.answer import PromqlResponseError, Series
from hpcscope.model.bounds import loads_json
from hpcscope.model.sampling import job_id_from_label
from hpcscope.model.schemas import GPU_METRICS, GPU_SAMPLE_SCHEMA

__all__ = [
    "DCGM_METRIC_NAMES",
    "PromqlResponseError",
    "dcgm_instant_to_samples",
    "dcgm_matrix_to_samples",
    "dcgm_series_selector",
    "dcgm_series_to_samples",
    "gpu_index",
    "job_matcher",
    "node_of",
    "promql_string",
    "re2_escape",
]

_INT16_MAX = 2**15 - 1
#: ``gpu`` and ``GPU_I_ID`` labels as they usually come, parsed once.
_SMALL_INDEX = {str(i): i for i in range(256)}
_HOST_LABELS = ("node", "hostname", "Hostname")
_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")
_COLUMNS = [metric.column for metric in GPU_METRICS]
_INTEGER_COLUMNS = frozenset(
    column for column in _COLUMNS if pa.types.is_integer(GPU_SAMPLE_SCHEMA.field(column).type)
)

#: Every exported metric name (current, renamed, 1.x) of a field that feeds a column.
DCGM_METRIC_NAMES: tuple[str, ...] = tuple(
    sorted(name for name, field in FIELDS_BY_EXPORTED_NAME.items() if field.name in COLUMN_OF_FIELD)
)

RowKey = tuple[int, str, int, int | None, str | None]
"""(epoch milliseconds, node, gpu, MIG instance id, job id)."""


def re2_escape(text: str) -> str:
    return "".join(f"\\{char}" if char in _RE2_SPECIAL else char for char in text)


def promql_string(text: str) -> str:
    """A PromQL double-quoted string (Go escapes: control characters as ``\\xNN``)."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def job_matcher(job_ids: Sequence[str]) -> str:
    """The label matcher ``hpc_job=~"..."`` of exactly ``job_ids`` (matched literally)."""
    if not job_ids:
        raise ValueError("a matcher needs at least one job id")
    jobs = "|".join(re2_escape(job) for job in sorted(set(job_ids)))
    return f"hpc_job=~{promql_string(jobs)}"


def dcgm_series_selector(job_ids: Sequence[str]) -> str:
    """The PromQL selector of every dcgm-exporter series of ``job_ids`` (by ``hpc_job``).

    Job ids are matched literally (regex metacharacters escaped: Slurm's ``123_4`` and
    ``123+0`` are ids, not patterns)."""
    if not job_ids:
        raise ValueError("a selector needs at least one job id")
    names = "|".join(DCGM_METRIC_NAMES)
    return f"{{__name__=~{promql_string(names)},{job_matcher(job_ids)}}}"


def node_of(metric: Mapping[str, object]) -> str | None:
    """The node of a series (the module docstring: ``node``, ``hostname``, ``instance``)."""
    for label in _HOST_LABELS:
        value = metric.get(label)
        if isinstance(value, str) and value:
            return value
    instance = metric.get("instance")
    if isinstance(instance, str) and instance:
        return instance.rsplit(":", 1)[0] if not instance.endswith("]") else instance
    return None


def gpu_index(value: object, *, source: str, where: str) -> int:
    """A ``gpu`` or ``GPU_I_ID`` label as a small integer; a bad one names the culprit."""
    known = _SMALL_INDEX.get(value) if isinstance(value, str) else None
    if known is not None:
        return known
    if not isinstance(value, str) or not value.isdigit() or int(value) > _INT16_MAX:
        raise PromqlResponseError(f"{value!r} is not a GPU index", source=source, field=where)
    return int(value)


def _result(doc: object, source: str) -> list[Any]:
    if not isinstance(doc, dict):
        raise PromqlResponseError("the answer is not a JSON object", source=source)
    if doc.get("status") != "success":
        raise PromqlResponseError(
            f"the query failed: {doc.get('errorType', '?')}: {doc.get('error', '?')}",
            source=source,
            field="status",
        )
    data = doc.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        kind = data.get("resultType") if isinstance(data, dict) else None
        raise PromqlResponseError(
            f"expected a matrix, got {kind!r}", source=source, field="data.resultType"
        )
    result = data.get("result")
    if not isinstance(result, list):
        raise PromqlResponseError("no result list", source=source, field="data.result")
    return result


def dcgm_matrix_to_samples(body: bytes | str, *, source: str) -> pa.Table:
    """Rows of ``GPU_SAMPLE_SCHEMA`` from a ``query_range`` answer, sorted by (ts, node, gpu,
    gpu_instance_id, job_id).

    Args:
        body: the HTTP body of the answer.
        source: what to name in errors (the backend URL and query).
    """
    try:
        doc = loads_json(body, source=source)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        line = getattr(error, "lineno", None)
        column = getattr(error, "colno", None)
        raise PromqlResponseError(
            f"not JSON: {error}", source=source, line=line, column=column
        ) from error
    cells: dict[RowKey, dict[str, float]] = {}
    for index, series in enumerate(_result(doc, source)):
        where = f"data.result[{index}]"
        if not isinstance(series, dict) or not isinstance(series.get("metric"), dict):
            raise PromqlResponseError("a series without labels", source=source, field=where)
        metric: Mapping[str, object] = series["metric"]
        target = _cell_target(metric, source=source, where=where)
        if target is None:
            continue
        values = series.get("values")
        if not isinstance(values, list):
            raise PromqlResponseError("no values", source=source, field=f"{where}.values")
        for position, point in enumerate(values):
            try:
                ts_seconds, text = point
                value = float(text)
                millis = round(float(ts_seconds) * 1000)
            except (TypeError, ValueError) as error:
                raise PromqlResponseError(
                    f"{point!r} is not a [time, value] pair",
                    source=source,
                    field=f"{where}.values[{position}]",
                ) from error
            _put(cells, target, millis, value)
    return _table(cells)


_Target = tuple[str, float, ValueType, str, int, int | None, str | None]
"""(column, factor, value type, node, gpu, MIG instance, job) of one series."""


#: Per exported metric name that feeds a column: (column, factor, value type).
_COLUMN_OF_NAME: dict[str, tuple[str, float, ValueType]] = {
    name: (COLUMN_OF_FIELD[field.name], field.factor, field.value_type)
    for name, field in FIELDS_BY_EXPORTED_NAME.items()
    if field.name in COLUMN_OF_FIELD
}


def _cell_target(metric: Mapping[str, object], *, source: str, where: str) -> _Target | None:
    """Where a series' values go, None for a series that holds no GPU sample."""
    name = metric.get("__name__")
    known = _COLUMN_OF_NAME.get(name) if isinstance(name, str) else None
    gpu_label = metric.get("gpu")
    if known is None or gpu_label is None:
        return None
    node = node_of(metric)
    if node is None:
        return None
    gpu = gpu_index(gpu_label, source=source, where=f"{where}.metric.gpu")
    instance_label = metric.get("GPU_I_ID")
    instance = (
        gpu_index(instance_label, source=source, where=f"{where}.metric.GPU_I_ID")
        if instance_label not in (None, "")
        else None
    )
    job = job_id_from_label(cast("str | None", metric.get("hpc_job")))  # labels are strings
    column, factor, value_type = known
    return column, factor, value_type, node, gpu, instance, job


def _put(cells: dict[RowKey, dict[str, float]], target: _Target, millis: int, value: float) -> None:
    column, factor, value_type, node, gpu, instance, job = target
    if math.isnan(value) or is_blank(value, value_type):
        return
    cells.setdefault((millis, node, gpu, instance, job), {})[column] = value * factor


def dcgm_series_to_samples(
    series: Sequence[Series],
    *,
    source: str,
    at: Mapping[tuple[str | None, str, int, int | None], float] | None = None,
) -> pa.Table:
    """Rows of ``GPU_SAMPLE_SCHEMA`` from decoded series (:func:`decode_answer`), as
    :func:`dcgm_matrix_to_samples` makes them of the body.

    Args:
        series: the decoded series.
        source: what errors name.
        at: for an instant answer: per GPU key (job id, node, gpu, MIG instance), the epoch
            seconds every value of that GPU is put at (the time it was sampled); a series of
            a GPU not in it is skipped.
    """
    cells: dict[RowKey, dict[str, float]] = {}
    for index, one in enumerate(series):
        target = _cell_target(one.labels, source=source, where=f"data.result[{index}]")
        if target is None:
            continue
        if at is not None:
            _, _, _, node, gpu, instance, job = target
            when = at.get((job, node, gpu, instance))
            if when is not None and one.values.size:
                _put(cells, target, round(when * 1000), float(one.values[-1]))
            continue
        for stamp, value in zip(one.times.tolist(), one.values.tolist(), strict=True):
            _put(cells, target, round(stamp * 1000), value)
    return _table(cells)


def dcgm_instant_to_samples(
    labels: Sequence[Mapping[str, object]],
    values: Sequence[float],
    *,
    source: str,
    at: Mapping[tuple[str | None, str, int, int | None], float],
) -> pa.Table:
    """:func:`dcgm_series_to_samples` of an instant answer given column-wise: the label set
    and the value of each series (the same rows as of its :class:`Series`). The answers of
    several fields name the same GPUs: each GPU's labels are parsed once."""
    cells: dict[RowKey, dict[str, float]] = {}
    gpus: dict[tuple[object, ...], tuple[str, int, int | None, str | None] | None] = {}
    for index, (metric, value) in enumerate(zip(labels, values, strict=True)):
        name = metric.get("__name__")
        known = _COLUMN_OF_NAME.get(name) if isinstance(name, str) else None
        if known is None:
            continue
        seen = (
            metric.get("node"),
            metric.get("hostname"),
            metric.get("Hostname"),
            metric.get("instance"),
            metric.get("gpu"),
            metric.get("GPU_I_ID"),
            metric.get("hpc_job"),
        )
        if seen in gpus:
            gpu = gpus[seen]
        else:
            target = _cell_target(metric, source=source, where=f"data.result[{index}]")
            gpu = gpus[seen] = None if target is None else target[3:]
        if gpu is None:
            continue
        node, number, instance, job = gpu
        when = at.get((job, node, number, instance))
        if when is not None:
            _put(cells, (*known, *gpu), round(when * 1000), value)
    return _table(cells)


def _table(cells: dict[RowKey, dict[str, float]]) -> pa.Table:
    keys = sorted(
        cells, key=lambda k: (k[0], k[1], k[2], k[3] if k[3] is not None else -1, k[4] or "")
    )
    columns: dict[str, list[Any]] = {
        "ts": [key[0] * 1000 for key in keys],
        "node": [key[1] for key in keys],
        "gpu": [key[2] for key in keys],
        "gpu_instance_id": [key[3] for key in keys],
        "job_id": [key[4] for key in keys],
    }
    for column in _COLUMNS:
        found = [cells[key].get(column) for key in keys]
        if column in _INTEGER_COLUMNS:
            columns[column] = [None if v is None else round(v) for v in found]
        else:
            columns[column] = found
    arrays = [
        pa.array(columns[f.name], type=pa.int64() if f.name == "ts" else f.type)
        for f in GPU_SAMPLE_SCHEMA
    ]
    arrays[0] = arrays[0].cast(GPU_SAMPLE_SCHEMA.field("ts").type)
    return pa.Table.from_arrays(arrays, schema=GPU_SAMPLE_SCHEMA)
