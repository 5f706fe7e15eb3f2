"""Falco alerts (``json_output: true``): one JSON object per line -> one row per alert.

Format (``security.md`` §8; sample ``tests/fixtures/security/falco/``): ``time`` (RFC 3339,
ns), ``rule``, ``priority`` (Emergency..Debug), ``output``, ``hostname``, ``source``,
``tags``, ``output_fields`` (typed: ``evt.time`` in ns since the epoch; fields Falco could not
resolve are null or ``<NA>``). ``source``, ``tags`` and ``output`` are optional
(``json_include_*_property``) and older alerts lack them; Falcosidekick may add ``uuid``.

The Slurm job comes from ``thread.cgroups``, which hpcscope's rules add with
``append_output`` (``deploy/falco/hpcscope_rules.yaml``): enroot and Apptainer jobs look like
``host`` to Falco's container fields, but their cgroup is the job's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import IO

import msgspec

from hpcscope.ingest.security.cgroups import slurm_job_from_falco_cgroups
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
from hpcscope.model.security_events import FALCO_ALERT_SCHEMA, FALCO_PRIORITIES

FALCO_FIELD_COLUMNS: Mapping[str, str] = {
    "evt.time": "event_time_ns",
    "evt.type": "evt_type",
    "proc.name": "proc_name",
    "proc.exe": "proc_exe",
    "proc.exepath": "proc_exe",
    "proc.cmdline": "proc_cmdline",
    "proc.pname": "proc_pname",
    "proc.pexepath": "proc_pexe",
    "proc.pexe": "proc_pexe",
    "proc.tty": "proc_tty",
    "proc.pid": "proc_pid",
    "proc.ppid": "proc_ppid",
    "user.name": "user_name",
    "user.uid": "user_uid",
    "user.loginuid": "user_loginuid",
    "container.id": "container_id",
    "container.name": "container_name",
    "container.image.repository": "container_image",
    "container.mounts": "container_mounts",
    "k8s.ns.name": "pod_namespace",
    "k8s.pod.name": "pod_name",
    "evt.arg.flags": "evt_flags",
    "fd.name": "fd_name",
    "fd.l4proto": "fd_l4proto",
    "fd.cip": "fd_cip",
    "fd.cport": "fd_cport",
    "fd.sip": "fd_sip",
    "fd.sport": "fd_sport",
    "fd.rip": "fd_rip",
    "fd.rport": "fd_rport",
    "evt.arg.pid": "target_pid",
    "thread.cgroups": "cgroups",
}
"""Falco output fields the parser maps, and their column (the rest stay in ``raw``)."""

_INT_COLUMNS = frozenset(
    {
        "proc_pid",
        "proc_ppid",
        "proc_tty",
        "user_uid",
        "user_loginuid",
        "fd_cport",
        "fd_sport",
        "fd_rport",
        "target_pid",
    }
)
#: Column -> the Falco field that wins when two fields fill it (the first listed above).
_FIRST_WINS: Mapping[str, str] = {
    column: name for name, column in reversed(list(FALCO_FIELD_COLUMNS.items()))
}
_EMPTY_ROW: Mapping[str, object] = dict.fromkeys(FALCO_ALERT_SCHEMA.names)
_MAX_ANCESTORS = 8  # proc.aname[2..8]: as far as any rule's output goes
Row = dict[str, object]
"""One row being built: column name -> value (:data:`FALCO_ALERT_SCHEMA`)."""
_PRIORITY_ALIASES = {"info": "informational", "warn": "warning", "err": "error", "crit": "critical"}


class _FalcoAlert(msgspec.Struct, gc=False):
    rule: str
    priority: str
    time: str | None = None
    output: str | None = None
    hostname: str | None = None
    source: str | None = None
    tags: list[str] | str | None = None  # a string in some forwarders' payloads
    uuid: str | None = None
    output_fields: dict[str, object] | None = None


_DECODER = msgspec.json.Decoder(_FalcoAlert)


def normalize_priority(priority: str) -> str | None:
    """Falco's priority, lower-cased and unaliased (``Info`` -> ``informational``); or None."""
    name = priority.strip().lower()
    name = _PRIORITY_ALIASES.get(name, name)
    return name if name in FALCO_PRIORITIES else None


def _ancestors(fields: Mapping[str, object]) -> list[str] | None:
    """``proc.pname``, ``proc.aname[2]``, ``proc.aname[3]``... while present: the process's
    ancestors from its parent up (Falco prints the indices a rule's output asks for)."""
    names: list[str] = []
    parent = as_str(fields.get("proc.pname"))
    if parent is not None:
        names.append(parent)
    for level in range(2, _MAX_ANCESTORS + 1):
        name = as_str(fields.get(f"proc.aname[{level}]"))
        if name is not None:
            names.append(name)
    return names or None


def falco_alert_row(line: bytes, *, source: str, line_number: int) -> Row:
    """One alert line -> one row of :data:`FALCO_ALERT_SCHEMA` (a dict keyed by column).

    Raises:
        SecurityEventError: not JSON (with the column), not an alert, no usable time, or an
            unknown priority.
    """
    try:
        with refusing_deep_nesting(source=source, line=line_number):
            alert = _DECODER.decode(line)
    except msgspec.DecodeError as exc:
        raise decode_error(exc, line, source=source, line_number=line_number) from None
    priority = normalize_priority(alert.priority)
    if priority is None:
        raise SecurityEventError(
            f"unknown priority {alert.priority!r} (Falco's are Emergency..Debug)",
            source=source,
            line=line_number,
            field="priority",
        )
    fields = alert.output_fields or {}
    time_ns = as_int(fields.get("evt.time"))
    if time_ns is None and alert.time is not None:
        time_ns = rfc3339_to_ns(alert.time)
    if time_ns is None:
        raise SecurityEventError(
            "no time: neither output_fields.evt.time (ns) nor an RFC 3339 time",
            source=source,
            line=line_number,
            field="time",
        )
    row: Row = dict(_EMPTY_ROW)  # every column (null) as the schema has them
    row |= {
        "ts": time_ns // 1000,
        "event_time_ns": time_ns,
        "rule": alert.rule,
        "priority": priority,
        "priority_level": FALCO_PRIORITIES.index(priority),
        "hostname": alert.hostname or as_str(fields.get("evt.hostname")),
        "source": alert.source,
        "tags": alert.tags.split(",") if isinstance(alert.tags, str) else alert.tags,
        "output": alert.output,
        "uuid": alert.uuid,
        "raw": line.decode("utf-8", errors="replace"),
        "source_name": source,
        "source_line": line_number,
    }
    for name, value in fields.items():  # the fields the alert carries (10-20), not all we map
        column = FALCO_FIELD_COLUMNS.get(name)
        if column is None or name == "evt.time" or value is None:
            continue
        converted = as_int(value) if column in _INT_COLUMNS else as_str(value)
        if converted is not None and (
            row.get(column) is None or _FIRST_WINS.get(column) == name
        ):  # two Falco fields may fill one column: the first of FALCO_FIELD_COLUMNS wins
            row[column] = converted
    row["proc_anames"] = _ancestors(fields)
    cgroups = row["cgroups"]
    job = slurm_job_from_falco_cgroups(cgroups if isinstance(cgroups, str) else None)
    if job is not None:
        row["job_id"], row["job_sluid"], row["job_step"] = job.job_id, job.job_sluid, job.step
    return row


def parse_falco_lines(
    stream: IO[bytes] | Iterable[bytes], *, source: str, first_line: int = 1
) -> ParseResult:
    """Every alert of a Falco JSON-lines stream; bad lines become errors, the rest parse.

    Args:
        stream: a binary file or pipe, or any iterable of lines (newlines optional).
        source: the file, pipe or URL, named in errors and kept in ``source_name``.
        first_line: number of the stream's first line (for a tailer resuming mid-file).
    """
    rows: list[Row] = []
    errors: list[SecurityEventError] = []
    count = 0
    for number, line in iter_lines(stream, first_line=first_line):
        count += 1
        try:
            rows.append(falco_alert_row(line, source=source, line_number=number))
        except SecurityEventError as exc:
            errors.append(exc)
    return ParseResult(table_from_rows(rows, FALCO_ALERT_SCHEMA), tuple(errors), count)
