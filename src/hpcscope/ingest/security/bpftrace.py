"""The hpcscope sensor's bpftrace output (``bpftrace -f json``) -> typed records.

``deploy/bpftrace/hpcscope-sensor.bt`` prints one ``printf`` line per event, tab-separated,
its kind first (the program's header lists them), and every second the bytes read and written
on tracked files as two maps, ``@rb`` and ``@wb``, keyed ``"pid,fd"``. With ``-f json`` each
output is one JSON object per line: ``{"type": "printf", "data": "O\\t...\\n"}``,
``{"type": "map", "data": {"@rb": {"1234,3": 4096}}}``, ``{"type": "attached_probes", "data":
{"probes": 41}}``, ``{"type": "lost_events", "data": {"events": 12}}``. Time is the kernel's
``nsecs`` (CLOCK_MONOTONIC, ns), converted to wall-clock time by the sensor.

A line that cannot be read raises :class:`~hpcscope.ingest.security.lines.SecurityEventError`
naming the source, line and field; the sensor reports it and goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from hpcscope.ingest.security.lines import SecurityEventError
from hpcscope.model.bounds import refusing_deep_nesting

#: printf kinds -> (record kind, field names after the kind). ``ns`` is CLOCK_MONOTONIC.
PRINTF_FIELDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "O": ("open", ("ns", "pid", "tid", "uid", "ppid", "fd", "flags", "comm", "path")),
    "M": ("mmap", ("ns", "pid", "tid", "uid", "ppid", "fd", "length", "prot", "map_flags", "comm")),
    "X": (
        "close",
        ("ns", "pid", "tid", "uid", "ppid", "fd", "read_bytes", "written_bytes", "comm"),
    ),
    "D": ("dup", ("ns", "pid", "tid", "uid", "ppid", "fd", "target_fd")),
    "E": ("exec", ("ns", "pid", "tid", "uid", "ppid", "path")),
    "C": ("connect", ("ns", "pid", "tid", "uid", "ppid", "family", "port", "comm", "address")),
    "P": ("ptrace", ("ns", "pid", "tid", "uid", "ppid", "request", "target_pid", "comm")),
    "V": ("vm_read", ("ns", "pid", "tid", "uid", "ppid", "target_pid", "comm")),
    "S": ("setns", ("ns", "pid", "tid", "uid", "ppid", "fd", "nstype", "comm")),
    "Q": ("exit", ("ns", "pid")),
}
_TEXT_FIELDS = frozenset({"comm", "path", "address"})
#: The maps of bytes per (pid, fd) since the last flush, and what they count.
BYTE_MAPS: dict[str, str] = {"@rb": "read", "@wb": "written"}


@dataclass(frozen=True, slots=True)
class SensorRecord:
    """One event of the sensor program (fields absent from its kind are None).

    Attributes:
        kind: ``open``, ``dup``, ``mmap``, ``close``, ``exec``,
            ``connect``, ``ptrace``, ``vm_read``, ``setns``, ``exit``; ``bytes`` (one (pid,
            fd) entry of a flushed byte map: ``read_bytes`` or ``written_bytes`` set);
            ``attached`` (the
            probes are live: ``count`` probes) or ``lost`` (``count`` events the kernel's
            buffer dropped).
        ns: kernel CLOCK_MONOTONIC time in ns.
        ppid: the parent's pid when the event happened (the job of a process already gone).
        fd: the file descriptor (``open``: the return value, negative when the open failed;
            ``dup``: the old one, ``target_fd`` the copy).
        flags: open(2) flags; ``map_flags`` and ``prot`` are mmap(2)'s.
        length: mmap length in bytes.
        read_bytes / written_bytes: bytes since the last flush (``close``, ``bytes``).
        family: 2 (AF_INET) or 10 (AF_INET6); ``port`` and ``address`` the destination.
        request: ptrace request; ``target_pid`` the traced process.
        nstype: setns(2)'s ``nstype`` flags.
    """

    kind: str
    ns: int | None = None
    pid: int | None = None
    tid: int | None = None
    uid: int | None = None
    ppid: int | None = None
    fd: int | None = None
    target_fd: int | None = None
    flags: int | None = None
    comm: str | None = None
    path: str | None = None
    length: int | None = None
    prot: int | None = None
    map_flags: int | None = None
    read_bytes: int | None = None
    written_bytes: int | None = None
    family: int | None = None
    port: int | None = None
    address: str | None = None
    request: int | None = None
    target_pid: int | None = None
    nstype: int | None = None
    count: int | None = None


class _Output(msgspec.Struct, gc=False):
    type: str
    data: Any = None


_DECODER = msgspec.json.Decoder(_Output)


def _printf(text: str, err: Callable[[str, str | None], SecurityEventError]) -> SensorRecord:
    parts = text.rstrip("\n").split("\t")
    spec = PRINTF_FIELDS.get(parts[0])
    if spec is None:
        raise err(f"unknown sensor event kind {parts[0]!r}", "data")
    kind, names = spec
    if len(parts) < len(names) + 1:
        raise err(f"{kind} event has {len(parts) - 1} fields, expected {len(names)}", "data")
    # the last field is free text (a path may hold tabs): join the rest back
    values = [*parts[1 : len(names)], "\t".join(parts[len(names) :])]
    fields: dict[str, Any] = {}
    for name, value in zip(names, values, strict=True):
        if name in _TEXT_FIELDS:
            fields[name] = value
            continue
        try:
            fields[name] = int(value)
        except ValueError:
            raise err(f"{kind} event: {name} {value!r} is not an integer", f"data.{name}") from None
    return SensorRecord(kind=kind, **fields)


def _byte_map(
    data: Any, err: Callable[[str, str | None], SecurityEventError]
) -> list[SensorRecord]:
    if not isinstance(data, dict):
        raise err("map output without a data object", "data")
    records: list[SensorRecord] = []
    for name, entries in data.items():
        what = BYTE_MAPS.get(name)
        if what is None:
            continue  # a map the sensor does not read (never printed by the shipped program)
        if not isinstance(entries, dict):
            raise err(f"map {name} is not an object", f"data.{name}")
        for key, value in entries.items():
            pid_text, _, fd_text = str(key).partition(",")
            try:
                pid, fd, count = int(pid_text), int(fd_text), int(value)
            except (TypeError, ValueError):
                raise err(f"map {name}: entry {key!r}: {value!r} is not pid,fd: bytes",
                          f"data.{name}") from None  # fmt: skip
            if what == "read":
                records.append(SensorRecord(kind="bytes", pid=pid, fd=fd, read_bytes=count))
            else:
                records.append(SensorRecord(kind="bytes", pid=pid, fd=fd, written_bytes=count))
    return records


def parse_sensor_line(line: bytes, *, source: str, line_number: int) -> list[SensorRecord]:
    """One line of ``bpftrace -f json`` output -> its records (a map line gives several).

    Output types the sensor does not use (``time``, ``join``, ``syscall``...) give none.

    Raises:
        SecurityEventError: not a JSON object with ``type``, or an event of the wrong shape.
    """

    def err(message: str, field: str | None = None) -> SecurityEventError:
        return SecurityEventError(message, source=source, line=line_number, field=field)

    try:
        with refusing_deep_nesting(source=source, line=line_number):
            output = _DECODER.decode(line)
    except msgspec.DecodeError as exc:
        raise err(f"not bpftrace JSON output: {exc}") from None
    if output.type == "printf":
        if not isinstance(output.data, str):
            raise err("printf output without text", "data")
        return [_printf(output.data, err)]
    if output.type == "map":
        return _byte_map(output.data, err)
    if output.type in ("attached_probes", "lost_events"):
        key = "probes" if output.type == "attached_probes" else "events"
        count = output.data.get(key) if isinstance(output.data, dict) else None
        if not isinstance(count, int):
            raise err(f"{output.type} without an integer {key}", f"data.{key}")
        return [SensorRecord(kind="attached" if key == "probes" else "lost", count=count)]
    return []
