"""Finding per-rank trace files and parsing them, in this process or in parallel processes.

Workers run :func:`parse_one` only: the streaming parser and the per-rank reduction, both pure
of any store; what comes back is a small
:class:`~hpcscope.analysis.traces.rank_timeline.RankTimeline`, never the events.

When to parse in parallel: starting a worker process costs ~50-100 ms (fork, or an interpreter
and imports with ``spawn``), about what parsing 10-20 MB of JSON costs. So inputs whose JSON
adds up to less than :data:`IN_PROCESS_JSON_BYTES` parse here, one rank after the other, and
larger inputs use one worker per core (at most one per rank). A long-running server passes an
executor it created once (with ``forkserver``/``spawn``: never fork a process that holds the
DuckDB file), so no request pays the start-up.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import struct
import tarfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING

from hpcscope.analysis.traces.kernel_classes import ClassTable
from hpcscope.analysis.traces.rank_timeline import RankTimeline, rank_timeline
from hpcscope.ingest.compressed import DEFLATE_ERRORS, Gunzip, gunzip_bytes
from hpcscope.ingest.traces.kineto import TraceError, read_kineto
from hpcscope.model.bounds import BoundExceeded
from hpcscope.model.errors import SourceError

if TYPE_CHECKING:  # the pool's modules load when a pool is used (~15 ms of a small run)
    from concurrent.futures import Executor

_TRACE_SUFFIXES = (".json", ".json.gz")
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")

#: Below this much JSON in all, ranks parse in this process (no worker start-up to pay).
IN_PROCESS_JSON_BYTES = 48 << 20
#: From this much JSON (and below :data:`IN_PROCESS_JSON_BYTES`), a command-line run forks one
#: helper that parses every other rank (a bare ``fork`` costs ~5 ms, a process pool ~50 ms).
FORK_HELPER_JSON_BYTES = 2 << 20
#: Read buffer of a sequential pass over an archive (tarfile's default is 10 KiB, which costs
#: one decompression call per 10 KiB).
_TAR_BUFFER = 1 << 20
#: Expansion assumed for a gzip member of a compressed tar (its size is not readable cheaply).
GZIP_RATIO_GUESS = 10
#: What a streamed pass over a broken archive raises.
_STREAM_ERRORS = (tarfile.TarError, OSError, EOFError)
#: ... and what reading a small archive in one go raises (the decompressor's own errors too).
_ARCHIVE_ERRORS: tuple[type[Exception], ...] = (
    *_STREAM_ERRORS,
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


_ErrorTuple = tuple[str, str, int | None, int | None, str | None]


def parse_one(item: TraceInput) -> RankTimeline | _ErrorTuple:
    """Worker: parse one rank and reduce it. Errors come back as plain tuples (message,
    source, line, column, and the bound an input exceeded or None), which pickle whatever the
    exception class."""
    try:
        return _parse_or_raise(item)
    except SourceError as exc:
        return (exc.message, exc.source, exc.line, exc.column, getattr(exc, "bound", None))


def _parse_or_raise(item: TraceInput) -> RankTimeline:
    try:
        if item.data is not None:
            trace = read_kineto(
                item.member or item.path, source=item.name, stream=io.BytesIO(item.data)
            )
        elif item.member is None:
            trace = read_kineto(item.path, source=item.name)
        else:
            with tarfile.open(item.path) as archive:
                handle = archive.extractfile(item.member)
                if handle is None:
                    raise TraceError("not a regular file in the archive", source=item.name)
                trace = read_kineto(item.member, source=item.name, stream=handle)
        return rank_timeline(trace, item.classes)
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise TraceError(f"cannot read: {exc}", source=item.name) from None


def plan_workers(items: Sequence[TraceInput], workers: int | None) -> int:
    """How many processes to parse ``items`` with (1 = in this process)."""
    if workers is not None:
        return max(1, min(workers, len(items)))
    if len(items) < 2 or sum(i.json_bytes for i in items) < IN_PROCESS_JSON_BYTES:
        return 1
    return max(1, min(os.cpu_count() or 1, len(items)))


def parse_ranks(
    items: Sequence[TraceInput],
    *,
    workers: int | None = None,
    executor: Executor | None = None,
    start_method: str = "fork",
    progress: Callable[[int, int], None] | None = None,
    classes: ClassTable | None = None,
) -> list[RankTimeline]:
    """Parse every rank: in this process for small inputs, else in parallel processes.

    Args:
        items: the per-rank inputs (:func:`find_traces`).
        workers: processes to use (default: :func:`plan_workers` decides).
        executor: an existing pool to use instead of starting one (a server's).
        start_method: for a pool started here.
        progress: called with (done, total) after each rank.
        classes: the kernel class table each rank's events are classified with.

    Raises:
        SourceError: the first file that cannot be read (naming it and the position), or two
            traces that claim the same rank.
    """
    if classes is not None:
        items = [replace(item, classes=classes) for item in items]
    count = plan_workers(items, workers) if executor is None else len(items)
    results: list[RankTimeline | _ErrorTuple] = []
    if executor is None and count == 1:
        total = sum(i.json_bytes for i in items)
        helper = (
            workers is None
            and start_method == "fork"
            and len(items) >= 2
            and total >= FORK_HELPER_JSON_BYTES
            and (os.cpu_count() or 1) >= 2
            and hasattr(os, "fork")
        )
        results = _with_fork_helper(items, progress) if helper else _in_process(items, progress)
    else:
        import multiprocessing
        import tempfile
        from concurrent.futures import ProcessPoolExecutor

        with tempfile.TemporaryDirectory(prefix="hpcscope-members-") as tmp:
            files = _extract_members(items, Path(tmp))
            if executor is not None:
                results = _collect(executor, files, progress)
            else:
                context = multiprocessing.get_context(start_method)
                with ProcessPoolExecutor(max_workers=count, mp_context=context) as pool:
                    results = _collect(pool, files, progress)
    timelines: list[RankTimeline] = []
    seen: dict[int, str] = {}
    for result in results:
        if isinstance(result, tuple):
            message, source, line, column, bound = result
            if bound is not None:
                raise BoundExceeded(message, bound=bound, source=source, line=line, column=column)
            raise TraceError(message, source=source, line=line, column=column)
        if result.rank in seen:
            raise SourceError(
                f"two traces for rank {result.rank}: {seen[result.rank]} and this one",
                source=result.source,
            )
        seen[result.rank] = result.source
        timelines.append(result)
    return timelines


def _in_process(
    items: Sequence[TraceInput], progress: Callable[[int, int], None] | None
) -> list[RankTimeline | _ErrorTuple]:
    """Parse in this process; each archive is read once, member after member (a compressed
    tar cannot seek: opening it again per member would decompress it again each time)."""
    results: dict[int, RankTimeline | _ErrorTuple] = {}
    for i, item in enumerate(items):
        if item.member is None or item.data is not None:
            results[i] = parse_one(item)
            if progress:
                progress(len(results), len(items))
    for archive_path, wanted in _members_by_archive(items).items():
        try:
            for index, handle in _stream_members(archive_path, wanted):
                item = items[index]
                results[index] = (
                    _parse_stream(item, handle)
                    if handle is not None
                    else ("not a regular file in the archive", item.name, None, None, None)
                )
                if progress:
                    progress(len(results), len(items))
        except _STREAM_ERRORS as exc:
            message = f"cannot read archive: {exc}"
            for index in wanted.values():
                results.setdefault(index, (message, archive_path, None, None, None))
    return [results[i] for i in range(len(items))]


def _members_by_archive(items: Sequence[TraceInput]) -> dict[str, dict[str, int]]:
    """Archive -> {member name: index in ``items``} of the members still to be read (those
    whose bytes are not already kept)."""
    by_archive: dict[str, dict[str, int]] = {}
    for i, item in enumerate(items):
        if item.member is not None and item.data is None:
            by_archive.setdefault(item.path, {})[item.member] = i
    return by_archive


def _stream_members(
    archive_path: str, wanted: dict[str, int]
) -> Iterator[tuple[int, IO[bytes] | None]]:
    """One streaming pass over an archive: ``(index, handle)`` of each wanted member in archive
    order (None for a member that is not a regular file). Raises what tarfile raises for a
    broken archive (:data:`_STREAM_ERRORS`)."""
    with _open_stream(Path(archive_path)) as archive:
        for member in archive:
            index = wanted.get(member.name)
            if index is not None:
                yield index, archive.extractfile(member)


def _with_fork_helper(
    items: Sequence[TraceInput], progress: Callable[[int, int], None] | None
) -> list[RankTimeline | _ErrorTuple]:
    """Parse every other rank in a forked child while this process parses the rest.

    Only for the command line (the caller checked the start method: a server that holds the
    DuckDB file never forks). Archive members are read first, in one pass (under
    :data:`IN_PROCESS_JSON_BYTES` in all), so the child inherits them instead of decompressing
    the archive again. The child sends its results back through a pipe; if it fails, its ranks
    are parsed here."""
    members = _read_members(items)

    def parse(indices: list[int]) -> list[RankTimeline | _ErrorTuple]:
        out: list[RankTimeline | _ErrorTuple] = []
        for i in indices:
            item = items[i]
            loaded = members.get(i)
            if item.member is None:
                out.append(parse_one(item))
            elif isinstance(loaded, bytes):
                out.append(_parse_stream(item, io.BytesIO(loaded)))
            else:
                out.append(
                    loaded or ("cannot read the archive member", item.name, None, None, None)
                )
        return out

    mine, theirs = list(range(0, len(items), 2)), list(range(1, len(items), 2))
    # a plain pipe (multiprocessing's Pipe would import its connection module and what it
    # pulls in, ~5 ms of a small run's start-up) carrying the ranks' versioned summaries
    # (msgpack, typed on decode: no unpickling in src/, tests/ingest/nccl), which give the
    # reduction back exactly (:func:`~hpcscope.analysis.traces.rank_summary.to_timeline`)
    receiver, sender = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; its results are checked in the parent
        code = 1
        try:
            os.close(receiver)
            with open(sender, "wb") as out:
                out.write(_encode_results(parse(theirs)))
            code = 0
        finally:
            os._exit(code)
    os.close(sender)
    results: dict[int, RankTimeline | _ErrorTuple] = dict(zip(mine, parse(mine), strict=True))
    with open(receiver, "rb") as incoming:
        try:
            data = incoming.read()
        except OSError:
            data = b""
    _, status = os.waitpid(pid, 0)
    # only a child that exited 0 wrote all its results
    received = _decode_results(data) if status == 0 and data else None
    if received is None or len(received) != len(theirs):
        received = parse(theirs)
    results.update(zip(theirs, received, strict=True))
    if progress:
        progress(len(items), len(items))
    return [results[i] for i in range(len(items))]


def _encode_results(results: Sequence[RankTimeline | _ErrorTuple]) -> bytes:
    """The child's results for the pipe: a summary per parsed rank, the tuple per error."""
    import msgspec

    from hpcscope.analysis.traces.rank_summary import encode_summary, summarize

    return msgspec.msgpack.encode(
        [
            ("rank", encode_summary(summarize(r)))
            if isinstance(r, RankTimeline)
            else ("error", list(r))
            for r in results
        ]
    )


def _decode_results(data: bytes) -> list[RankTimeline | _ErrorTuple] | None:
    """What :func:`_encode_results` wrote; None when it cannot be read (parse here instead)."""
    import msgspec

    from hpcscope.analysis.traces.rank_summary import decode_summary, to_timeline

    try:
        rows = msgspec.msgpack.decode(data, type=list[tuple[str, bytes | list[str | int | None]]])
        out: list[RankTimeline | _ErrorTuple] = []
        for kind, payload in rows:
            if kind == "rank" and isinstance(payload, bytes):
                out.append(to_timeline(decode_summary(payload, source="fork helper")))
            elif kind == "error" and isinstance(payload, list) and len(payload) == 5:
                message, source, line, column, bound = payload
                out.append(
                    (
                        str(message),
                        str(source),
                        _opt_int(line),
                        _opt_int(column),
                        None if bound is None else str(bound),
                    )
                )
            else:
                return None
        return out
    except (msgspec.DecodeError, msgspec.ValidationError, SourceError):
        return None


def _opt_int(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _read_members(items: Sequence[TraceInput]) -> dict[int, bytes | _ErrorTuple]:
    """The bytes of every archive member among ``items`` (one pass per archive)."""
    out: dict[int, bytes | _ErrorTuple] = {
        i: item.data for i, item in enumerate(items) if item.data is not None
    }
    for archive_path, wanted in _members_by_archive(items).items():
        try:
            for index, handle in _stream_members(archive_path, wanted):
                if handle is not None:
                    out[index] = handle.read()
        except _STREAM_ERRORS as exc:
            for index in wanted.values():
                out.setdefault(
                    index, (f"cannot read archive: {exc}", archive_path, None, None, None)
                )
    return out


def _parse_stream(item: TraceInput, handle: IO[bytes]) -> RankTimeline | _ErrorTuple:
    try:
        trace = read_kineto(item.member or item.path, source=item.name, stream=handle)
        return rank_timeline(trace, item.classes)
    except SourceError as exc:
        return (exc.message, exc.source, exc.line, exc.column, getattr(exc, "bound", None))
    except (OSError, tarfile.TarError, EOFError) as exc:
        return (f"cannot read: {exc}", item.name, None, None, None)


def _extract_members(items: Sequence[TraceInput], directory: Path) -> list[TraceInput]:
    """Copy archive members to ``directory`` (one streaming pass per archive), so parallel
    workers read plain files; plain files are passed through. Errors are left for the
    workers to report (a member that cannot be extracted keeps pointing into its archive)."""
    out = list(items)
    for i, item in enumerate(items):
        if item.data is not None:
            target = directory / f"kept-{i}-{Path(item.member or item.path).name}"
            target.write_bytes(item.data)
            out[i] = _moved(item, target)
    for n, (archive_path, wanted) in enumerate(_members_by_archive(items).items()):
        try:
            for index, handle in _stream_members(archive_path, wanted):
                if handle is None:
                    continue
                item = items[index]
                target = directory / f"{n}-{index}-{Path(item.member or item.path).name}"
                with handle, target.open("wb") as sink:
                    shutil.copyfileobj(handle, sink, 1 << 20)
                out[index] = _moved(item, target)
        except _STREAM_ERRORS:
            continue
    return out


def _moved(item: TraceInput, target: Path) -> TraceInput:
    """``item`` read from its extracted copy ``target`` instead."""
    return replace(item, path=str(target), member=None, display=item.name, data=None)


def _collect(
    pool: Executor,
    items: Sequence[TraceInput],
    progress: Callable[[int, int], None] | None,
) -> list[RankTimeline | _ErrorTuple]:
    results: list[RankTimeline | _ErrorTuple] = []
    # largest first, so the longest rank does not start last
    order = sorted(range(len(items)), key=lambda i: -items[i].json_bytes)
    futures = {i: pool.submit(parse_one, items[i]) for i in order}
    for done, i in enumerate(range(len(items)), start=1):
        results.append(futures[i].result())
        if progress:
            progress(done, len(items))
    return results
