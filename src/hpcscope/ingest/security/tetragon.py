"""Tetragon JSON export: one event per line, its top-level key naming its type.

Format (``security.md`` §8; samples ``tests/fixtures/security/tetragon/``): ``process_exec``,
``process_exit``, ``process_kprobe`` (and ``process_tracepoint``, ``process_lsm``, which share
the kprobe shape), plus ``node_name`` and ``time`` (RFC 3339, ns). The ``process`` object has
``exec_id``, ``pid``, ``uid``, ``auid``, ``cwd``, ``binary``, ``arguments``, ``flags``,
``start_time``, ``parent_exec_id``, ``tid``; ``pod`` only on Kubernetes, ``docker`` optional.
Kprobe events add ``parent``, ``function_name``, typed ``args[]`` (``file_arg``/``path_arg``
``{path, permission}``, ``int_arg``, ``string_arg``, ``sock_arg``, ``sockaddr_arg``,
``process_credentials_arg``, ``module_arg``, ...), ``return``, ``action``, ``policy_name``.
protojson writes 64-bit integers (``size_arg``, ``long_arg``) as strings. A tracepoint names
its hook in ``event`` (and ``subsys``). The legacy ``process_connect``/``process_listen``/
``process_close`` of older Isovalent exports carry ``source_ip``, ``source_port``,
``destination_ip``, ``destination_port`` (listen: ``ip``, ``port``) and ``protocol``.

Other event types (``process_uprobe``, ``process_loader``, ``rate_limit_info``...) keep their
type, node, time and raw line. The job comes from an :class:`ExecJobCache` when one is given;
else from ``process.slurm_job``, the extension ``hpcscope sensor`` writes (``job_source``
``sensor cgroup`` or ``sensor stepd``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import IO

import msgspec

from hpcscope.ingest.security.exec_cache import ExecJob, ExecJobCache
from hpcscope.ingest.security.lines import (
    ParseResult,
    SecurityEventError,
    as_int,
    as_str,
    decode_error,
    iter_lines,
    rfc3339_to_ns,
    table_from_rows,
)
from hpcscope.model.bounds import refusing_deep_nesting
from hpcscope.model.security_events import TETRAGON_EVENT_SCHEMA

_META_KEYS = frozenset({"node_name", "time", "node_labels", "cluster_name", "aggregation_info"})
# Hooks whose int argument is a MAY_* access mask (arg1 of security_file_permission).
_ACCESS_MASK_HOOKS = frozenset({"security_file_permission", "security_inode_permission"})

Row = dict[str, object]
"""One row being built: column name -> value (:data:`TETRAGON_EVENT_SCHEMA`)."""

Number = int | str | None  # protojson writes 64-bit integers as strings


class _Container(msgspec.Struct, gc=False):
    id: str | None = None
    name: str | None = None


class _Pod(msgspec.Struct, gc=False):
    namespace: str | None = None
    name: str | None = None
    container: _Container | None = None


class _SlurmJob(msgspec.Struct, gc=False):
    """hpcscope's sensor extension: the job it resolved while the process was alive."""

    job_id: str | None = None
    job_sluid: str | None = None
    step: str | None = None
    source: str | None = None


class _Process(msgspec.Struct, gc=False):
    exec_id: str | None = None
    pid: Number = None
    tid: Number = None
    uid: Number = None
    auid: Number = None
    cwd: str | None = None
    binary: str | None = None
    arguments: str | None = None
    flags: str | None = None
    start_time: str | None = None
    parent_exec_id: str | None = None
    docker: str | None = None
    pod: _Pod | None = None
    slurm_job: _SlurmJob | None = None


class _File(msgspec.Struct, gc=False):
    path: str | None = None
    permission: str | None = None


class _Sock(msgspec.Struct, gc=False):
    family: str | None = None
    protocol: str | None = None
    saddr: str | None = None
    daddr: str | None = None
    sport: Number = None
    dport: Number = None


class _Sockaddr(msgspec.Struct, gc=False):
    family: str | None = None
    addr: str | None = None
    port: Number = None


class _Credentials(msgspec.Struct, gc=False):
    uid: Number = None
    euid: Number = None


class _Module(msgspec.Struct, gc=False):
    name: str | None = None
    tainted: list[str] | None = None


class _Arg(msgspec.Struct, gc=False):
    """One ``KprobeArgument``: one of these keys is set (unknown kinds are skipped)."""

    int_arg: Number = None
    uint_arg: Number = None
    size_arg: Number = None
    long_arg: Number = None
    string_arg: str | None = None
    file_arg: _File | None = None
    path_arg: _File | None = None
    linux_binprm_arg: _File | None = None
    sock_arg: _Sock | None = None
    sockaddr_arg: _Sockaddr | None = None
    process_credentials_arg: _Credentials | None = None
    module_arg: _Module | None = None

    def integer(self) -> int | None:
        for value in (self.int_arg, self.uint_arg, self.size_arg, self.long_arg):
            if value is not None:
                return as_int(value)
        return None

    def file(self) -> _File | None:
        return self.file_arg or self.path_arg or self.linux_binprm_arg


class _Event(msgspec.Struct, gc=False):
    process: _Process | None = None
    parent: _Process | None = None
    function_name: str | None = None
    event: str | None = None  # a tracepoint's hook
    policy_name: str | None = None
    action: str | None = None
    args: list[_Arg] | None = None
    return_: _Arg | None = msgspec.field(default=None, name="return")
    status: Number = None
    signal: str | None = None
    # legacy process_connect / process_listen / process_close
    source_ip: str | None = None
    source_port: Number = None
    destination_ip: str | None = None
    destination_port: Number = None
    ip: str | None = None
    port: Number = None
    protocol: str | None = None


class _Line(msgspec.Struct, gc=False):
    node_name: str | None = None
    time: str | None = None
    process_exec: _Event | None = None
    process_exit: _Event | None = None
    process_kprobe: _Event | None = None
    process_tracepoint: _Event | None = None
    process_lsm: _Event | None = None
    process_connect: _Event | None = None
    process_listen: _Event | None = None
    process_close: _Event | None = None


_DECODER = msgspec.json.Decoder(_Line)
_KEYS = msgspec.json.Decoder(dict[str, msgspec.Raw])  # the top-level keys, values unread
_TYPES = (
    "process_exec", "process_exit", "process_kprobe", "process_tracepoint", "process_lsm",
    "process_connect", "process_listen", "process_close",
)  # fmt: skip


def _typed(line: _Line) -> tuple[str, _Event] | None:
    for name in _TYPES:
        event = getattr(line, name)
        if event is not None:
            return name, event
    return None


def _args(row: Row, args: list[_Arg]) -> None:
    ints: list[int] = []
    paths: list[_File] = []
    for arg in args:
        file = arg.file()
        if file is not None:
            paths.append(file)
        number = arg.integer()
        if number is not None:
            ints.append(number)
        if arg.string_arg is not None and row["string_arg"] is None:
            row["string_arg"] = arg.string_arg
        sock = arg.sock_arg
        if sock is not None and row["sock_daddr"] is None:
            row.update(
                sock_family=sock.family,
                sock_protocol=sock.protocol,
                sock_saddr=sock.saddr,
                sock_sport=as_int(sock.sport),
                sock_daddr=sock.daddr,
                sock_dport=as_int(sock.dport),
            )
        address = arg.sockaddr_arg
        if address is not None and row["sock_daddr"] is None:
            row.update(
                sock_family=address.family,
                sock_daddr=address.addr,
                sock_dport=as_int(address.port),
            )
        creds = arg.process_credentials_arg
        if creds is not None and row["cred_uid"] is None:
            row["cred_uid"], row["cred_euid"] = as_int(creds.uid), as_int(creds.euid)
        module = arg.module_arg
        if module is not None and row["module_name"] is None:
            row["module_name"], row["module_tainted"] = module.name, module.tainted or None
    if paths:
        row["file_path"], row["file_mode"] = _absolute(paths[0].path), paths[0].permission
    if len(paths) > 1:
        row["entry_path"] = as_str(paths[1].path)
    row["int_args"] = ints or None
    if row["function_name"] in _ACCESS_MASK_HOOKS and ints:
        row["access_mask"] = ints[0]


def _absolute(path: str | None) -> str | None:
    """A file argument's path as an absolute path: Tetragon walks the dentry from the root,
    and older agents (the FollowFD events of 0.8) printed it without its leading slash
    (``etc/passwd``)."""
    if not path or path.startswith(("/", "memfd:", "anon_inode:", "pipe:", "socket:", ".")):
        return path
    return f"/{path}"


def _legacy_network(row: Row, event: _Event) -> None:
    """``process_connect``/``process_close``: source and destination; ``process_listen``: the
    listening address as the source."""
    row.update(
        sock_protocol=event.protocol,
        sock_saddr=event.source_ip or event.ip,
        sock_sport=as_int(event.source_port if event.source_port is not None else event.port),
        sock_daddr=event.destination_ip,
        sock_dport=as_int(event.destination_port),
    )


def tetragon_event_row(
    line: bytes, *, source: str, line_number: int, jobs: ExecJobCache | None = None
) -> Row:
    """One export line -> one row of :data:`TETRAGON_EVENT_SCHEMA` (a dict keyed by column).

    ``jobs`` resolves the job: ``process_exec`` reads the cgroup once, ``process_exit`` evicts.

    Raises:
        SecurityEventError: not JSON (with the column), not an object, or no event key.
    """
    try:
        with refusing_deep_nesting(source=source, line=line_number):
            decoded = _DECODER.decode(line)
    except msgspec.DecodeError as exc:
        raise decode_error(exc, line, source=source, line_number=line_number) from None
    typed = _typed(decoded)
    row: Row = dict.fromkeys(TETRAGON_EVENT_SCHEMA.names)
    row.update(
        node_name=decoded.node_name,
        raw=line.decode("utf-8", errors="replace"),
        source_name=source,
        source_line=line_number,
    )
    if typed is None:
        try:  # the typed decoder skips unknown keys unread: this read checks all of them
            with refusing_deep_nesting(source=source, line=line_number):
                untyped = _KEYS.decode(line)
        except msgspec.DecodeError as exc:
            raise decode_error(exc, line, source=source, line_number=line_number) from None
        keys = [key for key in untyped if key not in _META_KEYS]
        if not keys:
            raise SecurityEventError(
                "no event: expected a top-level key such as process_exec or process_kprobe",
                source=source,
                line=line_number,
            )
        row["event_type"] = keys[0]
        _time(row, decoded.time, None)
        return row
    event_type, event = typed
    row["event_type"] = event_type
    process = event.process or _Process()
    _time(row, decoded.time, process.start_time if event_type == "process_exec" else None)
    row.update(
        exec_id=process.exec_id,
        parent_exec_id=process.parent_exec_id,
        pid=as_int(process.pid),
        tid=as_int(process.tid),
        uid=as_int(process.uid),
        auid=as_int(process.auid),
        binary=process.binary,
        arguments=process.arguments,
        cwd=process.cwd,
        flags=process.flags,
        parent_binary=event.parent.binary if event.parent else None,
        function_name=event.function_name or event.event,
        policy_name=event.policy_name,
        action=event.action,
        exit_status=as_int(event.status),
        exit_signal=event.signal or None,
    )
    if process.pod is not None:
        row["pod_namespace"], row["pod_name"] = process.pod.namespace, process.pod.name
        if process.pod.container is not None:
            row["container_id"] = process.pod.container.id
            row["container_name"] = process.pod.container.name
    row["container_id"] = row["container_id"] or process.docker
    if event.args:
        _args(row, event.args)
    if event.return_ is not None:
        row["return_int"] = event.return_.integer()
    if event_type in ("process_connect", "process_listen", "process_close"):
        _legacy_network(row, event)
    if jobs is not None:
        _attribute(row, event_type, jobs, process)
    job = process.slurm_job
    if job is not None and row["job_id"] is None and row["job_sluid"] is None:
        row["job_id"], row["job_sluid"], row["job_step"] = job.job_id, job.job_sluid, job.step
        row["job_source"] = f"sensor {job.source}" if job.source else "sensor"
    return row


def _time(row: Row, time: str | None, fallback: str | None) -> None:
    nanos = rfc3339_to_ns(time) if time else None
    if nanos is None and fallback:
        nanos = rfc3339_to_ns(fallback)
    if nanos is not None:
        row["event_time_ns"], row["ts"] = nanos, nanos // 1000


def _attribute(row: Row, event_type: str, jobs: ExecJobCache, process: _Process) -> None:
    exec_id, pid, parent = process.exec_id, as_int(process.pid), process.parent_exec_id
    found: ExecJob
    if event_type == "process_exec" and exec_id is not None:
        found = jobs.on_exec(exec_id, pid, parent)
    else:
        found = jobs.lookup(exec_id, pid, parent)
    if event_type == "process_exit":
        jobs.on_exit(exec_id)
    if found.job is not None:
        row["job_id"], row["job_sluid"] = found.job.job_id, found.job.job_sluid
        row["job_step"], row["job_source"] = found.job.step, found.how


def parse_tetragon_lines(
    stream: IO[bytes] | Iterable[bytes],
    *,
    source: str,
    jobs: ExecJobCache | None = None,
    first_line: int = 1,
) -> ParseResult:
    """Every event of a Tetragon JSON-lines export; bad lines become errors, the rest parse.

    Args:
        stream: a binary file or pipe, or any iterable of lines.
        source: the file or pipe, named in errors and kept in ``source_name``.
        jobs: resolves each process's Slurm job (host mode); None leaves job columns null.
        first_line: number of the stream's first line (for a tailer resuming mid-file).
    """
    rows: list[Row] = []
    errors: list[SecurityEventError] = []
    count = 0
    for number, line in iter_lines(stream, first_line=first_line):
        count += 1
        try:
            rows.append(tetragon_event_row(line, source=source, line_number=number, jobs=jobs))
        except SecurityEventError as exc:
            errors.append(exc)
    return ParseResult(table_from_rows(rows, TETRAGON_EVENT_SCHEMA), tuple(errors), count)
