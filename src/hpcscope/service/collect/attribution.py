"""GPU -> job -> user -> account, from the platform's own mapping and Slurm's records.

Two pieces:

* :class:`MappingCollector` reads one node's hpc-job-mapping directory (the files dcgm-exporter
  ``--hpc-job-mapping-dir`` and the twin's dcgm endpoints read) and the prolog's job records,
  and keeps ``job_allocations`` (and the prolog's view of ``jobs``) up to date. It runs where the
  directory is: on the node (agent mode), or on a server that sees the node directories (shared
  storage, the twin's state directory).
* :func:`attribute_samples` gives every GPU sample its job from those allocations
  (:func:`hpcscope.analysis.jobs.attribution.attribute_gpu_samples`), the dcgm-exporter ``hpc_job``
  label only as a fallback, and a self-reported id never; and :func:`store_attributed` appends
  them to ``gpu_samples``. User and account come from the ``jobs`` table
  (:func:`attributed_samples`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import cast

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from hpcscope.analysis.jobs.attribution import Attribution, attribute_gpu_samples
from hpcscope.ingest.exporters.dcgm import PLATFORM_JOB_IDS
from hpcscope.ingest.slurm.jobmap import read_job_records, read_mapping_dir, records_snapshot
from hpcscope.model.schemas import GPU_READING_SCHEMA, JOB_ALLOCATION_SCHEMA
from hpcscope.model.timeutil import from_epoch_seconds
from hpcscope.store import Store
from hpcscope.store import slurm as slurm_store
from hpcscope.store.readings import SHARED_JOB_IDS

log = logging.getLogger(__name__)


@dataclass
class MappingCollector:
    """Keeps one node's allocations in step with its mapping directory and job records.

    Args:
        store: where allocations and jobs go.
        node: the node name (``SLURMD_NODENAME``).
        mapping_dir: the hpc-job-mapping directory.
        record_dir: the prolog's job record directory (None: mapping files only, allocations
            then start and end at the poll that first and last sees a line).
        clock: epoch seconds.
    """

    store: Store
    node: str
    mapping_dir: Path
    record_dir: Path | None = None
    clock: Callable[[], float] = time.time
    _seen: set[str] = field(default_factory=set)

    def collect_once(self) -> dict[str, int]:
        """One pass: records, then mapping lines; returns counts for logs and tests."""
        now = self.clock()
        written = {"records": 0, "mapping_lines": 0, "closed": 0}
        open_jobs: set[str] = set()
        if self.record_dir is not None:
            records = read_job_records(self.record_dir)
            for warning in records.warnings:
                log.warning("%s", warning)
            mine = [r for r in records.records if r.node in (None, self.node)]
            snapshot = records_snapshot(mine)
            resolved = self._resolve(snapshot.jobs.column("job_id").to_pylist())
            jobs = _rename(snapshot.jobs, resolved)
            allocations = _rename(snapshot.allocations, resolved)
            self.store.upsert_jobs(jobs).result()
            slurm_store.merge_allocations(self.store, allocations).result()
            slurm_store.upsert_aliases(self.store, snapshot.aliases).result()
            for row in jobs.select(["job_id", "end_time"]).to_pylist():
                if row["end_time"] is not None:
                    self.store.close_allocations(row["job_id"], row["end_time"]).result()
                elif row["job_id"] is not None:
                    open_jobs.add(str(row["job_id"]))
            written["records"] = len(mine)
        mapping = read_mapping_dir(self.mapping_dir, node=self.node)
        for warning in mapping.warnings:
            log.warning("%s", warning)
        labels = mapping.rows.column("job_id").to_pylist()
        resolved = self._resolve(labels)
        start = from_epoch_seconds(now)
        rows = mapping.rows.to_pylist()
        table = pa.table(
            {
                "job_id": [resolved[r["job_id"]] for r in rows],
                "node": [self.node] * len(rows),
                "gpu": [r["gpu"] for r in rows],
                "gpu_instance_id": [r["gpu_instance_id"] for r in rows],
                "start_time": [start] * len(rows),
                "end_time": [None] * len(rows),
            },
            schema=JOB_ALLOCATION_SCHEMA,
        )
        slurm_store.merge_allocations(self.store, table).result()
        current = {resolved[label] for label in labels}
        written["mapping_lines"] = len(rows)
        # jobs this collector saw on the node whose lines are gone and whose record (if any)
        # did not end them: the epilog ran (or the files were removed); end them now
        vanished = self._seen - current - open_jobs
        for job_id in sorted(vanished):
            self.store.close_allocations(job_id, start).result()
            written["closed"] += 1
        self._seen = current | open_jobs
        return written

    def _resolve(self, labels: list[str]) -> dict[str, str]:
        return slurm_store.job_id_for_labels(self.store, [str(label) for label in labels])


def node_mapping_dirs(root: Path) -> dict[str, Path]:
    """Per-node mapping directories under ``root``: ``<root>/<node>/`` holding mapping files,
    or ``<root>/<node>/hpc-job-mapping/`` (the twin's state layout)."""
    found: dict[str, Path] = {}
    try:
        children = sorted(p for p in root.iterdir() if p.is_dir())
    except FileNotFoundError:
        return found
    for child in children:
        nested = child / "hpc-job-mapping"
        found[child.name] = nested if nested.is_dir() else child
    return found


def node_record_dirs(root: Path | None) -> list[Path]:
    """``root`` and its sub-directories (records may be shared or kept per node)."""
    if root is None or not root.is_dir():
        return []
    return [root, *sorted(p for p in root.iterdir() if p.is_dir())]


@dataclass
class MappingRoot:
    """Mapping collectors for every node directory under a root (discovered each pass)."""

    store: Store
    mapping_root: Path
    records_root: Path | None = None
    clock: Callable[[], float] = time.time
    _collectors: dict[str, MappingCollector] = field(default_factory=dict)

    def collect_once(self) -> int:
        """One pass over every node; returns the number of mapping lines seen."""
        lines = 0
        for node, directory in node_mapping_dirs(self.mapping_root).items():
            collector = self._collectors.get(node)
            if collector is None:
                records = self.records_root
                if records is not None and (records / node).is_dir():
                    records = records / node
                collector = self._collectors[node] = MappingCollector(
                    self.store, node=node, mapping_dir=directory, record_dir=records,
                    clock=self.clock,
                )  # fmt: skip
            lines += collector.collect_once()["mapping_lines"]
        return lines


def _rename(table: pa.Table, resolved: dict[str, str]) -> pa.Table:
    if table.num_rows == 0 or not resolved:
        return table
    index = table.schema.get_field_index("job_id")
    renamed = pa.array(
        [resolved.get(v, v) for v in table.column("job_id").to_pylist()], pa.string()
    )
    return table.set_column(index, table.schema.field(index), renamed)


def attribute_samples(store: Store, samples: pa.Table) -> Attribution:
    """Attribute a batch of GPU samples using the stored allocations and aliases.

    Args:
        samples: ``GPU_SAMPLE_SCHEMA`` columns, plus ``platform_job_id`` (dcgm-exporter's
            ``hpc_job``) and, when a user-controlled source claims one, ``claimed_job_id``.
    """
    if samples.num_rows == 0:
        return attribute_gpu_samples(samples, JOB_ALLOCATION_SCHEMA.empty_table())
    ts = samples.column("ts")
    start, end = pc.min(ts).as_py(), pc.max(ts).as_py()
    labels: list[str] = []
    for column in ("platform_job_id", "claimed_job_id"):
        if column in samples.column_names:
            labels.extend(str(v) for v in pc.unique(samples.column(column)).drop_null().to_pylist())
    resolved = slurm_store.job_id_for_labels(store, labels)
    aliases = {k: v for k, v in resolved.items() if k != v}
    allocations = slurm_store.allocations_between(
        store, start, end, job_ids=sorted(set(resolved.values()))
    )
    return attribute_gpu_samples(
        samples, allocations.select(JOB_ALLOCATION_SCHEMA.names), aliases=aliases
    )


def store_attributed(store: Store, samples: pa.Table) -> Attribution:
    """Attribute and append to ``gpu_samples``; log label mismatches (possible spoofing)."""
    result = attribute_samples(store, samples)
    store.append("gpu_samples", result.samples).result()
    _log_mismatches(result)
    return result


def _log_mismatches(result: Attribution) -> None:
    for mismatch in result.mismatches.to_pylist()[:20]:
        log.warning(
            "job label mismatch on %s gpu %s at %s: %s says %r, the allocation says %r",
            mismatch["node"],
            mismatch["gpu"],
            mismatch["ts"],
            mismatch["claim_source"],
            mismatch["claimed_job_id"],
            mismatch["job_id"] or "no job",
        )


def store_dcgm_samples(store: Store, samples: pa.Table) -> Attribution:
    """Store rows converted from dcgm-exporter pages, one per (GPU, ``hpc_job`` label)
    (:func:`hpcscope.ingest.exporters.dcgm.samples_table`).

    The converter puts the page's ``hpc_job`` label in ``job_id``; that label comes from the
    platform's mapping files through dcgm-exporter, so it is kept as ``platform_job_id`` (the
    fallback of rule 2) and the job is decided by the allocations.
    """
    index = samples.schema.get_field_index("job_id")
    labels = samples.column(index)
    relabelled = samples.set_column(
        index, samples.schema.field(index), pa.nulls(samples.num_rows, pa.string())
    ).append_column("platform_job_id", labels)
    return store_attributed(store, relabelled)


_KEYS = ["ts", "node", "gpu", "gpu_instance_id"]


def attribute_readings(store: Store, readings: pa.Table) -> tuple[pa.Table, Attribution]:
    """Give each GPU reading its job(s): ``job_id`` and ``shared_job_ids`` of
    :data:`~hpcscope.model.schemas.GPU_READING_SCHEMA`.

    Args:
        readings: :func:`hpcscope.ingest.exporters.dcgm.readings_table` rows, one per GPU and
            time, with the ``hpc_job`` labels of the GPU's copies in ``platform_job_ids``.

    Returns:
        The readings (GPU_READING_SCHEMA), and the attribution of their (GPU, label) keys (one
        row per GPU and job, with the label mismatches).
    """
    labels = readings.column(PLATFORM_JOB_IDS).combine_chunks()
    assert isinstance(labels, pa.ListArray)
    lengths = pc.fill_null(pc.list_value_length(labels), 0).to_numpy()
    keys = readings.select(_KEYS)
    if bool((lengths == 1).all()):  # one label per GPU: no copies to spread
        label = pc.list_flatten(labels)
    else:  # one key per (GPU, label); a GPU without a label is one key without one
        keys = keys.take(pa.array(np.repeat(np.arange(len(labels)), np.maximum(lengths, 1))))
        flat: list[str | None] = []
        for row in labels.to_pylist():
            flat.extend(row or [None])
        label = pa.array(flat, type=pa.string())
    result = attribute_samples(store, keys.append_column("platform_job_id", label))
    attributed = result.samples
    base = readings.drop_columns([PLATFORM_JOB_IDS])
    if attributed.num_rows == base.num_rows:  # one job (or none) per reading: the usual case
        job_id = attributed.column("job_id")
        shared = pa.nulls(base.num_rows, pa.list_(pa.string()))
    else:  # attribution rows come in reading order, several per shared GPU
        frame = cast(pl.DataFrame, pl.from_arrow(attributed.select([*_KEYS, "job_id"])))
        jobs = frame.group_by(_KEYS, maintain_order=True).agg(
            pl.col("job_id").drop_nulls().unique().sort().alias("_jobs")
        )
        if jobs.height != base.num_rows:  # readings that share a key: one row per key
            jobs = cast(pl.DataFrame, pl.from_arrow(base.select(_KEYS))).join(
                jobs, on=_KEYS, how="left", maintain_order="left", nulls_equal=True
            )
        column = jobs.get_column("_jobs")
        job_id = column.list.first().to_arrow()
        shared = (
            pl.when(column.list.len() > 1)
            .then(column.list.slice(1))
            .otherwise(None)
            .alias("_shared")
        )
        shared = jobs.select(shared).get_column("_shared").to_arrow()
    return _with_jobs(base, job_id, shared), result


def _with_jobs(base: pa.Table, job_id: pa.Array, shared: pa.Array) -> pa.Table:
    """Readings (without their labels) with their ``job_id`` and ``shared_job_ids``."""
    index = base.schema.get_field_index("job_id")
    base = base.set_column(index, base.schema.field(index), pc.cast(job_id, pa.string()))
    base = base.append_column(SHARED_JOB_IDS, pc.cast(shared, pa.list_(pa.string())))
    return base.cast(GPU_READING_SCHEMA)


def store_dcgm_readings(store: Store, readings: pa.Table) -> Attribution:
    """Attribute GPU readings (:func:`attribute_readings`) and append them: one stored row
    per GPU and time with its job(s); log label mismatches (possible spoofing)."""
    stored, result = attribute_readings(store, readings)
    store.append("gpu_samples", stored).result()
    _log_mismatches(result)
    return result


_ROW_KEYS = ["node", "gpu", "gpu_instance_id", PLATFORM_JOB_IDS]


@dataclass
class _Round:
    """The jobs found for one round's rows, and what they were found from."""

    keys: pa.Table
    fingerprint: tuple[object, ...]
    first: datetime
    last: datetime
    job_id: pa.Array
    shared: pa.Array


class ReadingsAttributor:
    """:func:`store_dcgm_readings` for the collector: the jobs of a round's GPU rows are
    reused for the next round while nothing they depend on changed.

    Attribution is the same question every second (the same 1,024 GPUs with the same
    ``hpc_job`` labels against the same allocations); answering it with the Polars joins of
    :func:`attribute_readings` cost ~18 ms a round. The answer of the previous round stands
    when the rows have the same GPUs and labels in the same order, the allocations and aliases
    are the same rows (:func:`~hpcscope.store.slurm.attribution_state`: a count and sum of row
    hashes, one query), and no allocation starts or ends between the two rounds' sample
    times (then every allocation covers the same rows at both). A round with a label mismatch
    is never reused (its mismatches are logged each round, with their own times).
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._last: _Round | None = None
        self.reused = 0
        """Rounds answered from the previous one (for tests and logs)."""

    def attribute(self, readings: pa.Table) -> tuple[pa.Table, pa.Table | None]:
        """The readings with their jobs (GPU_READING_SCHEMA), and the label mismatches
        (None when the previous round's answer was reused: it had none)."""
        if readings.num_rows == 0:
            stored, result = attribute_readings(self.store, readings)
            return stored, result.mismatches
        keys = readings.select(_ROW_KEYS)
        ts = readings.column("ts")
        first, last = pc.min(ts).as_py(), pc.max(ts).as_py()
        previous = self._last
        if previous is not None:
            fingerprint, boundaries = slurm_store.attribution_state(
                self.store, since=min(first, previous.first), until=max(last, previous.last)
            )
            if (
                fingerprint == previous.fingerprint
                and not boundaries
                and keys.equals(previous.keys)
            ):
                previous.first, previous.last = first, last
                self.reused += 1
                base = readings.drop_columns([PLATFORM_JOB_IDS])
                return _with_jobs(base, previous.job_id, previous.shared), None
        # the state read before the answer: a change made meanwhile shows in the next round
        fingerprint, _ = slurm_store.attribution_state(self.store, since=first, until=last)
        stored, result = attribute_readings(self.store, readings)
        self._last = None
        if result.mismatches.num_rows == 0:
            self._last = _Round(
                keys=keys,
                fingerprint=fingerprint,
                first=first,
                last=last,
                job_id=stored.column("job_id").combine_chunks(),
                shared=stored.column(SHARED_JOB_IDS).combine_chunks(),
            )
        if result.mismatches.num_rows:
            _log_mismatches(result)
        return stored, result.mismatches

    def store_readings(self, readings: pa.Table) -> int:
        """Attribute and append (on the caller's thread, waiting for the write)."""
        stored, _ = self.attribute(readings)
        return self.store.append("gpu_samples", stored).result()


def attributed_samples(store: Store, *, since: datetime | None = None) -> pa.Table:
    """Stored samples with the job's user and account (admin view, for checks and exports)."""
    where, params = ("WHERE s.ts >= ?", [since]) if since is not None else ("", [])
    return store.query(
        'SELECT s.ts, s.node, s.gpu, s.gpu_instance_id, s.job_id, j."user", j.account '
        f"FROM gpu_samples s LEFT JOIN jobs j ON j.job_id = s.job_id {where} "
        "ORDER BY s.ts, s.node, s.gpu, s.job_id",
        params,
    )
