"""Reading the Lustre job_stats spool: one ``<server>.job_stats`` file per OSS/MDS.

A cron job on each Lustre server (``deploy/lustre/hpcscope-jobstats``) writes the output of
``lctl get_param obdfilter.*.job_stats mdt.*.job_stats`` to ``<spool>/<server>.job_stats``
through a temporary file and a rename, so a reader sees either the old snapshot or the new
one, never half of one; the digital twin writes the same files. The spool is a shared
filesystem or an rsync target on the hpcscope server.

Each cycle, :meth:`LustreSpool.collect_once` reads the files whose modification time or size
changed since they were last read, parses them (the file name's stem is the server) and
appends the rows; the store skips snapshots it already holds, so reading a file twice is
harmless. Every file read gives one ``scrapes`` row (exporter ``lustre``, target = the path):
a malformed file is a failed row carrying the parser's ``file:line:column`` message, its
complete entries before the bad line are still stored, and the other files are read as usual.
A malformed file is not read again until it changes; an unreadable one (permissions, a
vanished file) is retried every cycle.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pyarrow as pa

from hpcscope.ingest.exporters.lustre_jobstats import (
    DEFAULT_JOBID_PATTERN,
    JobStatsFormatError,
    compile_jobid_pattern,
    parse_job_stats,
)
from hpcscope.model.schemas import SCRAPE_SCHEMA
from hpcscope.model.timeutil import utcnow
from hpcscope.service.spool import SpoolFiles
from hpcscope.store import Store
from hpcscope.store.lustre import append_job_stats_by_server

log = logging.getLogger(__name__)

SUFFIX = ".job_stats"
EXPORTER = "lustre"


@dataclass(frozen=True, slots=True)
class SpoolRead:
    """One read of one spool file: what became of it."""

    ts: datetime
    path: Path
    server: str
    ok: bool
    duration_seconds: float
    rows: int
    """Rows parsed from the file (for a malformed file: from its complete entries)."""
    stored: int
    """Rows new to the store (the rest were snapshots it already held)."""
    error: str | None = None

    def as_scrape_row(self) -> dict[str, object]:
        """This read as a row of :data:`SCRAPE_SCHEMA`."""
        return {
            "ts": self.ts,
            "target": str(self.path),
            "exporter": EXPORTER,
            "node": self.server,
            "ok": self.ok,
            "duration_seconds": self.duration_seconds,
            "samples": self.rows,
            "rejected_lines": 0 if self.ok else 1,
            "error": self.error,
        }


def scrape_rows(reads: list[SpoolRead]) -> pa.Table:
    """The ``scrapes`` rows of some reads."""
    return pa.Table.from_pylist([read.as_scrape_row() for read in reads], schema=SCRAPE_SCHEMA)


class LustreSpool:
    """Reads changed ``<server>.job_stats`` files of one directory into the store.

    Args:
        store: where rows go.
        directory: the spool directory (need not exist yet: a missing directory reads as
            empty, with a warning).
        jobid_pattern: the site's job id regex (setting ``lustre_jobid_pattern``).
    """

    def __init__(
        self, store: Store, directory: Path, *, jobid_pattern: str = DEFAULT_JOBID_PATTERN
    ) -> None:
        self.store = store
        self.directory = directory
        self.pattern = compile_jobid_pattern(jobid_pattern)
        self.files = SpoolFiles(directory, f"*{SUFFIX}")  # service/spool.py

    def changed_files(self) -> list[tuple[Path, tuple[int, int]]]:
        """Spool files whose (mtime, size) differ from the last read, sorted by name."""
        return self.files.changed()

    def collect_once(self) -> list[SpoolRead]:
        """Read and parse every changed file, store their rows in one write; one
        :class:`SpoolRead` per file read."""
        parsed = [self._parse(path, stamp) for path, stamp in self.changed_files()]
        tables = [p.table for p in parsed if p.table is not None and p.table.num_rows]
        stored: dict[str, int] = {}
        refused: str | None = None
        started = time.perf_counter()
        if tables:
            try:
                stored = append_job_stats_by_server(self.store, tables).result()
            except Exception as exc:  # the store refused: retry the files next cycle
                log.exception("storing %s failed", ", ".join(str(p.path) for p in parsed))
                refused = str(exc)
        write_seconds = time.perf_counter() - started
        return [self._done(p, stored, refused, write_seconds) for p in parsed]

    def _parse(self, path: Path, stamp: tuple[int, int]) -> _Parsed:
        server = path.name[: -len(SUFFIX)]
        ts = utcnow()
        started = time.perf_counter()
        try:
            text = path.read_text(encoding="utf-8", errors="strict")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            error = f"{path}: cannot read: {reason}"
            return _Parsed(
                path, stamp, server, ts, None, error, False, time.perf_counter() - started
            )
        table: pa.Table | None
        error_text: str | None = None
        try:
            table = parse_job_stats(
                text, source=str(path), server=server, jobid_pattern=self.pattern
            )
        except JobStatsFormatError as exc:
            table, error_text = exc.partial, exc.describe()
        return _Parsed(
            path, stamp, server, ts, table, error_text, True, time.perf_counter() - started
        )

    def _done(
        self, parsed: _Parsed, stored: dict[str, int], refused: str | None, write_seconds: float
    ) -> SpoolRead:
        rows = parsed.table.num_rows if parsed.table is not None else 0
        waited = write_seconds if rows else 0.0

        def read(ok: bool, written: int, error: str | None) -> SpoolRead:
            return SpoolRead(
                ts=parsed.ts,
                path=parsed.path,
                server=parsed.server,
                ok=ok,
                duration_seconds=parsed.seconds + waited,
                rows=rows,
                stored=written,
                error=error,
            )

        if not parsed.read:  # unreadable: retried every cycle
            return read(False, 0, parsed.error)
        if rows and refused is not None:  # the store refused: retried next cycle
            return read(False, 0, f"{parsed.path}: not stored: {refused}")
        # read (well or badly): not again until it changes
        self.files.mark_read(parsed.path, parsed.stamp)
        return read(parsed.error is None, stored.get(parsed.server, 0), parsed.error)


@dataclass(frozen=True, slots=True)
class _Parsed:
    """One changed file, read and parsed, before its rows are stored."""

    path: Path
    stamp: tuple[int, int]
    server: str
    ts: datetime
    table: pa.Table | None
    error: str | None
    """The parser's message (a malformed file: ``table`` holds its complete entries), or why
    the file could not be read."""
    read: bool
    """Whether the file could be read at all."""
    seconds: float
