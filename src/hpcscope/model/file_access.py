"""Access records: who opened, read, mmapped or wrote a protected path ("who read my weights").

One row per access event seen by any source a site runs (Tetragon's crown-jewel policy,
``hpcscope sensor``, Falco's file rules): the path, the kind of access, bytes where the source
observes them, when, on which node, by which process, and the Slurm job the platform
attributed it to. User and account come from the store's ``jobs`` (Slurm is the authority) at
read time, never from the event.

:func:`file_access_kind` is the one definition of what a Tetragon file hook means (read,
write, bytes); the event rules (W-1, W-3, CE-4) and the access records both use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from hpcscope.model.security_events import MAY_READ, MAY_WRITE

#: Access kinds, in the order a page lists them.
ACCESS_KINDS: tuple[str, ...] = ("open", "read", "mmap", "write", "truncate")

FILE_HOOKS = frozenset(
    {"security_file_permission", "security_mmap_file", "fd_install", "security_file_open"}
)
TRUNCATE_HOOKS = frozenset({"security_path_truncate", "security_file_truncate"})
_O_ACCMODE, _O_WRONLY, _O_RDWR, _O_TRUNC = 0o3, 0o1, 0o2, 0o1000

FILE_ACCESS_SCHEMA = pa.schema(
    [
        pa.field("ts", pa.timestamp("us"), nullable=False),
        pa.field("path", pa.string(), nullable=False),
        pa.field("access", pa.string(), nullable=False),
        pa.field("bytes", pa.int64()),
        pa.field("node", pa.string()),
        pa.field("job_id", pa.string()),
        pa.field("pid", pa.int64()),
        pa.field("uid", pa.int64()),
        pa.field("binary", pa.string()),
        pa.field("arguments", pa.string()),
        pa.field("exec_id", pa.string()),
        pa.field("function", pa.string()),
        pa.field("source_kind", pa.string(), nullable=False),
        pa.field("source_name", pa.string(), nullable=False),
        pa.field("source_line", pa.int64(), nullable=False),
    ]
)
"""One row per access to a protected path. ``access`` is one of :data:`ACCESS_KINDS`;
``bytes`` is bytes read or written for ``read``/``write`` (the sensor's per-second sums),
the mapped length for ``mmap``, null where the source does not observe it (a Tetragon
``security_file_permission`` event is one read call, its size unknown). ``source_kind`` is
``tetragon`` (which includes ``hpcscope sensor``, whose events are Tetragon's) or ``falco``."""


@dataclass(frozen=True, slots=True)
class FileAccess:
    """What a file hook event did: read and/or write, truncate, and bytes when known."""

    read: bool
    write: bool
    truncate: bool
    kind: str
    bytes: int | None


def file_access_kind(
    function: str, *, access_mask: int | None, int_args: Sequence[int] | None
) -> FileAccess | None:
    """The access a Tetragon file hook event records; None for a hook that is not one.

    Args:
        function: the kprobe's ``function_name``.
        access_mask: ``security_file_permission``'s MAY_* mask.
        int_args: the event's integer arguments in order (``security_file_open`` from the
            sensor: open flags; ``security_file_permission`` from the sensor: mask, bytes;
            ``security_mmap_file``: prot, flags, length).
    """
    ints = list(int_args or ())
    if function in TRUNCATE_HOOKS:
        return FileAccess(False, True, True, "truncate", None)
    if function == "security_file_permission":
        mask = access_mask if access_mask is not None else (ints[0] if ints else 0)
        size = ints[1] if len(ints) > 1 else None
        write = bool(mask & MAY_WRITE)
        return FileAccess(bool(mask & MAY_READ), write, False, "write" if write else "read", size)
    if function == "security_mmap_file":
        return FileAccess(True, False, False, "mmap", ints[2] if len(ints) > 2 else None)
    if function == "security_file_open" and ints:
        mode = ints[0] & _O_ACCMODE
        write = mode in (_O_WRONLY, _O_RDWR) or bool(ints[0] & _O_TRUNC)
        return FileAccess(mode != _O_WRONLY, write, bool(ints[0] & _O_TRUNC), "open", None)
    if function in FILE_HOOKS:
        return FileAccess(True, False, False, "open", None)
    return None
