"""Falco and Tetragon sources: a file tailed incrementally, a pipe, an HTTP POST body.

:class:`LineTail` keeps the byte offset and line number of a growing file, keeps a partial
last line until its newline arrives, and starts over at line 1 when the file is rotated
(a new inode at the path, or a file shorter than the offset: copytruncate). Like
``tail -F``, a truncation that is refilled past the old offset between two polls is not
seen: poll more often than the logger rotates, or rotate by rename.
:class:`FalcoSource` and :class:`TetragonSource` parse what a tail returns and put it in a
:class:`~hpcscope.service.security.buffer.SecurityEventBuffer`; :func:`pump_stream` does the
same for a pipe (``sys.stdin.buffer``, a FIFO) until end of file.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from hpcscope.ingest.security.exec_cache import ExecJobCache
from hpcscope.ingest.security.falco import parse_falco_lines
from hpcscope.ingest.security.lines import ParseResult
from hpcscope.ingest.security.tetragon import parse_tetragon_lines
from hpcscope.service.security.buffer import SecurityEventBuffer

MAX_READ_BYTES = 16 * 2**20  # per poll: a backlog is read over several polls


@dataclass(frozen=True, slots=True)
class TailRead:
    """Complete lines read by one poll, and the number of the first."""

    first_line: int
    lines: list[bytes]
    rotated: bool


class LineTail:
    """Complete new lines of a file since the last read; survives rotation."""

    def __init__(self, path: str | Path, *, from_end: bool = False) -> None:
        self.path = Path(path)
        self.offset = 0
        self.next_line = 1
        self._inode: int | None = None
        self._partial = b""
        self._from_end = from_end

    def read(self) -> TailRead:
        """Read what was appended; a missing file reads as nothing (it may appear later)."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return TailRead(self.next_line, [], False)
        rotated = False
        if self._inode is None:
            self._inode = stat.st_ino
            if self._from_end:
                self.offset = stat.st_size
        elif stat.st_ino != self._inode or stat.st_size < self.offset:
            rotated = True
            self._inode, self.offset, self.next_line, self._partial = stat.st_ino, 0, 1, b""
        if stat.st_size == self.offset:
            return TailRead(self.next_line, [], rotated)
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            data = handle.read(MAX_READ_BYTES)
        self.offset += len(data)
        data = self._partial + data
        *complete, self._partial = data.split(b"\n")
        first = self.next_line
        self.next_line += len(complete)
        return TailRead(first, complete, rotated)


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
