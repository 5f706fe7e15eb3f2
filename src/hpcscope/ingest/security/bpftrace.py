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

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from hpcscope.ingest.security.lines import SecurityEventError
from hpcscope.model.bounds import refusing_deep_nesting

#: printf kinds -> (record kind, field names after the kind). ``ns`` is CLOCK_MONOTONIC.
_KINDS = {
    "O": "open ns pid tid uid ppid fd flags comm path",
    "M": "mmap ns pid tid uid ppid fd length prot map_flags comm",
    "X": "close ns pid tid uid ppid fd read_bytes written_bytes comm",
    "D": "dup ns pid tid uid ppid fd target_fd",
    "A": "argv ns tid index data",
    "E": "exec ns pid tid uid ppid old_uid old_euid euid length path",
    "C": "connect ns pid tid uid ppid family port sock_type protocol comm address",
    "P": "ptrace ns pid tid uid ppid request target_pid comm",
    "V": "vm_read ns pid tid uid ppid target_pid comm",
    "S": "setns ns pid tid uid ppid fd nstype comm",
    "U": "setuid ns pid tid uid ppid call ruid euid suid comm",
    "K": "creds ns pid tid uid ppid old_uid old_euid new_uid euid gid egid comm",
    "R": "socket ns pid tid uid ppid family sock_type protocol comm",
    "L": "module ns pid tid uid ppid call fd flags comm path",
    "l": "module_done ns pid tid ret",
    "Z": "unlink ns pid tid uid ppid call fd flags comm path",
    "Q": "exit ns pid",
}
PRINTF_FIELDS: dict[str, tuple[str, tuple[str, ...]]] = {
    letter: (spec.split()[0], tuple(spec.split()[1:])) for letter, spec in _KINDS.items()
}
_TEXT_FIELDS = frozenset({"comm", "path", "address", "call", "data"})
#: The maps of bytes per (pid, fd) since the last flush, and what they count.
BYTE_MAPS: dict[str, str] = {"@rb": "read", "@wb": "written"}
_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")


def unescape_buffer(text: str) -> bytes:
    """bpftrace's ``%r`` text -> the bytes: printable ASCII as is, every other byte as
    ``\\xNN`` (a backslash the process wrote followed by ``xNN`` reads as that byte: a limit
    of the format)."""
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text).encode("latin-1", "replace")


@dataclass(frozen=True, slots=True)
class SensorRecord:
    """One event of the sensor program (fields absent from its kind are None).

    Attributes:
        kind: ``open``, ``dup``, ``mmap``, ``close``, ``argv`` (64 bytes of a new image's
            argv), ``exec``, ``connect``, ``ptrace``, ``vm_read``, ``setns``, ``setuid`` (a
            setuid-family call asking for uid 0), ``creds`` (credentials changed by one),
            ``socket`` (a packet or raw socket), ``module`` (init_module, finit_module),
            ``module_done`` (its return), ``unlink``, ``exit``; ``bytes`` (one (pid, fd)
            entry of a flushed byte map: ``read_bytes`` or ``written_bytes`` set);
            ``attached`` (the probes are live: ``count`` probes) or ``lost`` (``count``
            events the kernel's buffer dropped).
        ns: kernel CLOCK_MONOTONIC time in ns.
        ppid: the parent's pid when the event happened (the job of a process already gone).
        fd: the file descriptor (``open``: the return value, negative when the open failed;
            ``dup``: the old one, ``target_fd`` the copy; ``unlink``: the directory's).
        flags: open(2) flags (``module``: finit_module's, ``unlink``: unlinkat's);
            ``map_flags`` and ``prot`` are mmap(2)'s.
        length: mmap length in bytes; ``exec``: the new argv's length.
        read_bytes / written_bytes: bytes since the last flush (``close``, ``bytes``).
        family: 2 (AF_INET), 10 (AF_INET6), 17 (AF_PACKET)...; ``port`` and ``address`` the
            destination; ``sock_type`` and ``protocol`` the socket's.
        request: ptrace request; ``target_pid`` the traced process.
        nstype: setns(2)'s ``nstype`` flags.
        index / data: an ``argv`` record's chunk number and its text (``%r``-escaped).
        old_uid / old_euid: the credentials before an exec or a setuid-family call;
            ``uid`` / ``euid`` (and ``new_uid``, ``gid``, ``egid`` of ``creds``) after.
        call: the syscall (``setuid``, ``finit_module``, ``unlinkat``...); ``ruid``,
            ``euid``, ``suid`` its uid arguments (-1: not an argument of that call).
        ret: the syscall's return (``module_done``).
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
    sock_type: int | None = None
    protocol: int | None = None
    request: int | None = None
    target_pid: int | None = None
    nstype: int | None = None
    index: int | None = None
    data: str | None = None
    old_uid: int | None = None
    old_euid: int | None = None
    new_uid: int | None = None
    euid: int | None = None
    gid: int | None = None
    egid: int | None = None
    call: str | None = None
    ruid: int | None = None
    suid: int | None = None
    ret: int | None = None
    count: int | None = None


class _Output(msgspec.Struct, gc=False):
    type: str
    data: Any = None  # Any: bpftrace's JSON (text, a map object, a count object)


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
    fields: dict[str, int | str] = {}
    for name, value in zip(names, values, strict=True):
        if name in _TEXT_FIELDS:
            fields[name] = value
            continue
        try:
            fields[name] = int(value)
        except ValueError:
            raise err(f"{kind} event: {name} {value!r} is not an integer", f"data.{name}") from None
    return SensorRecord(kind=kind, **fields)  # type: ignore[arg-type]  # names from PRINTF_FIELDS


def _byte_map(
    data: object, err: Callable[[str, str | None], SecurityEventError]
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
