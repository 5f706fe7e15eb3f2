"""The spools the telemetry rules add: Lustre changelog records and NVML process lists.

Changelog (``<spool>/changelog/<mdt>.changelog``): on the MDS a changelog user
(``lctl --device <mdt> changelog_register``) appends ``lfs changelog <mdt> <next>`` to the file
and clears what it read (``lfs changelog_clear``); :class:`ChangelogSpool` reads the bytes
appended since its last read (complete lines only), resolves parent FIDs with ``resolve``
(``lfs fid2path <mount> <fid>`` where the server mounts the filesystem; :func:`fid2path`) and
stores the records (each once: ``mdt, record_index``).

Processes (``<spool>/gpu-processes/<node>/``): a timer on each GPU node writes, through a
temporary file and a rename, ``compute-apps.csv`` (``nvidia-smi
--query-compute-apps=timestamp,gpu_uuid,pid,process_name,used_memory --format=csv``),
``gpus.csv`` (``nvidia-smi --query-gpu=index,uuid --format=csv``) and ``proc/<pid>/cgroup``
of each listed PID (a copy of ``/proc/<pid>/cgroup``); :class:`ProcessSpool` reads a node's
files when ``compute-apps.csv`` changed and stores one row per process with its Slurm job.
"""

from __future__ import annotations

import hashlib
import logging
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from hpcscope.ingest.exporters.lustre_changelog import FidResolver, parse_changelog
from hpcscope.ingest.exporters.lustre_jobstats import DEFAULT_JOBID_PATTERN
from hpcscope.ingest.exporters.nvidia_smi_apps import (
    ComputeAppsFormatError,
    parse_compute_apps,
    parse_gpu_index,
)
from hpcscope.ingest.security.cgroups import slurm_job_from_proc_cgroup
from hpcscope.service.spool import SpoolFiles, Tails
from hpcscope.store import Store
from hpcscope.store.telemetry_rules import append_changelog, append_gpu_processes

log = logging.getLogger(__name__)


def fid2path(mount: str, *, timeout_seconds: float = 5.0) -> FidResolver:
    """A resolver running ``lfs fid2path <mount> <fid>`` (cached; None when it fails)."""
    cache: dict[str, str | None] = {}

    def resolve(fid: str) -> str | None:
        if fid not in cache:
            try:
                done = subprocess.run(
                    ["lfs", "fid2path", mount, fid],
                    capture_output=True, text=True, timeout=timeout_seconds, check=False,
                )  # fmt: skip
            except (OSError, subprocess.TimeoutExpired):
                cache[fid] = None
            else:
                lines = done.stdout.splitlines()
                cache[fid] = lines[0].strip() if done.returncode == 0 and lines else None
        return cache[fid]

    return resolve


@dataclass(frozen=True, slots=True)
class SpoolRead:
    """One pass over a spool: rows stored, and the errors (``file:line: message``)."""

    rows: int = 0
    errors: tuple[str, ...] = ()


@dataclass
class ChangelogSpool:
    """Tails ``<directory>/<mdt>.changelog`` files (module docstring)."""

    store: Store
    directory: Path
    resolve: FidResolver | None = None
    jobid_pattern: str = DEFAULT_JOBID_PATTERN
    _tails: Tails = field(default_factory=Tails)  # rotation, partial lines: service/spool.py
    _files: SpoolFiles = field(init=False)

    def __post_init__(self) -> None:
        self._files = SpoolFiles(self.directory, "*.changelog")

    def collect_once(self) -> SpoolRead:
        rows, errors = 0, []
        for path, _ in self._files.files():
            try:
                read = self._tails.read(path)
            except OSError as exc:
                errors.append(f"{path}: {exc.strerror or exc}")
                continue
            if not read.lines:
                continue
            text = read.text().decode("utf-8", errors="replace")
            parsed = parse_changelog(
                text, mdt=path.stem, source=str(path), resolve=self.resolve,
                jobid_pattern=self.jobid_pattern, first_line=read.first_line,
            )  # fmt: skip
            rows += append_changelog(self.store, parsed.table).result()
            errors += [str(e) for e in parsed.errors]
        return SpoolRead(rows, tuple(errors))


@dataclass
class ProcessSpool:
    """Reads ``<directory>/<node>/compute-apps.csv`` when it changed (module docstring)."""

    store: Store
    directory: Path
    _seen: dict[Path, str] = field(default_factory=dict)
    _files: SpoolFiles = field(init=False)

    def __post_init__(self) -> None:
        self._files = SpoolFiles(self.directory, "*/compute-apps.csv")

    def collect_once(self) -> SpoolRead:
        rows, errors = 0, []
        # read whole each time: a rewrite inside the filesystem's timestamp granularity keeps
        # its size and mtime, so the content's digest, not the stamp, says it changed
        for apps, _ in self._files.files():
            node_dir = apps.parent
            try:
                text = apps.read_text(encoding="utf-8")
                digest = hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
                if self._seen.get(apps) == digest:
                    continue
                index = parse_gpu_index(
                    (node_dir / "gpus.csv").read_text(encoding="utf-8"),
                    source=str(node_dir / "gpus.csv"),
                )
            except OSError as exc:
                errors.append(f"{apps}: {exc.strerror or exc}")
                continue
            except UnicodeDecodeError as exc:  # a binary file in the spool: named, skipped
                errors.append(f"{apps}: not UTF-8 text (byte {exc.start}: {exc.reason})")
                continue
            except ComputeAppsFormatError as exc:
                errors.append(str(exc))
                continue
            self._seen[apps] = digest
            parsed = parse_compute_apps(text, node=node_dir.name, source=str(apps), gpu_index=index)
            errors += [str(e) for e in parsed.errors]
            jobs = [self._job(node_dir, int(pid)) for pid in parsed.table["pid"].to_pylist()]
            table = parsed.table.set_column(
                parsed.table.schema.get_field_index("job_id"),
                "job_id",
                pa.array(jobs, pa.string()),
            )
            if table.num_rows:
                rows += append_gpu_processes(self.store, table).result()
        return SpoolRead(rows, tuple(errors))

    @staticmethod
    def _job(node_dir: Path, pid: int) -> str | None:
        try:
            text = (node_dir / "proc" / str(pid) / "cgroup").read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None  # the process ended before its cgroup was copied: no job known
        found = slurm_job_from_proc_cgroup(text)
        return None if found is None else found.job_id


__all__ = ["ChangelogSpool", "ProcessSpool", "SpoolRead", "fid2path"]
