"""dcgm-exporter ``/metrics`` page -> one Arrow row per GPU (or MIG instance), with its job(s).

A dcgm-exporter page has one series per (field, GPU[, MIG instance][, job]):
``DCGM_FI_DEV_GPU_UTIL{gpu="3",UUID=...,GPU_I_PROFILE=...,GPU_I_ID=...,hostname=...,hpc_job=...}``.
This module turns a parsed page into rows of :data:`hpcscope.model.schemas.GPU_SAMPLE_SCHEMA`:
one row per (node, ``gpu``, ``GPU_I_ID``) with every mapped field in its column, in base units
(the factors live in :mod:`hpcscope.ingest.dcgm_fields`, nowhere else).

- ``hpc_job``: with ``--hpc-job-mapping-dir`` the exporter writes a copy of every series of a GPU
  per line of that GPU's mapping file. The copies carry the same counters, so they make one
  row of the GPU with the list of their ``hpc_job`` labels (:func:`readings_table`: what the
  collector stores); :func:`samples_table` (and :attr:`DcgmConversion.table`) still gives one
  row per (GPU, job), a GPU shared by two jobs twice. ``hpc_job`` of ``""`` or ``"0"`` means no
  job.
- Host: ``Hostname`` (exporters before NVIDIA/dcgm-exporter PR #655) or ``hostname``; the
  ``node`` argument (the topology's node name) wins over it, and the values seen are reported
  so the collector can flag a target that serves another host's page.
- DCGM blank sentinels (unsupported/missing values) are dropped and counted, never stored.
- Series that cannot be placed on a GPU row (no ``gpu`` label, such as placeholder series, or
  per-NVLink/NVSwitch entities) are counted as unattributed; names of fields with no column are
  reported in ``unknown_fields``.

:class:`DcgmConverter` caches the decision for each series id of a parser's series table
(row key, column, unit factor, blank rule), so converting the next scrape of the same target
is a few vectorised numpy operations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from hpcscope.ingest.dcgm_fields import (
    COLUMN_OF_FIELD,
    FIELDS_BY_EXPORTED_NAME,
    FP64_BLANK_AT,
    INT32_BLANKS,
    INT64_BLANK_AT,
)
from hpcscope.ingest.exporters.dcgm_tables import (
    COLUMNS,
    PLATFORM_JOB_IDS,
    DcgmConversion,
    GpuKey,
    key_columns_of,
    readings_table,
    samples_table,
)
from hpcscope.ingest.exposition.parser import ParsedPage, Series
from hpcscope.model.errors import SourceError
from hpcscope.model.sampling import job_id_from_label
from hpcscope.model.timeutil import epoch_micros

__all__ = [
    "PLATFORM_JOB_IDS",
    "DcgmConversion",
    "DcgmConverter",
    "dcgm_page_to_samples",
    "readings_table",
    "samples_table",
]

_COLUMN_INDEX = {column: index for index, column in enumerate(COLUMNS)}
_HOST_LABELS = ("hostname", "Hostname")
_ENTITY_LABELS = ("nvlink", "nvswitch", "cpu", "cpucore")
_INT16_MAX = 2**15 - 1
_INT32_BLANK_LOW = min(INT32_BLANKS)
_INT32_BLANK_HIGH = max(INT32_BLANKS)

_UNMAPPED = -1  # a field with no column
_UNPLACED = -2  # a mapped field that cannot be put on a GPU row

RowKey = tuple[str | None, int, int | None, str | None]
"""(host label value, gpu, MIG instance id, job id): what one series belongs to."""


@dataclass(frozen=True, slots=True)
class _Plan:
    """What a page with exactly these series ids becomes, whatever its values."""

    series_ids: list[int]
    node: str | None
    keys: tuple[GpuKey, ...]
    jobs: tuple[tuple[str, ...], ...]
    """Per row, its ``hpc_job`` labels (sorted, no-job labels left out)."""
    key_columns: list[pa.Array]
    take: npt.NDArray[np.intp]
    """Positions in the page of the samples that land in a cell (the last one per cell)."""
    row: npt.NDArray[np.intp]
    column: npt.NDArray[np.intp]
    factor: npt.NDArray[np.float64]
    blank_at: npt.NDArray[np.float64]
    int_field: npt.NDArray[np.bool_]
    hostnames: frozenset[str]
    unknown: frozenset[str]
    unattributed: int


class DcgmConverter:
    """Converts the pages of one target; caches per-series decisions between scrapes.

    Use one converter per :class:`~hpcscope.ingest.exposition.parser.ExpositionParser`: the cache is
    indexed by that parser's series ids and is rebuilt when the parser compacts its table. When
    a page has the same series as the previous one (the steady state), only its values are
    read: a handful of numpy operations.
    """

    def __init__(self) -> None:
        self._table: Sequence[Series] | None = None
        self._reset()

    def _reset(self) -> None:
        self._plan: _Plan | None = None
        self._keys: list[RowKey] = []
        self._key_index: dict[RowKey, int] = {}
        self._hosts: list[str] = []
        self._host_index: dict[str, int] = {}
        self._column: list[int] = []
        self._row_key: list[int] = []
        self._host: list[int] = []
        self._factor: list[float] = []
        self._blank_at: list[float] = []
        self._int_field: list[bool] = []
        self._name: list[str] = []
        self._errors: list[SourceError] = []
        self._arrays: _DecisionArrays | None = None

    def convert(
        self,
        page: ParsedPage,
        series: Sequence[Series] | None = None,
        *,
        ts: datetime,
        node: str | None = None,
    ) -> DcgmConversion:
        """Rows of ``page`` scraped at ``ts`` (UTC; a naive datetime is read as UTC).

        Args:
            page: a parsed dcgm-exporter page.
            series: the series table ``page.series_ids`` index (default: ``page.series``).
            ts: scrape time, stored in every row.
            node: the node the target belongs to; when None the host label names it.
        """
        table = page.series if series is None else series
        errors_before = len(self._errors)
        self._learn(table, page.source)
        plan = self._plan
        if plan is None or plan.node != node or plan.series_ids != page.series_ids:
            plan = self._plan = self._make_plan(page.series_ids, node)
        values = np.fromiter(page.values, dtype=np.float64, count=len(page.values))[plan.take]
        blank = (values >= plan.blank_at) | (
            plan.int_field & (values >= _INT32_BLANK_LOW) & (values <= _INT32_BLANK_HIGH)
        )
        dropped = int(np.count_nonzero(blank))
        matrix = np.zeros((len(plan.keys), len(COLUMNS)), dtype=np.float64)
        present = np.zeros((len(plan.keys), len(COLUMNS)), dtype=bool)
        keys: Sequence[GpuKey] = plan.keys
        jobs: Sequence[tuple[str, ...]] = plan.jobs
        key_columns: list[pa.Array] | None = plan.key_columns
        if dropped:
            keep = ~blank
            matrix[plan.row[keep], plan.column[keep]] = values[keep] * plan.factor[keep]
            present[plan.row[keep], plan.column[keep]] = True
            filled = np.asarray(present.any(axis=1), dtype=bool)
            if not filled.all():  # a row of nothing but blanks is no row, as for a gap
                matrix, present = matrix[filled], present[filled]
                keys = [key for key, kept in zip(plan.keys, filled, strict=True) if kept]
                jobs = [job for job, kept in zip(plan.jobs, filled, strict=True) if kept]
                key_columns = None
        else:
            matrix[plan.row, plan.column] = values * plan.factor
            present[plan.row, plan.column] = True
        return DcgmConversion(
            keys=keys,
            jobs=jobs,
            key_columns=key_columns,
            matrix=matrix,
            present=present,
            ts_micros=epoch_micros(ts),
            unknown_fields=plan.unknown,
            dropped_blank=dropped,
            hostnames=plan.hostnames,
            unattributed=plan.unattributed,
            errors=tuple(self._errors[errors_before:]),
        )

    def _make_plan(self, series_ids: list[int], node: str | None) -> _Plan:
        arrays = self._decision_arrays()
        sids = np.fromiter(series_ids, dtype=np.intp, count=len(series_ids))
        positions = np.arange(len(sids))
        host_ids = np.unique(arrays.host[sids])
        hostnames = frozenset(self._hosts[h] for h in host_ids if h >= 0)
        columns = arrays.column[sids]
        unknown = frozenset(self._name[s] for s in np.unique(sids[columns == _UNMAPPED]))
        unattributed = int(np.count_nonzero(columns == _UNPLACED))
        mapped = columns >= 0
        sids, positions, columns = sids[mapped], positions[mapped], columns[mapped]
        row_keys = arrays.row_key[sids]
        key_ids = np.unique(row_keys)
        keys = [self._keys[k] for k in key_ids]
        rows = self._rows(keys, node)
        row_of_key = np.full(len(self._keys), -1, dtype=np.intp)
        for row, (ids, _) in enumerate(rows.values()):
            row_of_key[ids] = row
        row_index = row_of_key[row_keys]
        placed = row_index >= 0
        unattributed += int(np.count_nonzero(~placed))
        sids, positions = sids[placed], positions[placed]
        row_index, columns = row_index[placed], columns[placed]
        # One sample per cell: the page's last (the hpc_job copies of a GPU, which carry the
        # same counters, a repeated series, or several hosts' pages served by one target and
        # attributed to one node).
        cells = row_index * len(COLUMNS) + columns
        _, last_reversed = np.unique(cells[::-1], return_index=True)
        last = np.sort(len(cells) - 1 - last_reversed)
        sids = sids[last]
        ordered_keys = tuple(rows)
        ordered_jobs = tuple(jobs for _, jobs in rows.values())
        return _Plan(
            series_ids=list(series_ids),
            node=node,
            keys=ordered_keys,
            jobs=ordered_jobs,
            key_columns=key_columns_of(list(ordered_keys), list(ordered_jobs)),
            take=positions[last],
            row=row_index[last],
            column=columns[last],
            factor=arrays.factor[sids],
            blank_at=arrays.blank_at[sids],
            int_field=arrays.int_field[sids],
            hostnames=hostnames,
            unknown=unknown,
            unattributed=unattributed,
        )

    def _rows(
        self, keys: list[RowKey], node: str | None
    ) -> dict[GpuKey, tuple[list[int], tuple[str, ...]]]:
        """Output rows (node, gpu, instance) in order, each with the key ids it gathers and
        the job labels of those keys."""
        gathered: dict[GpuKey, tuple[list[int], set[str]]] = {}
        for key in keys:
            host, gpu, instance, job = key
            row_node = node if node is not None else host
            if row_node is None:
                continue
            ids, jobs = gathered.setdefault((row_node, gpu, instance), ([], set()))
            ids.append(self._key_index[key])
            if job is not None:
                jobs.add(job)
        ordered = sorted(
            gathered.items(),
            key=lambda item: (item[0][0], item[0][1], item[0][2] is not None, item[0][2] or 0),
        )
        return {key: (ids, tuple(sorted(jobs))) for key, (ids, jobs) in ordered}

    # -- per-series decisions ---------------------------------------------------------------

    def _learn(self, table: Sequence[Series], source: str) -> None:
        """Decide for every series id not seen yet; start over if the table was replaced."""
        if table is not self._table:
            self._reset()
            self._table = table
        for sid in range(len(self._column), len(table)):
            self._decide(sid, table[sid], source)

    def _decide(self, sid: int, series: Series, source: str) -> None:
        labels = dict(series.labels)
        host = next((labels[name] for name in _HOST_LABELS if name in labels), None)
        host_id = -1
        if host is not None:
            host_id = self._host_index.setdefault(host, len(self._hosts))
            if host_id == len(self._hosts):
                self._hosts.append(host)
        self._name.append(series.name)
        self._host.append(host_id)
        dcgm_field = FIELDS_BY_EXPORTED_NAME.get(series.name)
        column_name = COLUMN_OF_FIELD.get(dcgm_field.name) if dcgm_field is not None else None
        column = _UNMAPPED if column_name is None else _COLUMN_INDEX[column_name]
        row_key = -1
        if column >= 0:
            key = self._row_key_of(series, labels, host, source)
            if key is None:
                column = _UNPLACED
            else:
                row_key = self._key_index.setdefault(key, len(self._keys))
                if row_key == len(self._keys):
                    self._keys.append(key)
        self._column.append(column)
        self._row_key.append(row_key)
        is_float = dcgm_field is not None and dcgm_field.value_type == "float"
        self._factor.append(dcgm_field.factor if dcgm_field is not None else 1.0)
        self._blank_at.append(FP64_BLANK_AT if is_float else INT64_BLANK_AT)
        self._int_field.append(not is_float)

    def _row_key_of(
        self, series: Series, labels: dict[str, str], host: str | None, source: str
    ) -> RowKey | None:
        if "gpu" not in labels or any(name in labels for name in _ENTITY_LABELS):
            return None
        gpu = _small_int(labels["gpu"])
        instance = _small_int(labels["GPU_I_ID"]) if "GPU_I_ID" in labels else None
        if gpu is None or ("GPU_I_ID" in labels and instance is None):
            self._errors.append(
                SourceError(
                    "gpu and GPU_I_ID labels must be small non-negative integers, got "
                    f"gpu={labels['gpu']!r}"
                    + (f", GPU_I_ID={labels['GPU_I_ID']!r}" if "GPU_I_ID" in labels else ""),
                    source=source,
                    field=series.name,
                )
            )
            return None
        return (host, gpu, instance, job_id_from_label(labels.get("hpc_job")))

    def _decision_arrays(self) -> _DecisionArrays:
        """The decisions as arrays; the series learnt since the last call are appended (a new
        ``hpc_job`` adds a few series: not a copy of every decision made so far)."""
        done = 0 if self._arrays is None else len(self._arrays.column)
        if self._arrays is None or done < len(self._column):
            tail = _DecisionArrays(
                column=np.array(self._column[done:], dtype=np.intp),
                row_key=np.array(self._row_key[done:], dtype=np.intp),
                host=np.array(self._host[done:], dtype=np.intp),
                factor=np.array(self._factor[done:], dtype=np.float64),
                blank_at=np.array(self._blank_at[done:], dtype=np.float64),
                int_field=np.array(self._int_field[done:], dtype=bool),
            )
            self._arrays = tail if self._arrays is None else self._arrays.extended(tail)
        return self._arrays


@dataclass(frozen=True, slots=True)
class _DecisionArrays:
    column: npt.NDArray[np.intp]
    row_key: npt.NDArray[np.intp]
    host: npt.NDArray[np.intp]
    factor: npt.NDArray[np.float64]
    blank_at: npt.NDArray[np.float64]
    int_field: npt.NDArray[np.bool_]

    def extended(self, tail: _DecisionArrays) -> _DecisionArrays:
        """These decisions followed by ``tail``'s."""
        return _DecisionArrays(
            column=np.concatenate((self.column, tail.column)),
            row_key=np.concatenate((self.row_key, tail.row_key)),
            host=np.concatenate((self.host, tail.host)),
            factor=np.concatenate((self.factor, tail.factor)),
            blank_at=np.concatenate((self.blank_at, tail.blank_at)),
            int_field=np.concatenate((self.int_field, tail.int_field)),
        )


def _small_int(text: str) -> int | None:
    if not text.isascii() or not text.isdigit():
        return None
    number = int(text)
    return number if number <= _INT16_MAX else None


def dcgm_page_to_samples(
    page: ParsedPage,
    series: Sequence[Series],
    *,
    ts: datetime,
    node: str | None = None,
) -> DcgmConversion:
    """Rows of one dcgm-exporter page, without a cache (see :class:`DcgmConverter`)."""
    return DcgmConverter().convert(page, series, ts=ts, node=node)
