"""NVML's compute processes: ``nvidia-smi --query-compute-apps=... --format=csv`` -> Arrow.

The node-side reader runs::

    nvidia-smi --query-compute-apps=timestamp,gpu_uuid,pid,process_name,used_memory --format=csv

whose output is a header naming the fields (with units in brackets) and one line per process::

    timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]
    2026/12/01 12:00:05.123, GPU-6f1c0b5e-2d63-4a3b-9d3e-1f6a1e0b9a01, 31337, python3, 30720 MiB

``--format=csv,noheader,nounits`` drops the header and units: pass ``fields`` then. A value
NVML cannot read is ``[N/A]`` (or ``[Not Supported]``): null. GPUs are named by UUID; the
caller's ``gpu_index`` (the node's UUID -> index, as dcgm-exporter's ``gpu`` label) gives the
index. The process' Slurm job is not NVML's to know: the caller fills ``job_id`` from
``/proc/<pid>/cgroup``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa

from hpcscope.model.errors import SourceError
from hpcscope.model.schemas import GPU_PROCESS_SCHEMA

_MIB = 1024 * 1024
DEFAULT_FIELDS = ("timestamp", "gpu_uuid", "pid", "process_name", "used_memory")
_ALIASES = {"used_gpu_memory": "used_memory"}


class ComputeAppsFormatError(SourceError):
    """``nvidia-smi --query-compute-apps`` output that cannot be read."""


@dataclass(frozen=True, slots=True)
class ComputeApps:
    """The processes read, and the lines left out."""

    table: pa.Table
    errors: list[ComputeAppsFormatError] = field(default_factory=list)


def _name(header: str) -> str:
    base = header.strip().split(" [", 1)[0].strip()
    return _ALIASES.get(base, base)


def _null(value: str) -> bool:
    return value.startswith("[") and value.endswith("]")


def parse_compute_apps(
    text: str,
    *,
    node: str,
    source: str,
    gpu_index: Mapping[str, int],
    fields: Sequence[str] | None = None,
    ts: datetime | None = None,
) -> ComputeApps:
    """Read one ``--query-compute-apps`` output of one node.

    Args:
        node: the node the output came from.
        source: what to name in errors.
        gpu_index: GPU UUID -> index on the node.
        fields: the queried fields when the output has no header (``noheader``).
        ts: the read time when ``timestamp`` was not queried (naive UTC).

    Returns:
        One row per process; a :class:`ComputeAppsFormatError` per line left out (unknown GPU,
        bad PID or time).
    """
    rows: list[dict[str, object]] = []
    errors: list[ComputeAppsFormatError] = []
    names = [_name(f) for f in fields] if fields is not None else None
    try:
        records = list(csv.reader(io.StringIO(text), skipinitialspace=True))
    except csv.Error as exc:  # a NUL byte or a field past csv's limit: nvidia-smi writes neither
        errors.append(ComputeAppsFormatError(f"not CSV: {exc}", source=source))
        return ComputeApps(pa.Table.from_pylist([], schema=GPU_PROCESS_SCHEMA), errors)
    for number, record in enumerate(records, start=1):
        if not record or all(not c.strip() for c in record):
            continue
        if names is None:
            names = [_name(h) for h in record]
            if "pid" not in names or "gpu_uuid" not in names:
                errors.append(
                    ComputeAppsFormatError(
                        "header lacks pid or gpu_uuid", source=source, line=number, column=1
                    )
                )
                return ComputeApps(pa.Table.from_pylist([], schema=GPU_PROCESS_SCHEMA), errors)
            continue
        if len(record) != len(names):
            errors.append(
                ComputeAppsFormatError(
                    f"{len(record)} fields, the header has {len(names)}",
                    source=source,
                    line=number,
                )
            )
            continue
        values = {n: v.strip() for n, v in zip(names, record, strict=True)}
        uuid = values.get("gpu_uuid", "")
        if uuid not in gpu_index:
            errors.append(
                ComputeAppsFormatError(
                    f"GPU {uuid!r} is not a GPU of {node}", source=source, line=number,
                    field="gpu_uuid",
                )
            )  # fmt: skip
            continue
        pid = values.get("pid", "")
        if not pid.isdigit():
            errors.append(
                ComputeAppsFormatError(
                    f"pid {pid!r} is not a number", source=source, line=number, field="pid"
                )
            )
            continue
        when = ts
        stamp = values.get("timestamp")
        if stamp is not None and not _null(stamp):
            try:
                when = datetime.strptime(stamp, "%Y/%m/%d %H:%M:%S.%f")
            except ValueError:
                errors.append(
                    ComputeAppsFormatError(
                        f"timestamp {stamp!r} is not YYYY/MM/DD HH:MM:SS.fff",
                        source=source, line=number, field="timestamp",
                    )
                )  # fmt: skip
                continue
        if when is None:
            errors.append(
                ComputeAppsFormatError("no timestamp queried and no read time given",
                                       source=source, line=number)
            )  # fmt: skip
            continue
        memory = values.get("used_memory")
        used: float | None = None
        if memory is not None and not _null(memory):
            amount = memory.removesuffix("MiB").strip()
            try:
                used = float(amount) * _MIB
            except ValueError:
                used = None
        name = values.get("process_name")
        rows.append(
            {
                "ts": when,
                "node": node,
                "gpu": gpu_index[uuid],
                "gpu_uuid": uuid,
                "pid": int(pid),
                "process_name": None if name is None or _null(name) else name,
                "used_memory_bytes": used,
                "job_id": None,
            }
        )
    return ComputeApps(pa.Table.from_pylist(rows, schema=GPU_PROCESS_SCHEMA), errors)


def parse_gpu_index(text: str, *, source: str) -> dict[str, int]:
    """``nvidia-smi --query-gpu=index,uuid --format=csv`` -> GPU UUID -> index.

    Raises:
        ComputeAppsFormatError: no ``index``/``uuid`` header, or a line that is not two fields
            with a numeric index.
    """
    try:  # a NUL byte or a field past csv's limit: nvidia-smi writes neither
        records = list(csv.reader(io.StringIO(text), skipinitialspace=True))
    except csv.Error as exc:
        raise ComputeAppsFormatError(f"not CSV: {exc}", source=source) from None
    out: dict[str, int] = {}
    names: list[str] | None = None
    for number, record in enumerate(records, start=1):
        if not record:
            continue
        if names is None:
            names = [_name(h) for h in record]
            if "index" not in names or "uuid" not in names:
                raise ComputeAppsFormatError(
                    "header lacks index or uuid", source=source, line=number, column=1
                )
            continue
        values = dict(zip(names, (c.strip() for c in record), strict=False))
        if not values.get("index", "").isdigit() or not values.get("uuid"):
            raise ComputeAppsFormatError(
                f"not '<index>, <uuid>': {', '.join(record)!r}", source=source, line=number
            )
        out[values["uuid"]] = int(values["index"])
    return out
