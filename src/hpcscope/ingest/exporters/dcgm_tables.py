"""The rows of converted dcgm-exporter pages, as Arrow tables.

A :class:`DcgmConversion` holds one page's GPU rows as a numpy matrix (one column per mapped
field); :func:`readings_table` assembles one Arrow table of the GPU rows of many pages (what the
collector stores), :func:`samples_table` one row per (GPU, ``hpc_job`` label). The conversion
itself is :class:`hpcscope.ingest.exporters.dcgm.DcgmConverter`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from hpcscope.model.errors import SourceError
from hpcscope.model.schemas import GPU_METRICS, GPU_SAMPLE_SCHEMA, TS

#: The metric columns of GPU_SAMPLE_SCHEMA, in the order of a conversion's matrix.
COLUMNS = [metric.column for metric in GPU_METRICS]
_INTEGER_COLUMNS = frozenset(
    index
    for index, column in enumerate(COLUMNS)
    if pa.types.is_integer(GPU_SAMPLE_SCHEMA.field(column).type)
)

GpuKey = tuple[str, int, int | None]
"""(node, gpu, MIG instance id): one output row."""

#: The column of :func:`readings_table` with the ``hpc_job`` labels of each GPU row.
PLATFORM_JOB_IDS = "platform_job_ids"


class DcgmConversion:
    """The rows of one page, and what did not make it into them.

    The Arrow :attr:`table` is built on first access: a collector that stores many pages at
    once builds one table for all of them with :func:`samples_table` instead (a small Arrow
    table costs ~0.1 ms to assemble whatever its size).
    """

    __slots__ = (
        "_jobs",
        "_key_columns",
        "_keys",
        "_matrix",
        "_present",
        "_table",
        "_ts_micros",
        "dropped_blank",
        "errors",
        "hostnames",
        "unattributed",
        "unknown_fields",
    )

    def __init__(
        self,
        *,
        keys: Sequence[GpuKey],
        jobs: Sequence[tuple[str, ...]],
        key_columns: list[pa.Array] | None,
        matrix: npt.NDArray[np.float64],
        present: npt.NDArray[np.bool_],
        ts_micros: int,
        unknown_fields: frozenset[str],
        dropped_blank: int,
        hostnames: frozenset[str],
        unattributed: int,
        errors: tuple[SourceError, ...],
    ) -> None:
        self._keys = keys
        self._jobs = jobs
        self._key_columns = key_columns
        self._matrix = matrix
        self._present = present
        self._ts_micros = ts_micros
        self._table: pa.Table | None = None
        self.unknown_fields = unknown_fields
        """Metric names on the page that feed no column (other exporters' fields, ENC_UTIL...)."""
        self.dropped_blank = dropped_blank
        """Samples dropped because their value was a DCGM blank sentinel."""
        self.hostnames = hostnames
        """Values of the ``Hostname``/``hostname`` label seen on the page."""
        self.unattributed = unattributed
        """Samples of mapped fields that belong to no GPU row (no ``gpu`` label, link entities,
        or no host label when no node was given)."""
        self.errors = errors
        """Series with labels that make no sense (a ``gpu`` that is not a small integer)."""

    @property
    def table(self) -> pa.Table:
        """Rows of GPU_SAMPLE_SCHEMA, one per (GPU, job), sorted by (node, gpu,
        gpu_instance_id, job_id)."""
        if self._table is None:
            self._table = samples_table([self])
        return self._table

    @property
    def rows(self) -> int:
        """Number of rows in :attr:`table` (a GPU with two ``hpc_job`` copies counts twice)."""
        return sum(max(1, len(jobs)) for jobs in self._jobs)

    @property
    def gpu_rows(self) -> int:
        """Number of GPU (or MIG instance) rows: the rows of :func:`readings_table`."""
        return len(self._keys)


def key_columns_of(keys: list[GpuKey], jobs: list[tuple[str, ...]]) -> list[pa.Array]:
    """node, gpu, gpu_instance_id and the job labels (a list per row) of GPU rows."""
    return [
        pa.array([key[0] for key in keys], type=pa.string()),
        pa.array([key[1] for key in keys], type=pa.int16()),
        pa.array([key[2] for key in keys], type=pa.int16()),
        pa.array(jobs, type=pa.list_(pa.string())),
    ]


_READINGS_SCHEMA = pa.schema(
    [*GPU_SAMPLE_SCHEMA, pa.field(PLATFORM_JOB_IDS, pa.list_(pa.string()))]
)


def readings_table(conversions: Sequence[DcgmConversion]) -> pa.Table:
    """One row per GPU (or MIG instance) of several pages, in their order.

    Columns: GPU_SAMPLE_SCHEMA with ``job_id`` null, then :data:`PLATFORM_JOB_IDS`, the
    ``hpc_job`` labels of the GPU's copies (empty: no job). The job is decided by the
    platform's allocations when the rows are stored (``service/collect/attribution.py``).
    Assembling one table for a whole scrape round (128 pages for 1,024 GPUs) instead of one
    per page saves the fixed cost of building small Arrow tables.
    """
    parts = [conversion for conversion in conversions if conversion.gpu_rows]
    if len(parts) == 1 and parts[0]._key_columns is not None:
        key_columns = parts[0]._key_columns
    else:
        key_columns = key_columns_of(
            [key for part in parts for key in part._keys],
            [jobs for part in parts for jobs in part._jobs],
        )
    count = sum(part.gpu_rows for part in parts)
    width = len(COLUMNS)
    matrix = np.concatenate([part._matrix for part in parts]) if parts else np.zeros((0, width))
    present = (
        np.concatenate([part._present for part in parts])
        if parts
        else np.zeros((0, width), dtype=bool)
    )
    stamps = np.repeat(
        np.array([part._ts_micros for part in parts], dtype=np.int64),
        [part.gpu_rows for part in parts],
    )
    node, gpu, instance, labels = key_columns
    arrays: list[pa.Array] = [
        pa.array(stamps, type=TS),
        node,
        gpu,
        instance,
        pa.nulls(count, pa.string()),
    ]
    # One Arrow array per type for all metric columns (column-major), sliced per column:
    # two conversions instead of one per column.
    missing = ~present.T.ravel()
    floats = pa.array(matrix.T.ravel(), mask=missing, type=pa.float64())
    ints = pa.array(matrix.T.astype(np.int64).ravel(), mask=missing, type=pa.int64())
    for index in range(width):
        source = ints if index in _INTEGER_COLUMNS else floats
        arrays.append(source.slice(index * count, count))
    arrays.append(labels)
    batch = pa.RecordBatch.from_arrays(arrays, schema=_READINGS_SCHEMA)
    return pa.Table.from_batches([batch])


def samples_table(conversions: Sequence[DcgmConversion]) -> pa.Table:
    """GPU_SAMPLE_SCHEMA rows of several pages, one per (GPU, ``hpc_job`` label), in order.

    A GPU with no label is one row with a null ``job_id``; a GPU shared by two jobs is two
    rows with the same counters (the shape of the exporter's copies).
    """
    readings = readings_table(conversions)
    labels = readings.column(PLATFORM_JOB_IDS).combine_chunks()
    assert isinstance(labels, pa.ListArray)
    lengths = pc.list_value_length(labels).to_numpy(zero_copy_only=False)
    taken = np.repeat(np.arange(len(labels)), np.maximum(lengths, 1))
    out = readings.drop_columns([PLATFORM_JOB_IDS]).take(pa.array(taken, type=pa.int64()))
    jobs: list[str | None] = []
    for row in labels.to_pylist():
        jobs.extend(row or [None])
    index = out.schema.get_field_index("job_id")
    return out.set_column(index, out.schema.field(index), pa.array(jobs, type=pa.string()))
