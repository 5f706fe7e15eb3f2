"""Access records from security events: every open, read, mmap or write of a protected path.

Pure: Tetragon rows (the crown-jewel policy, and ``hpcscope sensor``'s events, which are
Tetragon's) and Falco rows in, rows of
:data:`~hpcscope.model.file_access.FILE_ACCESS_SCHEMA` out. What an event means (read, write,
bytes) is :func:`~hpcscope.model.file_access.file_access_kind`, the definition the event rules
use too. Falco alerts count when their ``fd.name`` is under a protected prefix (Falco's file
rules: an ``open``/``openat`` is an open, ``read``/``pread`` a read, ``mmap`` an mmap, a
write-type syscall a write; bytes are not in Falco's output).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow as pa

from hpcscope.model.file_access import FILE_ACCESS_SCHEMA, file_access_kind
from hpcscope.model.security_events import FalcoRow, TetragonRow

_FALCO_KINDS = {
    "open": "open", "openat": "open", "openat2": "open", "creat": "write",
    "read": "read", "pread": "read", "readv": "read", "preadv": "read",
    "mmap": "mmap", "mmap2": "mmap",
    "write": "write", "pwrite": "write", "writev": "write", "pwritev": "write",
    "truncate": "truncate", "ftruncate": "truncate",
}  # fmt: skip


def _prefixes(roots: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted({r.rstrip("/") + "/" for r in roots if r.strip("/")}))


def _under(path: str | None, prefixes: Sequence[str]) -> bool:
    return bool(path) and any(path.startswith(p) for p in prefixes)  # type: ignore[union-attr]


def access_records(
    tetragon: Iterable[TetragonRow],
    falco: Iterable[FalcoRow] = (),
    *,
    protected: Sequence[str],
) -> pa.Table:
    """One record per event that touched a path under ``protected``.

    Args:
        tetragon: rows of :data:`~hpcscope.model.security_events.TETRAGON_EVENT_SCHEMA`.
        falco: rows of :data:`~hpcscope.model.security_events.FALCO_ALERT_SCHEMA`.
        protected: the protected roots (checkpoints, weights, datasets).

    Returns:
        A table of :data:`~hpcscope.model.file_access.FILE_ACCESS_SCHEMA`, in input order.
    """
    prefixes = _prefixes(protected)
    rows: list[dict[str, object]] = []  # one FILE_ACCESS_SCHEMA row each: column -> value
    if not prefixes:
        return pa.Table.from_pylist(rows, schema=FILE_ACCESS_SCHEMA)
    for row in tetragon:
        path = row.get("file_path")
        if row.get("ts") is None or row.get("event_type") != "process_kprobe":
            continue
        if not _under(path, prefixes):
            continue
        kind = file_access_kind(
            row.get("function_name") or "",
            access_mask=row.get("access_mask"),
            int_args=row.get("int_args"),
        )
        if kind is None:
            continue
        rows.append(
            {
                "ts": row["ts"],
                "path": path,
                "access": kind.kind,
                "bytes": kind.bytes,
                "node": row.get("node_name"),
                "job_id": row.get("job_id"),
                "pid": row.get("pid"),
                "uid": row.get("uid"),
                "binary": row.get("binary"),
                "arguments": row.get("arguments"),
                "exec_id": row.get("exec_id"),
                "function": row.get("function_name"),
                "source_kind": "tetragon",
                "source_name": row["source_name"],
                "source_line": row["source_line"],
            }
        )
    for alert in falco:
        path = alert["fd_name"]
        if not _under(path, prefixes):
            continue
        rows.append(
            {
                "ts": alert["ts"],
                "path": path,
                "access": _FALCO_KINDS.get(alert["evt_type"] or "", "open"),
                "bytes": None,
                "node": alert.get("hostname"),
                "job_id": alert.get("job_id"),
                "pid": alert.get("proc_pid"),
                "uid": alert.get("user_uid"),
                "binary": alert.get("proc_exe") or alert.get("proc_name"),
                "arguments": alert.get("proc_cmdline"),
                "exec_id": None,
                "function": alert.get("rule"),
                "source_kind": "falco",
                "source_name": alert["source_name"],
                "source_line": alert["source_line"],
            }
        )
    return pa.Table.from_pylist(rows, schema=FILE_ACCESS_SCHEMA)
