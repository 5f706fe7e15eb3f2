"""Writing dcgm-exporter hpc-job-mapping files, the way the Slurm prolog and epilog do.

Format (dcgm-exporter ``internal/pkg/transformation/hpc.go``): in the mapping directory, one
file per GPU named by the DCGM ``gpu`` label (``0``..``7``) or ``<gpu>.<GPU_I_ID>`` for a MIG
instance; content is one job id per line. dcgm-exporter copies every series of that GPU once
per line with ``hpc_job="<line>"``; a missing or empty file means no job.

Writes are atomic (temporary file + rename in the same directory) so an exporter reading the
directory at any instant sees the old or the new content, never half a file. Removal takes out
only the given job's line: on a shared node another job's line stays.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []


def _write_atomic(path: Path, lines: list[str]) -> None:
    write_text_atomic(path, "".join(f"{line}\n" for line in lines))


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a reader sees the old or the new file, never half."""
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def add_job(mapping_dir: Path, gpu_key: str, job_id: str) -> None:
    """Add ``job_id`` to GPU ``gpu_key``'s mapping file (idempotent)."""
    mapping_dir.mkdir(parents=True, exist_ok=True)
    path = mapping_dir / gpu_key
    lines = _read_lines(path)
    if job_id not in lines:
        _write_atomic(path, [*lines, job_id])


def remove_job(mapping_dir: Path, gpu_key: str, job_id: str) -> None:
    """Remove ``job_id``'s line from GPU ``gpu_key``'s mapping file; drop the file if empty."""
    path = mapping_dir / gpu_key
    lines = _read_lines(path)
    remaining = [line for line in lines if line != job_id]
    if remaining == lines:
        return
    if remaining:
        _write_atomic(path, remaining)
    else:
        path.unlink(missing_ok=True)


def read_mapping(mapping_dir: Path) -> dict[str, list[str]]:
    """GPU key -> job ids, with dcgm-exporter's rules (name ``^\\d+(\\.\\d+)?$``, one id per
    line, empty files ignored). The twin's dcgm endpoint reads through this on every scrape."""
    mapping: dict[str, list[str]] = {}
    try:
        entries = list(os.scandir(mapping_dir))
    except FileNotFoundError:
        return mapping
    for entry in entries:
        name = entry.name
        head, _, tail = name.partition(".")
        if not head.isdigit() or (tail and not tail.isdigit()) or name.count(".") > 1:
            continue
        if not entry.is_file():
            continue
        lines = _read_lines(Path(entry.path))
        if lines:
            mapping[name] = lines
    return mapping


RECORD_FORMAT = "hpcscope-job-record/1"


def write_job_record(record_dir: Path, record: dict[str, object]) -> None:
    """Write (or complete) the prolog's job record ``<record_dir>/<raw job id>.json``.

    The format is the one ``deploy/slurm/prolog`` writes (``docs/golden-path.md``)."""
    record_dir.mkdir(parents=True, exist_ok=True)
    body = {"format": RECORD_FORMAT, **record}
    write_text_atomic(record_dir / f"{record['raw_job_id']}.json", json.dumps(body, indent=1))
