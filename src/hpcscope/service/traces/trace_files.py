"""Per-rank trace inputs: plain or gzip-compressed files, and the members of tar archives.

:func:`find_traces` expands directories and archives into :class:`TraceInput` items; the rest
reads archives in one sequential pass each (a compressed tar cannot seek: opening it again per
member would decompress it again each time), for :mod:`hpcscope.service.traces.inputs`, which
parses them.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import struct
import tarfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from hpcscope.analysis.traces.kernel_classes import ClassTable
from hpcscope.ingest.compressed import DEFLATE_ERRORS, Gunzip, gunzip_bytes
from hpcscope.model.errors import SourceError

#: Below this much JSON in all, ranks parse in this process (no worker start-up to pay).
IN_PROCESS_JSON_BYTES = 48 << 20
_TRACE_SUFFIXES = (".json", ".json.gz")
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")

#: Read buffer of a sequential pass over an archive (tarfile's default is 10 KiB, which costs
#: one decompression call per 10 KiB).
_TAR_BUFFER = 1 << 20
#: Expansion assumed for a gzip member of a compressed tar (its size is not readable cheaply).
GZIP_RATIO_GUESS = 10
#: What a streamed pass over a broken archive raises.
STREAM_ERRORS = (tarfile.TarError, OSError, EOFError)
#: ... and what reading a small archive in one go raises (the decompressor's own errors too).
_ARCHIVE_ERRORS: tuple[type[Exception], ...] = (
    *STREAM_ERRORS,
    *DEFLATE_ERRORS,
)


@dataclass(frozen=True, slots=True)
class TraceInput:
    """One rank's trace: a file, or a member of a tar archive.

    Attributes:
        path: the file (or the archive).
        member: the archive member, None for a plain file.
        json_bytes: uncompressed JSON size, exact or estimated (decides in-process parsing).
        display: the name to show when ``path`` is a temporary copy.
    """

    path: str
    member: str | None = None
    json_bytes: int = 0
    display: str | None = None
    data: bytes | None = field(default=None, repr=False, compare=False)
    """The member's bytes, kept when its (small) archive was listed: a compressed tar cannot
    seek, so listing it already decompressed everything; reading it again would double that."""
    classes: ClassTable | None = field(default=None, repr=False, compare=False)
    """The kernel class table the worker classifies the events with (None: no classes)."""

    @property
    def name(self) -> str:
        """How the input is named to the user (``archive:member`` for a member, even when it
        was extracted to a temporary file for a worker)."""
        if self.display:
            return self.display
        return f"{self.path}:{self.member}" if self.member else self.path


def find_traces(paths: Iterable[str | Path]) -> list[TraceInput]:
    """Expand directories (recursively) and tar archives into per-rank trace inputs.

    Raises:
        SourceError: a path that does not exist, or no trace found at all.
    """
    found: list[TraceInput] = []
    paths = list(paths)
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise SourceError("no such file or directory", source=str(path))
        candidates = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in candidates:
            name = file.name.lower()
            if name.endswith(_ARCHIVE_SUFFIXES):
                found.extend(_archive_members(file))
            elif name.endswith(_TRACE_SUFFIXES) or not path.is_dir():
                found.append(TraceInput(str(file), json_bytes=_json_bytes(file)))
    if not found:
        raise SourceError(
            "no trace files (.json, .json.gz, or a tar of them)",
            source=", ".join(str(p) for p in paths),
        )
    return found


def _json_bytes(file: Path) -> int:
    """Uncompressed size: the file size, or gzip's ISIZE trailer (size mod 2**32)."""
    try:
        size = file.stat().st_size
        with file.open("rb") as handle:
            if handle.read(2) != b"\x1f\x8b" or size < 18:
                return size
            handle.seek(-4, os.SEEK_END)
            return max(size, int(struct.unpack("<I", handle.read(4))[0]))
    except OSError:
        return 0


def _is_trace_member(member: tarfile.TarInfo) -> bool:
    name = member.name
    return (
        member.isfile()
        and name.lower().endswith(_TRACE_SUFFIXES)
        and not Path(name).name.startswith("._")
    )


def _json_size_guess(member: tarfile.TarInfo) -> int:
    return member.size * (GZIP_RATIO_GUESS if member.name.lower().endswith(".gz") else 1)


def _archive_members(file: Path) -> list[TraceInput]:
    """The trace members of a tar archive. A small archive is decompressed once, in memory,
    and its members are kept (a compressed tar cannot seek: reading it again per member would
    decompress it again); a large one is listed in one streaming pass."""
    try:
        if file.stat().st_size * GZIP_RATIO_GUESS < IN_PROCESS_JSON_BYTES:
            kept = _small_archive(file)
            if kept is not None:
                return kept
        found: list[TraceInput] = []
        with _open_stream(file) as archive:
            found.extend(
                TraceInput(str(file), m.name, _json_size_guess(m))
                for m in archive
                if _is_trace_member(m)
            )
    except _ARCHIVE_ERRORS as exc:
        raise SourceError(f"cannot read archive: {exc}", source=str(file)) from None
    return sorted(found, key=lambda item: item.member or "")


@contextlib.contextmanager
def _open_stream(file: Path) -> Iterator[tarfile.TarFile]:
    """A sequential pass over an archive; a gzip-compressed one decompressed within the
    bounds of ``ingest/compressed.py`` (tarfile's own gzip reader has none)."""
    with file.open("rb") as handle:
        gzipped = handle.read(2) == b"\x1f\x8b"
        handle.seek(0)
        stream: IO[bytes] = (
            Gunzip(handle, source=str(file)) if gzipped else handle  # type: ignore[assignment]
        )
        with tarfile.open(
            fileobj=stream, mode="r|" if gzipped else "r|*", bufsize=_TAR_BUFFER
        ) as tar:
            yield tar


def _small_archive(file: Path) -> list[TraceInput] | None:
    """Members of a plain or gzip-compressed tar, read in one go (one C-speed decompression
    instead of tarfile's buffered stream: half the time on an 8-rank archive). None for other
    compressions, which take the streaming path."""
    raw = file.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        data = gunzip_bytes(raw, source=str(file))
    elif raw[257:262] == b"ustar":
        data = raw
    else:
        return None
    found: list[TraceInput] = []
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive.getmembers():
            handle = archive.extractfile(member) if _is_trace_member(member) else None
            if handle is not None:
                found.append(
                    TraceInput(str(file), member.name, _json_size_guess(member), data=handle.read())
                )
    return sorted(found, key=lambda item: item.member or "")


def members_by_archive(items: Sequence[TraceInput]) -> dict[str, dict[str, int]]:
    """Archive -> {member name: index in ``items``} of the members still to be read (those
    whose bytes are not already kept)."""
    by_archive: dict[str, dict[str, int]] = {}
    for i, item in enumerate(items):
        if item.member is not None and item.data is None:
            by_archive.setdefault(item.path, {})[item.member] = i
    return by_archive


def stream_members(
    archive_path: str, wanted: dict[str, int]
) -> Iterator[tuple[int, IO[bytes] | None]]:
    """One streaming pass over an archive: ``(index, handle)`` of each wanted member in archive
    order (None for a member that is not a regular file). Raises what tarfile raises for a
    broken archive (:data:`STREAM_ERRORS`)."""
    with _open_stream(Path(archive_path)) as archive:
        for member in archive:
            index = wanted.get(member.name)
            if index is not None:
                yield index, archive.extractfile(member)


#: A rank that could not be read or parsed: message, source, line, column, and the bound it
#: exceeded or None (a plain tuple pickles whatever the exception class).
ErrorTuple = tuple[str, str, int | None, int | None, str | None]


def read_members(items: Sequence[TraceInput]) -> dict[int, bytes | ErrorTuple]:
    """The bytes of every archive member among ``items`` (one pass per archive)."""
    out: dict[int, bytes | ErrorTuple] = {
        i: item.data for i, item in enumerate(items) if item.data is not None
    }
    for archive_path, wanted in members_by_archive(items).items():
        try:
            for index, handle in stream_members(archive_path, wanted):
                if handle is not None:
                    out[index] = handle.read()
        except STREAM_ERRORS as exc:
            for index in wanted.values():
                out.setdefault(
                    index, (f"cannot read archive: {exc}", archive_path, None, None, None)
                )
    return out


def extract_members(items: Sequence[TraceInput], directory: Path) -> list[TraceInput]:
    """Copy archive members to ``directory`` (one streaming pass per archive), so parallel
    workers read plain files; plain files are passed through. Errors are left for the
    workers to report (a member that cannot be extracted keeps pointing into its archive)."""
    out = list(items)
    for i, item in enumerate(items):
        if item.data is not None:
            target = directory / f"kept-{i}-{Path(item.member or item.path).name}"
            target.write_bytes(item.data)
            out[i] = _moved(item, target)
    for n, (archive_path, wanted) in enumerate(members_by_archive(items).items()):
        try:
            for index, handle in stream_members(archive_path, wanted):
                if handle is None:
                    continue
                item = items[index]
                target = directory / f"{n}-{index}-{Path(item.member or item.path).name}"
                with handle, target.open("wb") as sink:
                    shutil.copyfileobj(handle, sink, 1 << 20)
                out[index] = _moved(item, target)
        except STREAM_ERRORS:
            continue
    return out


def _moved(item: TraceInput, target: Path) -> TraceInput:
    """``item`` read from its extracted copy ``target`` instead."""
    return replace(item, path=str(target), member=None, display=item.name, data=None)
