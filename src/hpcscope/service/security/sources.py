"""Falco and Tetragon sources: a file tailed incrementally, a pipe, an HTTP POST body.

The file is tailed by :class:`~hpcscope.service.spool.LineTail`, the reader every spool
shares (complete lines, a partial last line kept, rotation followed: ``service/spool.py``).
:class:`FalcoSource` and :class:`TetragonSource` parse what a tail returns and put it in a
:class:`~hpcscope.service.security.buffer.SecurityEventBuffer`; :func:`pump_stream` does the
same for a pipe (``sys.stdin.buffer``, a FIFO) until end of file.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import IO

from hpcscope.ingest.security.exec_cache import ExecJobCache
from hpcscope.ingest.security.falco import parse_falco_lines
from hpcscope.ingest.security.lines import ParseResult
from hpcscope.ingest.security.tetragon import parse_tetragon_lines
from hpcscope.service.security.buffer import SecurityEventBuffer
from hpcscope.service.spool import MAX_READ_BYTES, LineTail, TailRead

__all__ = ["MAX_READ_BYTES", "FalcoSource", "LineTail", "TailRead", "TetragonSource", "pump_stream"]


class _TailSource(ABC):
    """A tailed file whose new lines are parsed into the buffer on each :meth:`poll`."""

    kind = ""

    def __init__(self, path: str | Path, buffer: SecurityEventBuffer, *, from_end: bool) -> None:
        self.tail = LineTail(path, from_end=from_end)
        self.buffer = buffer
        self._lock = threading.Lock()  # the collector's cycle and the engine's loop both poll
        self._rows = self._rejected = 0
        buffer.tails.append(self)

    @abstractmethod
    def _parse(self, read: TailRead) -> ParseResult:
        """Parse the lines of one read."""

    def poll(self) -> ParseResult:
        """Parse the lines appended since the last poll and queue them in the buffer."""
        with self._lock:
            read = self.tail.read()
            result = self._parse(read)
            self.buffer.put(self.kind, result)
            self._rows += result.table.num_rows
            self._rejected += len(result.errors)
        return result

    def scrape_row(
        self, now: datetime, *, started: float, rows: int, rejected: int
    ) -> dict[str, object]:
        """This tail's ``scrapes`` row for a poll begun at ``started`` (``time.perf_counter``):
        exporter ``falco`` or ``tetragon``, target the file, rows parsed, lines rejected, not ok
        while the file does not exist; the diagram's collectors show it like an exporter's."""
        exists = self.tail.path.exists()
        return {
            "ts": now,
            "target": str(self.tail.path),
            "exporter": self.kind,
            "node": None,
            "ok": exists,
            "duration_seconds": time.perf_counter() - started,
            "samples": rows,
            "rejected_lines": rejected,
            "error": None if exists else "file does not exist (yet)",
        }

    def take_counts(self) -> tuple[int, int]:
        """Rows parsed and lines rejected by every poll since the last call (for the tail's
        health row: the engine's loop polls too)."""
        with self._lock:
            counts = (self._rows, self._rejected)
            self._rows = self._rejected = 0
        return counts


class FalcoSource(_TailSource):
    """Falco's ``file_output`` (JSON lines), tailed."""

    kind = "falco"

    def __init__(
        self, path: str | Path, buffer: SecurityEventBuffer, *, from_end: bool = False
    ) -> None:
        super().__init__(path, buffer, from_end=from_end)

    def _parse(self, read: TailRead) -> ParseResult:
        return parse_falco_lines(read.lines, source=str(self.tail.path), first_line=read.first_line)


class TetragonSource(_TailSource):
    """Tetragon's JSON export (``/var/log/tetragon/tetragon.log``), tailed, jobs resolved."""

    kind = "tetragon"

    def __init__(
        self,
        path: str | Path,
        buffer: SecurityEventBuffer,
        *,
        proc_root: str | Path = "/proc",
        from_end: bool = False,
        jobs: ExecJobCache | None = None,
    ) -> None:
        super().__init__(path, buffer, from_end=from_end)
        self.jobs = jobs if jobs is not None else ExecJobCache(proc_root=proc_root)

    def _parse(self, read: TailRead) -> ParseResult:
        return parse_tetragon_lines(
            read.lines, source=str(self.tail.path), jobs=self.jobs, first_line=read.first_line
        )


def pump_stream(
    stream: IO[bytes],
    kind: str,
    buffer: SecurityEventBuffer,
    *,
    source: str = "<stdin>",
    batch_lines: int = 256,
    jobs: ExecJobCache | None = None,
) -> int:
    """Read a pipe to its end in batches of lines; return the number of lines read."""
    parse: Callable[[list[bytes], int], ParseResult]
    if kind == "falco":

        def parse(lines: list[bytes], first: int) -> ParseResult:
            return parse_falco_lines(lines, source=source, first_line=first)
    elif kind == "tetragon":
        cache = jobs if jobs is not None else ExecJobCache()

        def parse(lines: list[bytes], first: int) -> ParseResult:
            return parse_tetragon_lines(lines, source=source, jobs=cache, first_line=first)
    else:
        raise ValueError(f"unknown kind {kind!r}")
    batch: list[bytes] = []
    first, count = 1, 0
    for line in iter(stream.readline, b""):
        batch.append(line)
        count += 1
        if len(batch) >= batch_lines:
            buffer.put(kind, parse(batch, first))
            first, batch = first + len(batch), []
    if batch:
        buffer.put(kind, parse(batch, first))
    return count
