"""Parsing per-rank traces, in this process or in parallel processes.

The inputs come from :func:`~hpcscope.service.traces.trace_files.find_traces` (importable from
here too). Workers run :func:`parse_one` only: the streaming parser and the per-rank reduction,
both pure of any store; what comes back is a small
:class:`~hpcscope.analysis.traces.rank_timeline.RankTimeline`, never the events.

When to parse in parallel: starting a worker process costs ~50-100 ms (fork, or an interpreter
and imports with ``spawn``), about what parsing 10-20 MB of JSON costs. So inputs whose JSON
adds up to less than :data:`IN_PROCESS_JSON_BYTES` parse here, one rank after the other, and
larger inputs use one worker per core (at most one per rank). A long-running server passes an
executor it created once (with ``forkserver``/``spawn``: never fork a process that holds the
DuckDB file), so no request pays the start-up.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, TYPE_CHECKING

from hpcscope.analysis.traces.kernel_classes import ClassTable
from hpcscope.analysis.traces.rank_timeline import RankTimeline, rank_timeline
from hpcscope.ingest.traces.kineto import TraceError, read_kineto
from hpcscope.model.bounds import BoundExceeded
from hpcscope.model.errors import SourceError
from hpcscope.service.traces.trace_files import (
    IN_PROCESS_JSON_BYTES,
    STREAM_ERRORS,
    ErrorTuple,
    TraceInput,
    extract_members,
    find_traces,
    members_by_archive,
    read_members,
    stream_members,
)

if TYPE_CHECKING:  # the pool's modules load when a pool is used (~15 ms of a small run)
    from concurrent.futures import Executor

__all__ = [
    "FORK_HELPER_JSON_BYTES",
    "IN_PROCESS_JSON_BYTES",
    "TraceInput",
    "find_traces",
    "parse_one",
    "parse_ranks",
    "plan_workers",
]

#: From this much JSON (and below :data:`IN_PROCESS_JSON_BYTES`), a command-line run forks one
#: helper that parses every other rank (a bare ``fork`` costs ~5 ms, a process pool ~50 ms).
FORK_HELPER_JSON_BYTES = 2 << 20


def parse_one(item: TraceInput) -> RankTimeline | ErrorTuple:
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
    results: list[RankTimeline | ErrorTuple] = []
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
            files = extract_members(items, Path(tmp))
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
) -> list[RankTimeline | ErrorTuple]:
    """Parse in this process; each archive is read once, member after member (a compressed
    tar cannot seek: opening it again per member would decompress it again each time)."""
    results: dict[int, RankTimeline | ErrorTuple] = {}
    for i, item in enumerate(items):
        if item.member is None or item.data is not None:
            results[i] = parse_one(item)
            if progress:
                progress(len(results), len(items))
    for archive_path, wanted in members_by_archive(items).items():
        try:
            for index, handle in stream_members(archive_path, wanted):
                item = items[index]
                results[index] = (
                    _parse_stream(item, handle)
                    if handle is not None
                    else ("not a regular file in the archive", item.name, None, None, None)
                )
                if progress:
                    progress(len(results), len(items))
        except STREAM_ERRORS as exc:
            message = f"cannot read archive: {exc}"
            for index in wanted.values():
                results.setdefault(index, (message, archive_path, None, None, None))
    return [results[i] for i in range(len(items))]


def _with_fork_helper(
    items: Sequence[TraceInput], progress: Callable[[int, int], None] | None
) -> list[RankTimeline | ErrorTuple]:
    """Parse every other rank in a forked child while this process parses the rest.

    Only for the command line (the caller checked the start method: a server that holds the
    DuckDB file never forks). Archive members are read first, in one pass (under
    :data:`IN_PROCESS_JSON_BYTES` in all), so the child inherits them instead of decompressing
    the archive again. The child sends its results back through a pipe; if it fails, its ranks
    are parsed here."""
    members = read_members(items)

    def parse(indices: list[int]) -> list[RankTimeline | ErrorTuple]:
        out: list[RankTimeline | ErrorTuple] = []
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
    results: dict[int, RankTimeline | ErrorTuple] = dict(zip(mine, parse(mine), strict=True))
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


def _encode_results(results: Sequence[RankTimeline | ErrorTuple]) -> bytes:
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


def _decode_results(data: bytes) -> list[RankTimeline | ErrorTuple] | None:
    """What :func:`_encode_results` wrote; None when it cannot be read (parse here instead)."""
    import msgspec

    from hpcscope.analysis.traces.rank_summary import decode_summary, to_timeline

    try:
        rows = msgspec.msgpack.decode(data, type=list[tuple[str, bytes | list[str | int | None]]])
        out: list[RankTimeline | ErrorTuple] = []
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


def _parse_stream(item: TraceInput, handle: IO[bytes]) -> RankTimeline | ErrorTuple:
    try:
        trace = read_kineto(item.member or item.path, source=item.name, stream=handle)
        return rank_timeline(trace, item.classes)
    except SourceError as exc:
        return (exc.message, exc.source, exc.line, exc.column, getattr(exc, "bound", None))
    except (OSError, tarfile.TarError, EOFError) as exc:
        return (f"cannot read: {exc}", item.name, None, None, None)


def _collect(
    pool: Executor,
    items: Sequence[TraceInput],
    progress: Callable[[int, int], None] | None,
) -> list[RankTimeline | ErrorTuple]:
    results: list[RankTimeline | ErrorTuple] = []
    # largest first, so the longest rank does not start last
    order = sorted(range(len(items)), key=lambda i: -items[i].json_bytes)
    futures = {i: pool.submit(parse_one, items[i]) for i in order}
    for done, i in enumerate(range(len(items)), start=1):
        results.append(futures[i].result())
        if progress:
            progress(done, len(items))
    return results
