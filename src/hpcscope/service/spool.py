"""Reading spools: the files other programs write for hpcscope, read as they grow or change.

Two shapes, one reader each, shared by every source that reads files:

- **Appended files** (Falco's and Tetragon's logs, the integrity hook's rank files, the
  training events, the Lustre changelogs): :class:`LineTail` returns the complete lines
  appended since the last read with the number of the first, keeps a partial last line until
  its newline arrives, reads a backlog over several polls (``max_bytes`` a poll) and starts
  over at line 1 when the file is rotated (a new inode at the path, or a file shorter than what
  was read: copytruncate). Like ``tail -F``, a truncation refilled past the old offset between
  two polls is not seen: poll more often than the writer rotates, or rotate by rename.
  :class:`Tails` keeps one tail per path of a spool.
- **Snapshot files** (Lustre job_stats, NVML process lists): whole files a writer replaces
  through a temporary file and a rename. :class:`SpoolFiles` lists a directory's files that
  match a pattern (never the writers' dot-named temporaries) and says which changed since they
  were last read (modification time or size).

A missing file or directory reads as nothing (it may appear later); a file that cannot be read
raises ``OSError`` for the caller to report with its path, and is read again next time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["MAX_READ_BYTES", "LineTail", "SpoolFiles", "TailRead", "Tails"]

#: Bytes a tail reads in one poll at most: a backlog is read over several polls.
MAX_READ_BYTES = 16 * 2**20


@dataclass(frozen=True, slots=True)
class TailRead:
    """Complete lines read by one poll (without their newline), and the number of the first."""

    first_line: int
    lines: list[bytes]
    rotated: bool

    def numbered(self) -> list[tuple[int, bytes]]:
        """The lines with their numbers in the file."""
        return list(enumerate(self.lines, start=self.first_line))

    def text(self) -> bytes:
        """The lines as the file holds them (each with its newline)."""
        return b"".join(line + b"\n" for line in self.lines)


class LineTail:
    """Complete new lines of a file since the last read; survives rotation.

    Args:
        path: the file (need not exist yet).
        from_end: start at the end of the file as it is at the first read (a live log whose
            history is not wanted).
        max_bytes: most bytes read in one poll.
    """

    def __init__(
        self, path: str | Path, *, from_end: bool = False, max_bytes: int = MAX_READ_BYTES
    ) -> None:
        self.path = Path(path)
        self.offset = 0
        self.next_line = 1
        self.max_bytes = max_bytes
        self._inode: int | None = None
        self._partial = b""
        self._from_end = from_end

    def read(self) -> TailRead:
        """Read what was appended; a missing file reads as nothing (it may appear later).

        Raises:
            OSError: the file exists but cannot be read (permissions); the next read retries.
        """
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
            data = handle.read(self.max_bytes)
        self.offset += len(data)
        data = self._partial + data
        *complete, self._partial = data.split(b"\n")
        first = self.next_line
        self.next_line += len(complete)
        return TailRead(first, complete, rotated)


class Tails:
    """One :class:`LineTail` per file of a spool, made on the first read of each path."""

    def __init__(self, *, max_bytes: int = MAX_READ_BYTES) -> None:
        self.max_bytes = max_bytes
        self._tails: dict[Path, LineTail] = {}

    def read(self, path: Path) -> TailRead:
        """The complete lines appended to ``path`` since its last read (raises ``OSError``)."""
        tail = self._tails.get(path)
        if tail is None:
            tail = self._tails[path] = LineTail(path, max_bytes=self.max_bytes)
        return tail.read()

    def forget(self, keep: set[Path]) -> None:
        """Drop the tails of paths not in ``keep`` (files that went away)."""
        for path in set(self._tails) - keep:
            del self._tails[path]


#: A file's modification time (ns) and size, as last read.
Stamp = tuple[int, int]


class SpoolFiles:
    """Files of a spool directory matching a glob pattern, and which changed since read.

    Args:
        directory: the spool (need not exist yet: a missing directory lists as empty, with
            one warning until it appears).
        pattern: glob of the files, relative to ``directory`` (``*.job_stats``,
            ``*/compute-apps.csv``); names starting with a dot are the writers' temporaries
            (renamed into place when complete) and never listed.
    """

    def __init__(self, directory: Path, pattern: str) -> None:
        self.directory = directory
        self.pattern = pattern
        self._seen: dict[Path, Stamp] = {}
        self._warned_missing = False

    def files(self) -> list[tuple[Path, Stamp]]:
        """Every matching regular file with its stamp, sorted by path."""
        if not self.directory.is_dir():
            if not self._warned_missing:
                log.warning("spool %s does not exist (yet)", self.directory)
                self._warned_missing = True
            return []
        self._warned_missing = False
        found: list[tuple[Path, Stamp]] = []
        for path in sorted(self.directory.glob(self.pattern)):
            if path.name.startswith("."):
                continue
            try:
                stat = path.stat()
            except OSError:
                continue  # renamed away between listing and stat
            if path.is_file():
                found.append((path, (stat.st_mtime_ns, stat.st_size)))
        return found

    def changed(self) -> list[tuple[Path, Stamp]]:
        """The files whose stamp differs from the one of their last :meth:`mark_read`."""
        present = self.files()
        for gone in set(self._seen) - {path for path, _ in present}:
            del self._seen[gone]
        return [(path, stamp) for path, stamp in present if self._seen.get(path) != stamp]

    def mark_read(self, path: Path, stamp: Stamp) -> None:
        """``path`` was read (well or badly) at ``stamp``: not listed again until it changes."""
        self._seen[path] = stamp
