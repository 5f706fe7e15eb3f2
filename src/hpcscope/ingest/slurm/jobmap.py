"""The platform's own job mapping: dcgm-exporter's hpc-job-mapping directory and the prolog's
job records. The reference reader: the Slurm prolog (``deploy/slurm/prolog``) and the twin write
these files; dcgm-exporter, the twin's dcgm endpoints and hpcscope read them the same way.

**Mapping directory** (dcgm-exporter ``internal/pkg/transformation/hpc.go``, read on every
collection): files named ``^\\d+(\\.\\d+)?$`` (``3``, or ``2.7`` for MIG GPU 2, GPU instance 7);
other names and sub-directories are skipped; content is one job id per line, read by a line
scanner without trimming (a trailing ``\\r`` is dropped, as Go's ``bufio.ScanLines`` does); a
blank line or ``0`` means no job (some tools write ``0`` for idle); a missing directory yields no
rows and a warning. The prolog writes Slurm's raw ``SLURM_JOB_ID``.

**Job records** (``<record_dir>/<raw job id>.json``, format ``hpcscope-job-record/1``)::

    {"format": "hpcscope-job-record/1", "job_id": "3_1" | "8", "raw_job_id": "8", "label": "8",
     "cluster": "c", "node": "n01", "user": "alice", "uid": 1001, "account": "team-a",
     "partition": "gpu", "gpus": ["0", "2.7"], "slurm_gpus": "0,5",
     "start_time": 1795978326.259, "end_time": null | 1795978329.348, "exit_code": null | 0}

``job_id`` is the canonical id when the prolog's environment names the array task or het
component, else the raw id (Slurm 22.05 gives the prolog neither); ``label`` is what the mapping
files hold; ``gpus`` are mapping file names; times are epoch seconds; the epilog fills
``end_time`` and ``exit_code``. Unknown keys are ignored (newer writers may add fields).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from hpcscope.ingest.slurm.common import JobRows, SchedulerSnapshot, parse_job_id_text
from hpcscope.model.bounds import loads_json
from hpcscope.model.errors import SourceError
from hpcscope.model.sampling import job_id_from_label

RECORD_FORMAT = "hpcscope-job-record/1"
MAPPING_NAME = re.compile(r"^\d+(\.\d+)?$")

MAPPING_SCHEMA = pa.schema(
    [
        pa.field("node", pa.string()),
        pa.field("gpu", pa.int16(), nullable=False),
        pa.field("gpu_instance_id", pa.int16()),
        pa.field("job_id", pa.string(), nullable=False),
    ]
)
"""One row per (GPU or MIG instance, job id line) of a mapping directory."""


class JobMapError(SourceError):
    """A mapping file or job record that cannot be read."""


def split_mapping_name(name: str) -> tuple[int, int | None] | None:
    """``"3"`` -> (3, None); ``"2.7"`` -> (2, 7); anything dcgm-exporter skips -> None."""
    if not MAPPING_NAME.match(name):
        return None
    gpu, _, instance = name.partition(".")
    if int(gpu) > 32767 or (instance and int(instance) > 32767):
        return None
    return int(gpu), (int(instance) if instance else None)


@dataclass(frozen=True, slots=True)
class MappingSnapshot:
    """The rows of one read of a mapping directory, and what was skipped."""

    rows: pa.Table
    warnings: list[SourceError] = field(default_factory=list)

    def jobs_by_gpu(self) -> dict[tuple[int, int | None], list[str]]:
        """(gpu, instance) -> job ids, in file order."""
        out: dict[tuple[int, int | None], list[str]] = {}
        for row in self.rows.to_pylist():
            out.setdefault((row["gpu"], row["gpu_instance_id"]), []).append(row["job_id"])
        return out


def _scan_lines(data: bytes) -> list[str]:
    """Go's ``bufio.Scanner`` with ``ScanLines``: split on ``\\n``, drop one trailing ``\\r``,
    no final empty token."""
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_mapping_dir(path: str | Path, *, node: str | None = None) -> MappingSnapshot:
    """Read an hpc-job-mapping directory exactly as dcgm-exporter does.

    Args:
        path: the directory (``--hpc-job-mapping-dir``).
        node: the node it belongs to, copied into every row.

    Returns:
        Rows (node, gpu, gpu_instance_id, job_id) for every line naming a job; blank and ``0``
        lines are "no job" and give no row. A missing directory gives no rows and a warning.
    """
    directory = Path(path)
    source = str(directory)
    warnings: list[SourceError] = []
    nodes: list[str | None] = []
    gpus: list[int] = []
    instances: list[int | None] = []
    job_ids: list[str] = []
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except FileNotFoundError:
        warnings.append(JobMapError("mapping directory does not exist", source=source))
        entries = []
    except NotADirectoryError:
        warnings.append(JobMapError("not a directory", source=source))
        entries = []
    for entry in entries:
        parsed = split_mapping_name(entry.name)
        if parsed is None or not entry.is_file(follow_symlinks=True):
            continue
        try:
            data = Path(entry.path).read_bytes()
        except OSError as exc:  # removed by an epilog between listing and reading
            warnings.append(JobMapError(f"unreadable: {exc.strerror}", source=entry.path))
            continue
        for line in _scan_lines(data):
            if job_id_from_label(line) is None:
                continue
            nodes.append(node)
            gpus.append(parsed[0])
            instances.append(parsed[1])
            job_ids.append(line)
    rows = pa.table(
        {"node": nodes, "gpu": gpus, "gpu_instance_id": instances, "job_id": job_ids},
        schema=MAPPING_SCHEMA,
    )
    return MappingSnapshot(rows=rows, warnings=warnings)


# --------------------------------------------------------------------------- job records


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One prolog job record (see the module docstring for the file format)."""

    raw_job_id: str
    job_id: str
    label: str
    node: str | None
    cluster: str | None
    user: str | None
    uid: int | None
    account: str | None
    partition: str | None
    gpus: tuple[str, ...]
    start_time: float
    end_time: float | None
    exit_code: int | None
    path: str

    def gpu_keys(self) -> list[tuple[int, int | None]]:
        """The (gpu, instance) pairs of :attr:`gpus` (bad names dropped)."""
        return [p for p in (split_mapping_name(name) for name in self.gpus) if p is not None]


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def parse_job_record(data: bytes | str | dict[str, object], *, source: str) -> JobRecord:
    """Decode one job record.

    Raises:
        JobMapError: not JSON, another format, or a required field missing.
    """
    if isinstance(data, dict):
        document: object = data
    else:
        try:
            document = loads_json(data, source=source)
        except json.JSONDecodeError as exc:
            raise JobMapError(
                f"not JSON ({exc.msg}); a truncated record?",
                source=source,
                line=exc.lineno,
                column=exc.colno,
            ) from None
        except UnicodeDecodeError as exc:  # json.loads decodes bytes itself, strictly
            raise JobMapError(
                f"not UTF-8 text (byte {exc.start}: {exc.reason})", source=source
            ) from None
    if not isinstance(document, dict):
        raise JobMapError("not a JSON object", source=source)
    if document.get("format") != RECORD_FORMAT:
        raise JobMapError(
            f"format {document.get('format')!r}, expected {RECORD_FORMAT!r}",
            source=source,
            field="format",
        )
    raw = _str(document.get("raw_job_id"))
    if raw is None or not raw.isdigit():
        raise JobMapError("raw_job_id missing or not a number", source=source, field="raw_job_id")
    job_id = _str(document.get("job_id")) or raw
    if parse_job_id_text(job_id) is None:
        raise JobMapError(f"job_id {job_id!r} is not a Slurm job id", source=source, field="job_id")
    start = _number(document.get("start_time"))
    if start is None:
        raise JobMapError("start_time missing", source=source, field="start_time")
    gpus = document.get("gpus")
    if not isinstance(gpus, list) or not all(isinstance(g, str) for g in gpus):
        raise JobMapError("gpus must be a list of mapping names", source=source, field="gpus")
    return JobRecord(
        raw_job_id=raw,
        job_id=job_id,
        label=_str(document.get("label")) or raw,
        node=_str(document.get("node")),
        cluster=_str(document.get("cluster")),
        user=_str(document.get("user")),
        uid=_int(document.get("uid")),
        account=_str(document.get("account")),
        partition=_str(document.get("partition")),
        gpus=tuple(gpus),
        start_time=start,
        end_time=_number(document.get("end_time")),
        exit_code=_int(document.get("exit_code")),
        path=source,
    )


@dataclass(frozen=True, slots=True)
class JobRecords:
    """All readable records of a record directory and the files that were not."""

    records: list[JobRecord]
    warnings: list[SourceError]


def read_job_records(path: str | Path) -> JobRecords:
    """Read every ``<raw id>.json`` record of a record directory (temp files skipped)."""
    directory = Path(path)
    records: list[JobRecord] = []
    warnings: list[SourceError] = []
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return JobRecords([], [JobMapError("record directory does not exist", source=str(path))])
    for name in names:
        if name.startswith(".") or not name.endswith(".json"):
            continue
        file = directory / name
        try:
            data = file.read_bytes()
        except OSError:
            continue  # pruned by an epilog since the listing
        try:
            records.append(parse_job_record(data, source=str(file)))
        except JobMapError as exc:
            warnings.append(exc)
    return JobRecords(records, warnings)


def records_snapshot(records: Iterable[JobRecord], *, source: str = "prolog") -> SchedulerSnapshot:
    """Jobs, GPU allocations and raw-id aliases from job records.

    Jobs carry only what the prolog knows (user, account, partition, node, start, end, exit
    code, GPU count; no state: a record cannot tell completed from cancelled); the scheduler's
    records fill the rest when the store merges them.
    Allocations are one row per GPU in ``gpus``, from ``start_time`` to ``end_time``.
    """
    rows = JobRows()
    for record in records:
        start = int(record.start_time)
        end = int(record.end_time) if record.end_time is not None else None
        rows.add_job(
            job_id=record.job_id,
            cluster=record.cluster,
            user=record.user,
            account=record.account,
            partition=record.partition,
            exit_code=record.exit_code,
            start_time=start,
            end_time=end,
            gpus=len(record.gpus),
            nodes=record.node,
            source=f"{source}:{record.node or '?'}",
        )
        rows.add_alias(raw_job_id=record.raw_job_id, job_id=record.job_id, cluster=record.cluster)
        for gpu, instance in record.gpu_keys():
            rows.add_allocation(
                job_id=record.job_id,
                node=record.node or "",
                gpu=gpu,
                gpu_instance_id=instance,
                start_time=start,
                end_time=end,
            )
    return rows.snapshot([])
