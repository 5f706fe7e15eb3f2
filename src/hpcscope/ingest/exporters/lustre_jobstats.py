"""Lustre ``job_stats`` -> one row per operation per job (:data:`LUSTRE_JOB_STATS_SCHEMA`).

Two layouts (``telemetry.md`` §7, samples in ``tests/fixtures/lustre/``):

* ``lctl get_param obdfilter.*.job_stats mdt.*.job_stats`` (Lustre 2.14+)::

      obdfilter.es01a-OST0001.job_stats=
      job_stats:
      - job_id:          "SLURM_JOB10:0:es18kxe-co-client"
        snapshot_time:   1723114647.887515895 secs.nsecs
        start_time:      1723102025.057286226 secs.nsecs
        elapsed_time:    12622.830229669 secs.nsecs
        write_bytes:     { samples: 861, unit: bytes, min: 24576, max: 16777216, sum: ...,
                           sumsq: ..., hist: { 32K: 1, 64K: 1, ... } }

  One ``<param>.<target>.job_stats=`` header per target; ``obdfilter`` is an OST, ``mdt`` an
  MDT.
* the raw ``/proc/fs/lustre/{obdfilter,mdt}/<target>/job_stats`` file of older servers: no
  header, an integer ``snapshot_time`` and ``{ samples: N, unit: reqs }`` only, so
  ``sum_value``/``min_value``/``max_value`` are null.

This is deliberately a line parser, not a YAML load: the text only looks like YAML. lctl
prepends ``name=`` header lines that are not YAML at all, several targets' documents are
concatenated without ``---`` separators (so ``job_stats:`` repeats as a duplicate key), the
``snapshot_time`` values carry a trailing unit word, ``hist`` keys such as ``4K`` are sizes, and
the 20-digit ``sumsq`` values overflow a YAML float silently. A YAML loader would either refuse
the file or lose precision without telling; this parser reads what Lustre writes and names the
line and column of anything it does not understand.

The job id is split by a site regex (:data:`DEFAULT_JOBID_PATTERN`, setting
``lustre_jobid_pattern``) with a named group ``job`` and an optional ``host``: Lustre writes
whatever the ``jobid_name`` template makes of ``jobid_var`` (``%j:%u:%H`` gives
``12345:1000:gpu01``), and processes outside a Slurm job appear as ``bash:0:host`` or similar;
those keep ``job_id`` null.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NoReturn

import pyarrow as pa

from hpcscope.model.errors import SourceError
from hpcscope.model.schemas import LUSTRE_JOB_STATS_SCHEMA

DEFAULT_JOBID_PATTERN = r"(?:SLURM_JOB)?(?P<job>\d+)(?::\d+(?::(?P<host>[^:\s]+))?)?"
"""Matches (whole id) ``SLURM_JOB10:0:es18kxe-co-client`` (job 10, host es18kxe-co-client),
``SLURM_JOB10``, a bare ``12345`` (``jobid_var=SLURM_JOB_ID``) and ``12345:1000:gpu01``
(``jobid_name=%j:%u:%H``). ``bash:0:host`` (a process outside any job) does not match."""

#: lctl parameter prefix -> component
COMPONENTS = {"obdfilter": "ost", "mdt": "mdt"}

_HEADER = re.compile(r"(?P<kind>[A-Za-z_][\w-]*)\.(?P<target>[^\s=]+)\.job_stats=(?P<rest>.*)")
_KEY = re.compile(r"(?P<indent>\s*)(?P<key>[A-Za-z_]\w*):(?P<gap>\s*)(?P<value>.*)")
_JOB_ID = re.compile(r"-\s+job_id:(?P<gap>\s*)(?P<value>.*)")
_FIELD = re.compile(r"\s*(?P<key>[A-Za-z_]\w*)\s*:\s*")
_TOKEN = re.compile(r"[^,{}\s]+")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_TIME = re.compile(r"(?P<secs>\d+)(?:\.(?P<frac>\d{1,9}))?(?:\s+secs(?:\.nsecs)?)?\s*")
_UNIT = re.compile(r"[A-Za-z]+")
_ENTRY_TIMES = {"snapshot_time", "start_time", "elapsed_time"}
_NUMERIC_FIELDS = {"samples", "min", "max", "sum", "sumsq"}


class JobStatsFormatError(SourceError):
    """job_stats text that cannot be read.

    ``partial`` holds the rows of the entries completed before the bad line (an entry is a
    self-contained snapshot, so they are safe to keep); ``None`` when there were none.
    """

    partial: pa.Table | None = None


def compile_jobid_pattern(pattern: str | re.Pattern[str]) -> re.Pattern[str]:
    """Compile a job id pattern and check it has a ``job`` group (``host`` is optional).

    Raises:
        ValueError: the pattern does not compile or has no ``(?P<job>...)`` group.
    """
    try:
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
    except re.error as exc:
        raise ValueError(f"not a regular expression: {exc}") from None
    if "job" not in compiled.groupindex:
        raise ValueError("the pattern needs a named group (?P<job>...) for the Slurm job id")
    return compiled


@dataclass(slots=True)
class _Columns:
    """Column lists of the table being built (one append per operation line)."""

    ts_us: list[int] = field(default_factory=list)
    target: list[str | None] = field(default_factory=list)
    component: list[str | None] = field(default_factory=list)
    job_id_raw: list[str] = field(default_factory=list)
    job_id: list[str | None] = field(default_factory=list)
    host: list[str | None] = field(default_factory=list)
    operation: list[str] = field(default_factory=list)
    unit: list[str] = field(default_factory=list)
    samples: list[float] = field(default_factory=list)
    sum_value: list[float | None] = field(default_factory=list)
    min_value: list[float | None] = field(default_factory=list)
    max_value: list[float | None] = field(default_factory=list)
    start_us: list[int | None] = field(default_factory=list)

    def table(self, server: str, rows: int | None = None) -> pa.Table:
        n = len(self.operation) if rows is None else rows
        ts = pa.array(self.ts_us[:n], pa.int64()).cast(LUSTRE_JOB_STATS_SCHEMA.field("ts").type)
        start = pa.array(self.start_us[:n], pa.int64()).cast(
            LUSTRE_JOB_STATS_SCHEMA.field("start_ts").type
        )
        return pa.Table.from_arrays(
            [
                ts,
                pa.array([server] * n, pa.string()),
                pa.array(self.target[:n], pa.string()),
                pa.array(self.component[:n], pa.string()),
                pa.array(self.job_id_raw[:n], pa.string()),
                pa.array(self.job_id[:n], pa.string()),
                pa.array(self.host[:n], pa.string()),
                pa.array(self.operation[:n], pa.string()),
                pa.array(self.unit[:n], pa.string()),
                pa.array(self.samples[:n], pa.float64()),
                pa.array(self.sum_value[:n], pa.float64()),
                pa.array(self.min_value[:n], pa.float64()),
                pa.array(self.max_value[:n], pa.float64()),
                start,
            ],
            schema=LUSTRE_JOB_STATS_SCHEMA,
        )


@dataclass(slots=True)
class _Entry:
    """The ``- job_id:`` block being read."""

    job_id_raw: str
    line: int
    job_id: str | None
    host: str | None
    snapshot_us: int | None = None
    start_us: int | None = None
    ops: list[tuple[str, str, float, float | None, float | None, float | None]] = field(
        default_factory=list
    )


class _Parser:
    def __init__(
        self,
        source: str,
        server: str,
        target: str | None,
        component: str | None,
        pattern: re.Pattern[str],
    ) -> None:
        self.source = source
        self.server = server
        self.target = target
        self.component = component
        self.pattern = pattern
        self.columns = _Columns()
        self.entry: _Entry | None = None
        self.ids: dict[str, tuple[str | None, str | None]] = {}
        self.lineno = 0

    def error(self, message: str, column: int | None = None, fld: str | None = None) -> NoReturn:
        exc = JobStatsFormatError(
            message, source=self.source, line=self.lineno, column=column, field=fld
        )
        # rows reach the columns only when their entry is complete (finish_entry)
        complete = len(self.columns.operation)
        exc.partial = self.columns.table(self.server, complete) if complete else None
        raise exc

    def run(self, text: str) -> pa.Table:
        for self.lineno, raw in enumerate(text.splitlines(), start=1):
            line = raw.rstrip()
            if line.strip():
                self.line(line)
        self.finish_entry()
        return self.columns.table(self.server)

    def line(self, line: str) -> None:
        header = _HEADER.fullmatch(line)
        if header is not None:
            self.finish_entry()
            self.header(header)
            return
        job = _JOB_ID.fullmatch(line)
        if job is not None:
            self.finish_entry()
            self.start_entry(job.group("value"), job.start("value") + 1)
            return
        key = _KEY.fullmatch(line)
        if key is None:
            self.error(
                "expected a '<param>.job_stats=' header, '- job_id:', 'name: value' "
                f"or 'operation: {{ ... }}' line, found {line.strip()[:40]!r}",
                len(line) - len(line.lstrip()) + 1,
            )
        name, value = key.group("key"), key.group("value")
        if name == "job_stats" and not key.group("indent"):
            if value.strip() not in ("", "[]"):
                self.error("'job_stats:' takes no value here", key.start("value") + 1)
            self.finish_entry()
            return
        if self.entry is None:
            self.error(f"{name!r} outside a '- job_id:' entry", key.start("key") + 1)
        if name in _ENTRY_TIMES:
            self.entry_time(self.entry, name, value, key.start("value") + 1)
        elif value.startswith("{"):
            self.operation(self.entry, name, line, key.start("value"))
        else:
            self.error(
                f"unknown key {name!r}: expected snapshot_time, start_time, elapsed_time "
                "or an operation '{ samples: ..., unit: ... }'",
                key.start("key") + 1,
                name,
            )

    def header(self, match: re.Match[str]) -> None:
        kind = match.group("kind")
        component = COMPONENTS.get(kind)
        if component is None:
            self.error(
                f"unknown parameter {kind!r}: expected obdfilter.*.job_stats or mdt.*.job_stats", 1
            )
        self.target = match.group("target")
        self.component = component
        rest = match.group("rest").strip()
        if rest not in ("", "job_stats:"):
            self.error("unexpected text after the header", match.start("rest") + 1)

    def start_entry(self, value: str, column: int) -> None:
        value = value.strip()
        if value[:1] in ('"', "'"):
            if len(value) < 2 or value[-1] != value[0]:
                self.error(f"unterminated quoted job_id {value!r}", column, "job_id")
            value = value[1:-1]
        if not value:
            self.error("empty job_id", column, "job_id")
        cached = self.ids.get(value)
        if cached is None:
            match = self.pattern.fullmatch(value)
            groups = match.groupdict() if match is not None else {}
            cached = (groups.get("job"), groups.get("host"))
            self.ids[value] = cached
        self.entry = _Entry(
            job_id_raw=value,
            line=self.lineno,
            job_id=cached[0],
            host=cached[1],
        )

    def entry_time(self, entry: _Entry, name: str, value: str, column: int) -> None:
        match = _TIME.fullmatch(value)
        if match is None:
            self.error(
                f"expected seconds (or 'secs.nsecs'), found {value.strip()[:30]!r}", column, name
            )
        micros = int(match.group("secs")) * 1_000_000 + int(
            (match.group("frac") or "0").ljust(9, "0")[:6]
        )
        if name == "snapshot_time":
            entry.snapshot_us = micros
        elif name == "start_time":
            entry.start_us = micros

    def operation(self, entry: _Entry, name: str, line: str, brace: int) -> None:
        fields: dict[str, tuple[str, int]] = {}
        pos = brace + 1
        while True:
            while pos < len(line) and line[pos].isspace():
                pos += 1
            if pos >= len(line):
                self.error("unterminated '{': missing '}'", pos + 1, name)
            if line[pos] == "}":
                pos += 1
                break
            match = _FIELD.match(line, pos)
            if match is None:
                self.error("expected 'field: value'", pos + 1, name)
            key, pos = match.group("key"), match.end()
            if key == "hist":
                pos = self.histogram(line, pos, name)
            else:
                token = _TOKEN.match(line, pos)
                if token is None:
                    self.error(f"missing value of {key!r}", pos + 1, name)
                fields[key] = (token.group(), pos + 1)
                pos = token.end()
            while pos < len(line) and line[pos].isspace():
                pos += 1
            if pos < len(line) and line[pos] == ",":
                pos += 1
            elif pos < len(line) and line[pos] != "}":
                self.error(f"expected ',' or '}}', found {line[pos]!r}", pos + 1, name)
        if line[pos:].strip():
            self.error("unexpected text after '}'", pos + 1, name)
        if "samples" not in fields or "unit" not in fields:
            missing = "samples" if "samples" not in fields else "unit"
            self.error(f"operation without {missing!r}", brace + 1, name)
        unit, unit_column = fields["unit"]
        if _UNIT.fullmatch(unit) is None:
            self.error(f"unit must be a word, found {unit!r}", unit_column, name)
        values: dict[str, float] = {}
        for key, (written, column) in fields.items():
            if key in _NUMERIC_FIELDS:
                if _NUMBER.fullmatch(written) is None:
                    self.error(f"{key} must be a number, found {written!r}", column, name)
                values[key] = float(written)
        entry.ops.append(
            (name, unit, values["samples"], values.get("sum"), values.get("min"), values.get("max"))
        )

    def histogram(self, line: str, pos: int, name: str) -> int:
        """Check a ``hist: { 4K: 1, ... }`` map (not stored) and return the position after it."""
        if pos >= len(line) or line[pos] != "{":
            self.error("hist must be a '{ size: count, ... }' map", pos + 1, name)
        end = line.find("}", pos)
        if end < 0:
            self.error("unterminated hist '{'", pos + 1, name)
        offset = pos + 1
        for bucket in line[pos + 1 : end].split(","):
            if bucket.strip():
                size, colon, count = bucket.partition(":")
                if not colon or not size.strip() or not count.strip().isdigit():
                    column = offset + len(bucket) - len(bucket.lstrip()) + 1
                    self.error(f"bad hist bucket {bucket.strip()!r}", column, name)
            offset += len(bucket) + 1
        return end + 1

    def finish_entry(self) -> None:
        entry = self.entry
        if entry is None:
            return
        if entry.snapshot_us is None:
            self.lineno = entry.line
            self.error(f"job {entry.job_id_raw!r} has no snapshot_time", 1, "snapshot_time")
        c = self.columns
        for operation, unit, samples, total, low, high in entry.ops:
            c.ts_us.append(entry.snapshot_us)
            c.target.append(self.target)
            c.component.append(self.component)
            c.job_id_raw.append(entry.job_id_raw)
            c.job_id.append(entry.job_id)
            c.host.append(entry.host)
            c.operation.append(operation)
            c.unit.append(unit)
            c.samples.append(samples)
            c.sum_value.append(total)
            c.min_value.append(low)
            c.max_value.append(high)
            c.start_us.append(entry.start_us)
        self.entry = None


def parse_job_stats(
    text: str,
    *,
    source: str,
    server: str,
    target: str | None = None,
    component: str | None = None,
    jobid_pattern: str | re.Pattern[str] = DEFAULT_JOBID_PATTERN,
) -> pa.Table:
    """Parse job_stats text (lctl output or a ``/proc`` file) into rows.

    Args:
        text: the whole output; several targets may follow each other.
        source: where it came from (file path), for error messages.
        server: the Lustre server (OSS/MDS) the text was read on; stored in every row.
        target: the OST/MDT of a headerless ``/proc`` file; a header line overrides it.
        component: ``ost`` or ``mdt`` for a headerless file; a header line overrides it.
        jobid_pattern: regex matched against the whole job id, with a named group ``job`` and
            optionally ``host`` (see :data:`DEFAULT_JOBID_PATTERN`).

    Returns:
        A table of :data:`LUSTRE_JOB_STATS_SCHEMA`, in file order.

    Raises:
        JobStatsFormatError: a line that is neither a header, an entry key nor an operation, a
            value that is not a number, an entry without ``snapshot_time``; it names the
            source, line and column, and carries the complete entries before it
            (``partial``).
        ValueError: ``jobid_pattern`` has no ``job`` group.
    """
    if component is not None and component not in COMPONENTS.values():
        raise ValueError(f"component must be 'ost' or 'mdt', not {component!r}")
    pattern = compile_jobid_pattern(jobid_pattern)
    return _Parser(source, server, target, component, pattern).run(text)
