"""Instant-vector answers decoded column-wise, and joined on the job GPU they hold.

The prometheus backend's reads of the recording rules ask one instant query per column and
get one value per job GPU in each: 24 answers of 1,024 series for a 1024-GPU job. Decoding
each series into its own :class:`~hpcscope.ingest.promql.Series` (two NumPy arrays of one
value) and joining them one value at a time cost more than the engine took to answer (about
10 ms of Python per answer). Here an answer is decoded into one list of label sets and one
array of values (:class:`Vector`), each distinct label set is parsed into its GPU key once per
read, and the columns are joined with one Python step per series; the table is the one
:func:`hpcscope.ingest.promql.aggregates.gpu_table` makes of the same answers (a test holds
the two equal).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import msgspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from hpcscope.ingest.promql import PromqlResponseError
from hpcscope.ingest.promql.aggregates import GpuKey, gpu_key, to_datetime
from hpcscope.ingest.promql.answer import answer_data

__all__ = ["Vector", "decode_vector", "gpu_columns"]


class _Point(msgspec.Struct, frozen=True):
    metric: dict[str, str]
    value: tuple[float, str]


_POINTS = msgspec.json.Decoder(list[_Point])


@dataclass(frozen=True, slots=True)
class Vector:
    """An instant-vector answer: the label sets of its series and their values (float64,
    NaN where the engine wrote NaN), in the engine's order."""

    labels: list[dict[str, str]]
    values: npt.NDArray[np.float64]

    def __len__(self) -> int:
        return len(self.labels)


def decode_vector(body: bytes, *, source: str) -> Vector:
    """Decode an instant query's answer (``resultType`` ``vector``).

    Raises:
        PromqlResponseError: not JSON, ``status`` not success, another result type, a point
            that is no ``[time, "value"]`` pair, a value that is no number.
    """
    kind, result = answer_data(body, source=source)
    if kind != "vector":
        raise PromqlResponseError(
            f"unexpected result type {kind!r} (an instant vector asked)",
            source=source,
            field="data.resultType",
        )
    try:
        points = _POINTS.decode(result)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as error:
        raise PromqlResponseError(
            f"bad vector: {error}", source=source, field="data.result"
        ) from error
    texts = [p.value[1] for p in points]
    try:
        values = np.array(texts, dtype=np.float64) if texts else np.empty(0, np.float64)
    except ValueError as error:
        raise PromqlResponseError(
            f"not a number: {error}", source=source, field="data.result"
        ) from error
    return Vector([p.metric for p in points], values)


def _keys(
    labels: list[dict[str, str]],
    known: dict[tuple[tuple[str, str], ...], GpuKey | None],
    *,
    source: str,
    column: str,
) -> list[GpuKey | None]:
    keys: list[GpuKey | None] = []
    for index, one in enumerate(labels):
        seen = tuple(one.items())
        if seen in known:
            keys.append(known[seen])
        else:
            key = known[seen] = gpu_key(one, source=source, where=f"{column}[{index}]")
            keys.append(key)
    return keys


def gpu_columns(
    columns: Mapping[str, Vector],
    *,
    schema: pa.Schema,
    factors: Mapping[str, float] | None = None,
    source: str,
) -> pa.Table:
    """One row per job GPU with a value in any answer (the newest value of each series, times
    the column's factor), null where its answer has none: what
    :func:`~hpcscope.ingest.promql.aggregates.gpu_table` makes of the same answers.

    Args:
        columns: column name -> its answer.
        schema: the table's schema: ``job_id``, ``node``, ``gpu``, ``gpu_instance_id`` and the
            columns (timestamp columns take epoch seconds).
        factors: multiply a column's values by this (to base units).
        source: what errors name.
    """
    known: dict[tuple[tuple[str, str], ...], GpuKey | None] = {}
    # every answer of a read names the same GPUs, mostly in one order: one key list per order
    orders: list[tuple[list[dict[str, str]], list[GpuKey | None]]] = []
    keyed: dict[str, list[GpuKey | None]] = {}
    for column, answer in columns.items():
        keys = next((k for labels, k in orders if labels == answer.labels), None)
        if keys is None:
            keys = _keys(answer.labels, known, source=source, column=column)
            orders.append((answer.labels, keys))
        keyed[column] = keys
    rows: dict[GpuKey, None] = {}
    for column, answer in columns.items():
        present = ~np.isnan(answer.values)
        for key, value_present in zip(keyed[column], present.tolist(), strict=True):
            if key is not None and value_present:
                rows[key] = None
    ordered = sorted(rows, key=lambda k: (k[1], k[2], k[3] if k[3] is not None else -1, k[0] or ""))
    position = {key: index for index, key in enumerate(ordered)}
    filled: dict[str, npt.NDArray[np.float64]] = {}
    for column, answer in columns.items():
        out = np.full(len(ordered), math.nan)
        scaled = answer.values * (factors or {}).get(column, 1.0)
        for key, value in zip(keyed[column], scaled.tolist(), strict=True):
            if key is not None and not math.isnan(value):
                out[position[key]] = value  # the last series of a GPU wins, as in gpu_table
        filled[column] = out
    arrays = []
    for field in schema:
        if field.name == "job_id":
            data: list[object] | pa.Array = [k[0] for k in ordered]
        elif field.name == "node":
            data = [k[1] for k in ordered]
        elif field.name == "gpu":
            data = [k[2] for k in ordered]
        elif field.name == "gpu_instance_id":
            data = [k[3] for k in ordered]
        elif field.name not in filled:
            data = pa.nulls(len(ordered), field.type)
        else:
            values = filled[field.name]
            if pa.types.is_timestamp(field.type):
                data = [None if math.isnan(v) else to_datetime(v) for v in values.tolist()]
            elif pa.types.is_integer(field.type):
                data = [None if math.isnan(v) else round(v) for v in values.tolist()]
            else:
                data = pa.array(values, type=field.type, from_pandas=True)
        arrays.append(data if isinstance(data, pa.Array) else pa.array(data, type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)
