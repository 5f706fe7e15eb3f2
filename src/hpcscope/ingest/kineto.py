"""PyTorch profiler (Kineto) Chrome-trace JSON -> :class:`~hpcscope.model.trace_events.RankTrace`.

Streaming, in bounded memory: the ``traceEvents`` array is read in blocks of about 1 MiB of
JSON (plain or gzip, detected by its magic bytes, whatever the file name says); each block is
cut at an event boundary and decoded with one call to msgspec's typed decoder, which builds only
the fields we declare (unknown keys are skipped inside the C decoder, never materialised as
Python objects). Each block's columns become numpy arrays at once (``map`` over attribute
getters, no per-event Python loop) and are concatenated at the end. Everything outside the
array (``distributedInfo``, ``deviceProperties``...) is kept as bytes and parsed once at the
end, so key order does not matter.

Why this and not a library streaming parser: measured on HolisticTraceAnalysis'
``df_index_resolver`` trace (53.7 MB, 216k events, 2-core machine), ijson 3.6 with its yajl2_c
backend takes 0.84 s just to yield the events as dicts, orjson on 1 MiB blocks 0.40 s, and
msgspec's typed decoder on the same blocks 0.26 s with far fewer live objects; none of them
splits an array into blocks, which is the only part written by hand here (the boundary search
below), because a whole-document ``loads`` holds every event at once (HTA: ~6x the JSON size).

Cutting a block: a candidate boundary is ``}`` + whitespace + ``,`` + whitespace + ``{``. JSON
strings cannot hold raw newlines but can hold that sequence, so a candidate found inside a
string makes the block fail to decode; the reader then tries the previous candidate. A valid
file is therefore always cut correctly.

Bad input: invalid JSON raises :class:`TraceError` with file, line and column; a file cut short
(truncated gzip or JSON) keeps every event read before the cut and reports the position in
:attr:`RankTrace.problems` (the analysis flags the result partial).
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Callable
from itertools import compress
from operator import attrgetter
from pathlib import Path
from typing import IO, Any, cast

import msgspec
import numpy as np
import numpy.typing as npt
import orjson

from hpcscope.ingest.compressed import open_maybe_gzip
from hpcscope.model.errors import SourceError
from hpcscope.model.trace_events import EventKind, EventTable, RankTrace

BLOCK_BYTES = 1 << 20

_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_ARRAY_END = re.compile(rb"\}\s*\]")
_EMPTY_END = re.compile(rb"\s*\]")
_DECODE_AT = re.compile(r"byte (\d+)")
_RANK_IN_NAME = (
    re.compile(r"rank[-_ ]?(\d+)", re.IGNORECASE),
    re.compile(r"worker[-_ ]?(\d+)", re.IGNORECASE),
)

_CATEGORIES: dict[str, EventKind] = {
    "cpu_op": EventKind.CPU_OP,
    "operator": EventKind.CPU_OP,
    "user_annotation": EventKind.ANNOTATION,
    "kernel": EventKind.KERNEL,
    "gpu_memcpy": EventKind.MEMCPY,
    "gpu_memset": EventKind.MEMSET,
    "cuda_runtime": EventKind.RUNTIME,
    "cuda_driver": EventKind.RUNTIME,
    "gpu_user_annotation": EventKind.GPU_ANNOTATION,
    "python_function": EventKind.PYTHON_GC,  # only the "Python GC" ones are kept
}
_GC_NAME = "Python GC"


class TraceError(SourceError):
    """A profiler trace that cannot be read, with file and position."""


class _Args(msgspec.Struct, frozen=True, gc=False):
    external_id: int | str | None = msgspec.field(default=-1, name="External id")
    correlation: int | None = -1
    stream: int | str | None = -1
    device: int | str | None = -1
    group: str | None = msgspec.field(default=None, name="Process Group Name")


_NO_ARGS = _Args()


class _Event(msgspec.Struct, gc=False):
    cat: str = ""
    name: str = ""
    tid: int | str = 0
    ts: float = 0.0
    dur: float = -1.0
    args: _Args | None = _NO_ARGS


_DECODER = msgspec.json.Decoder(list[_Event])


def rank_from_name(name: str) -> int | None:
    """The rank written in a trace file name (``rank-3``, ``worker3_step_12...``), if any."""
    for pattern in _RANK_IN_NAME:
        match = pattern.search(Path(name).name)
        if match:
            return int(match.group(1))
    return None


class _Codes(dict[Any, int]):
    """A dict that gives every new key the next code (string interning, C-speed lookups
    through ``map(codes.__getitem__, keys)``)."""

    def __missing__(self, key: Any) -> int:
        code = self[key] = len(self)
        return code


class _KindCodes(dict[Any, int]):
    """Known keys to their code, anything else to -1 (remembered, so the next lookup of the
    same unknown category stays in C)."""

    def __missing__(self, key: Any) -> int:
        self[key] = -1
        return -1


class _GroupCodes(dict[Any, int]):
    """Process-group names to 0, 1, ...; no group (None) to -1."""

    def __init__(self) -> None:
        super().__init__({None: -1})

    def __missing__(self, key: Any) -> int:
        code = self[key] = len(self) - 1
        return code

    def names(self) -> tuple[str, ...]:
        return tuple(k for k in self if k is not None)


class _ThreadCodes(dict[Any, int]):
    """Thread ids: integers (and strings of digits) as themselves; Kineto writes some threads
    as names ("PyTorch Profiler"), which get negative codes so they never collide with a real
    id."""

    def __missing__(self, key: Any) -> int:
        if type(key) is int:
            code = key
        elif isinstance(key, str) and key.isdigit():
            code = int(key)
        else:
            code = -2 - sum(1 for k in self if not (type(k) is int or str(k).isdigit()))
        self[key] = code
        return code


class _StreamCodes(dict[Any, int]):
    """``args.stream``: an integer or a string of digits (older Kineto), else -1."""

    def __missing__(self, key: Any) -> int:
        if type(key) is int:
            code = key
        elif isinstance(key, str) and key.isdigit():
            code = int(key)
        else:
            code = -1
        self[key] = code
        return code


_CAT = attrgetter("cat")
_NAME = attrgetter("name")
_TID = attrgetter("tid")
_TS = attrgetter("ts")
_DUR = attrgetter("dur")
_ARGS = attrgetter("args")
_CORRELATION = attrgetter("correlation")
_EXTERNAL = attrgetter("external_id")
_STREAM = attrgetter("stream")
_GROUP = attrgetter("group")
_DEVICE = attrgetter("device")


def _ints(getter: Callable[[Any], Any], items: list[Any], count: int) -> npt.NDArray[np.int64]:
    """``getter(item)`` as integers, with -1 for anything else (a null, a string id)."""
    try:
        return np.fromiter(map(getter, items), np.int64, count)
    except (TypeError, ValueError):
        values = map(getter, items)
        return np.fromiter((v if type(v) is int else -1 for v in values), np.int64, count)


class _Columns:
    """Column builders: each decoded block becomes numpy column chunks (field by field, with
    ``map`` over attribute getters: no per-event Python loop); strings are interned."""

    def __init__(self) -> None:
        self.chunks: list[tuple[npt.NDArray[Any], ...]] = []
        self.names = _Codes()
        self.groups = _GroupCodes()
        self.threads = _ThreadCodes()
        self.streams = _StreamCodes()
        self.kinds = _KindCodes({k: int(v) for k, v in _CATEGORIES.items()})
        self.devices: dict[int, int] = {}
        self.skipped = 0

    def add(self, events: list[_Event]) -> None:
        n = len(events)
        if not n:
            return
        kind = np.fromiter(map(self.kinds.__getitem__, map(_CAT, events)), np.int8, n)
        dur = np.fromiter(map(_DUR, events), np.float64, n)
        keep = (kind >= 0) & (dur >= 0)
        if not keep.all():
            events = list(compress(events, keep.tolist()))
            kind, dur, n = kind[keep], dur[keep], len(events)
            if not n:
                return
        # complete events only: the duration filter above is that test (in the Chrome trace
        # format only "X" events carry "dur"; instant, flow, counter and metadata events have
        # none), so ``ph`` is not read at all
        names = np.fromiter(map(self.names.__getitem__, map(_NAME, events)), np.int32, n)
        python = kind == EventKind.PYTHON_GC
        if python.any():
            keep = ~python | (names == self.names[_GC_NAME])
            if not keep.all():
                events = list(compress(events, keep.tolist()))
                kind, dur, names, n = kind[keep], dur[keep], names[keep], len(events)
                if not n:
                    return
        args = list(map(_ARGS, events))
        if None in args:  # "args": null
            args = [_NO_ARGS if a is None else a for a in args]
        thread = self._threads(events, n)
        on_stream = (kind >= EventKind.KERNEL) & (kind != EventKind.RUNTIME)
        on_stream &= kind != EventKind.PYTHON_GC
        if on_stream.any():
            stream = np.fromiter(map(self.streams.__getitem__, map(_STREAM, args)), np.int64, n)
            thread = np.where(on_stream & (stream >= 0), stream, thread)
            kernels = kind == EventKind.KERNEL
            if kernels.any():
                kernel_args = list(compress(args, kernels.tolist()))
                device = _ints(_DEVICE, kernel_args, len(kernel_args))
                values, counts = np.unique(device[device >= 0], return_counts=True)
                for value, count in zip(values.tolist(), counts.tolist(), strict=True):
                    self.devices[value] = self.devices.get(value, 0) + count
        self.chunks.append(
            (
                kind,
                names,
                thread,
                np.fromiter(map(_TS, events), np.float64, n),
                dur,
                _ints(_CORRELATION, args, n),
                _ints(_EXTERNAL, args, n),
                np.fromiter(map(self.groups.__getitem__, map(_GROUP, args)), np.int32, n),
            )
        )

    def _threads(self, events: list[_Event], n: int) -> npt.NDArray[np.int64]:
        """Thread ids: integers as they are (one pass), else through :class:`_ThreadCodes`."""
        try:
            return np.fromiter(map(_TID, events), np.int64, n)
        except (TypeError, ValueError):
            return np.fromiter(map(self.threads.__getitem__, map(_TID, events)), np.int64, n)

    def add_loose(self, raw: list[Any]) -> None:
        """Events that do not fit the typed decoder (odd types): convert field by field."""
        typed: list[_Event] = []
        for item in raw:
            if not isinstance(item, dict):
                self.skipped += 1
                continue
            try:
                typed.append(msgspec.convert(item, _Event, strict=False))
            except msgspec.ValidationError:
                self.skipped += 1
        self.add(typed)

    def table(self) -> EventTable:
        dtypes = (np.int8, np.int32, np.int64, np.float64, np.float64, np.int64, np.int64, np.int32)
        columns = [
            np.concatenate([c[i] for c in self.chunks]) if self.chunks else np.zeros(0, dtype)
            for i, dtype in enumerate(dtypes)
        ]
        self.chunks = []
        return EventTable(
            kind=columns[0],
            name=columns[1],
            thread=columns[2],
            ts_us=columns[3],
            dur_us=columns[4],
            correlation=columns[5],
            external_id=columns[6],
            group=columns[7],
            names=tuple(self.names),
            groups=self.groups.names(),
        )


class _Reader:
    """Reads blocks into a buffer and tracks the absolute offset of ``buf[0]``.

    Line numbers are only wanted for an error message, so they are not counted as blocks go
    by (that was 9 % of reading a small trace) when the input can be read again: a file, or a
    seekable stream. An error then re-reads the input up to the dropped offset. A stream that
    cannot seek (a member of a streamed tar archive) has its newlines counted as it is read.
    """

    def __init__(
        self,
        stream: IO[bytes],
        source: str,
        block_bytes: int,
        reopen: Callable[[], IO[bytes]] | None = None,
    ) -> None:
        self.stream = stream
        self.source = source
        self.block_bytes = block_bytes
        self.reopen = reopen
        self.buf = bytearray()
        self.offset = 0  # absolute offset of buf[0]
        # line of buf[0] and bytes between that line's start and buf[0], counted only when
        # the input cannot be read again
        self.line = 1
        self.since_newline = 0
        self.eof = False
        self.problem: str | None = None

    def more(self) -> bool:
        if self.eof:
            return False
        try:
            block = self.stream.read(self.block_bytes)
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as exc:
            self.eof = True
            end = self.offset + len(self.buf)
            self.problem = f"compressed stream broken after {end} bytes ({exc})"
            return False
        if not block:
            self.eof = True
            return False
        self.buf += block
        return True

    def drop(self, count: int) -> None:
        if self.reopen is None:
            newlines = self.buf.count(b"\n", 0, count)
            self.line += newlines
            last = self.buf.rfind(b"\n", 0, count) if newlines else -1
            self.since_newline = count - 1 - last if newlines else self.since_newline + count
        self.offset += count
        del self.buf[:count]

    def _dropped_lines(self) -> tuple[int, int] | None:
        """Line of ``buf[0]`` and the bytes between its line's start and ``buf[0]``, by
        reading the input again up to the dropped offset; None when that fails."""
        if self.reopen is None:
            return None
        newlines, since_newline, left = 0, 0, self.offset
        try:
            again = open_maybe_gzip(self.reopen())
        except OSError:
            return None
        try:
            while left > 0:
                chunk = again.read(min(left, 1 << 20))
                if not chunk:
                    return None
                left -= len(chunk)
                count = chunk.count(b"\n")
                newlines += count
                since_newline = (
                    len(chunk) - 1 - chunk.rfind(b"\n") if count else since_newline + len(chunk)
                )
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError):
            return None
        finally:
            again.close()
        return 1 + newlines, since_newline

    def where(self, index: int) -> tuple[int | None, int | None]:
        """Line and column (1-based) of ``buf[index]``; (None, None) when the input was
        partly dropped and cannot be read again to count its lines."""
        in_buffer = self.buf.count(b"\n", 0, index)
        start = self.buf.rfind(b"\n", 0, index)
        if self.offset == 0 or self.reopen is None:
            line, since_newline = self.line, self.since_newline
        else:
            before = self._dropped_lines()
            if before is None:
                return None, None
            line, since_newline = before
        column = index - start if start >= 0 else since_newline + index + 1
        return line + in_buffer, column

    def error(self, message: str, index: int) -> TraceError:
        line, column = self.where(index)
        if line is None:
            message = f"{message} (at byte {self.offset + index})"
        return TraceError(message, source=self.source, line=line, column=column)


def _decode_span(buf: bytearray, start: int, stop: int) -> list[Any] | None:
    """Decode ``buf[start:stop]`` (a JSON array of events); None when it is not valid JSON."""
    view = memoryview(buf)[start:stop]
    try:
        return _DECODER.decode(view)
    except msgspec.ValidationError:
        try:
            loose: list[Any] = msgspec.json.decode(view)
        except msgspec.DecodeError:
            return None
        return loose
    except msgspec.DecodeError:
        return None
    finally:
        view.release()


def _consume(columns: _Columns, events: list[Any]) -> None:
    if events and not isinstance(events[0], _Event):
        columns.add_loose(events)
    else:
        columns.add(events)


def _decode_error(buf: bytearray, start: int, stop: int) -> tuple[str, int]:
    """msgspec's message and buffer index for the first error in ``buf[start:stop]``."""
    view = memoryview(buf)[start:stop]
    try:
        msgspec.json.decode(view)
    except msgspec.DecodeError as exc:
        match = _DECODE_AT.search(str(exc))
        at = start + int(match.group(1)) if match else start
        return str(exc), min(at, max(len(buf) - 1, 0))
    finally:
        view.release()
    return "", start


_NO_BOUNDARY = -1
_UNDECODABLE = -2


def _cut(reader: _Reader, columns: _Columns, first: int) -> int:
    """Decode the whole events the buffer holds, from ``buf[first]`` (a ``{``).

    Returns the index of the slack byte before the next event, or ``_NO_BOUNDARY`` (read
    more), or ``_UNDECODABLE`` (boundaries exist but no span before them is valid JSON)."""
    buf = reader.buf
    limit = len(buf)
    tries = 0
    while tries < 64:
        brace = buf.rfind(b"}", first, limit)
        if brace < 0:
            break
        limit = brace
        match = _BOUNDARY.match(buf, brace)
        if match is None:
            continue
        tries += 1
        saved_open, saved_close = buf[first - 1], buf[brace + 1]
        buf[first - 1], buf[brace + 1] = 0x5B, 0x5D  # '[' and ']'
        events = _decode_span(buf, first - 1, brace + 2)
        buf[first - 1], buf[brace + 1] = saved_open, saved_close
        if events is not None:
            _consume(columns, events)
            return match.end() - 2  # the slack byte just before the next '{'
    return _UNDECODABLE if tries else _NO_BOUNDARY


def _first_event(buf: bytearray) -> int:
    first = 1
    while first < len(buf) and buf[first] in b" \t\r\n":
        first += 1
    return first


def _events(reader: _Reader, columns: _Columns) -> bytes:
    """Consume the events array. ``buf[0]`` is the slack byte before the first event (the
    ``[``); returns what follows the array in the buffer."""
    buf = reader.buf
    while True:
        first = _first_event(buf)
        if first >= len(buf):
            if not reader.more():
                raise reader.error("file ends inside traceEvents", max(len(buf) - 1, 0))
            continue
        if buf[first] == 0x5D:  # ']': end of the array
            return bytes(buf[first + 1 :])
        if buf[first] != 0x7B:  # '{'
            raise reader.error("invalid JSON in traceEvents: expected an event object", first)
        if not reader.eof and len(buf) < reader.block_bytes:
            reader.more()
            continue
        cut = _cut(reader, columns, first)
        if cut >= 0:
            reader.drop(cut)
            continue
        if cut == _UNDECODABLE and len(buf) > 4 * reader.block_bytes:
            message, at = _decode_error(buf, first - 1, len(buf))
            raise reader.error(f"invalid JSON in traceEvents: {message}", at)
        if reader.more():
            continue
        return _tail(reader, columns, first)


def _tail(reader: _Reader, columns: _Columns, first: int) -> bytes:
    """After end of input: the last events and the array's end, or a truncated file."""
    buf = reader.buf
    for match in _ARRAY_END.finditer(buf, first):
        end = match.end()
        saved = buf[first - 1]
        buf[first - 1] = 0x5B
        events = _decode_span(buf, first - 1, end)
        buf[first - 1] = saved
        if events is not None:
            _consume(columns, events)
            return bytes(buf[end:])
    # No end of array that decodes: keep the whole events before the cut, then decide
    # whether the rest is cut short (partial result) or broken (error).
    while True:
        cut = _cut(reader, columns, first)
        if cut < 0:
            break
        reader.drop(cut)
        first = _first_event(buf)
    saved = buf[first - 1]
    buf[first - 1] = 0x5B
    message, at = _decode_error(buf, first - 1, len(buf))
    buf[first - 1] = saved
    end = reader.offset + len(buf)
    if reader.problem is None and "truncated" not in message:
        raise reader.error(f"invalid JSON in traceEvents: {message}", at)
    line, _ = reader.where(max(len(buf) - 1, 0))
    reason = reader.problem or "file ends inside the traceEvents array"
    cut_at = f"byte {end} (line {line})" if line is not None else f"byte {end}"
    reader.problem = f"{reason}; kept the events before {cut_at}"
    return b""


def _metadata(prefix: bytes, suffix: bytes, source: str) -> dict[str, Any]:
    try:
        parsed = orjson.loads(prefix + b"[]" + suffix)
    except orjson.JSONDecodeError:
        # a truncated file has no valid suffix: read the part before the array alone
        try:
            parsed = orjson.loads(prefix + b"[]}")
        except orjson.JSONDecodeError as exc:
            raise TraceError(f"invalid JSON around traceEvents: {exc}", source=source) from None
    if not isinstance(parsed, dict):
        raise TraceError("a Kineto trace is a JSON object", source=source, line=1, column=1)
    parsed.pop("traceEvents", None)
    return parsed


def _reopener(path: Path, stream: IO[bytes] | None) -> Callable[[], IO[bytes]] | None:
    """How to read the input again from its start (for the line of an error), if it can be."""
    if stream is None:
        return lambda: path.open("rb")
    try:
        if not stream.seekable():
            return None
        start = stream.tell()
    except (OSError, ValueError, AttributeError):
        return None

    def rewind() -> IO[bytes]:
        stream.seek(start)
        return cast("IO[bytes]", _Unclosed(stream))

    return rewind


class _Unclosed:
    """A stream read again for an error's line number: the caller closes the original."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw

    def read(self, size: int = -1) -> bytes:
        return self.raw.read(size)

    def close(self) -> None:
        pass


def read_kineto(
    path: str | Path,
    *,
    source: str | None = None,
    stream: IO[bytes] | None = None,
    block_bytes: int = BLOCK_BYTES,
) -> RankTrace:
    """Parse one rank's Kineto trace (``.json`` or ``.json.gz``, any name).

    Args:
        path: the file; its name is the rank fallback when ``distributedInfo`` has none.
        source: how to name the file in errors (default: ``path``).
        stream: read from this binary stream instead of opening ``path`` (a tar member); it
            may be gzip-compressed.
        block_bytes: JSON bytes decoded per block (memory/speed trade-off).

    Returns:
        The rank's events and metadata; a truncated file yields the events before the cut
        and a message in ``problems``.

    Raises:
        TraceError: not a Kineto trace, invalid JSON (with line and column), or no rank.
    """
    path = Path(path)
    name = source or str(path)
    reopen = _reopener(path, stream)  # before anything is read from ``stream``
    try:
        raw = open_maybe_gzip(path.open("rb") if stream is None else stream)
    except OSError as exc:
        raise TraceError(f"cannot open: {exc.strerror or exc}", source=name) from None
    columns = _Columns()
    reader = _Reader(raw, name, block_bytes, reopen)
    try:
        while (match := _KEY.search(reader.buf)) is None:
            if not reader.more():
                text = reader.buf.lstrip()
                if reader.problem:
                    raise TraceError(reader.problem, source=name)
                if not text:
                    raise TraceError("empty file", source=name, line=1, column=1)
                if text[:1] != b"{":
                    raise reader.error("not a Kineto trace: expected a JSON object", 0)
                raise TraceError("not a Kineto trace: no traceEvents array", source=name)
        prefix = bytes(reader.buf[: match.end() - 1])
        reader.drop(match.end() - 1)  # keep the '[' as the slack byte
        parts = [_events(reader, columns)]
        if not reader.eof:
            while block := raw.read(block_bytes):
                parts.append(block)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise TraceError(f"compressed stream broken: {exc}", source=name) from None
    finally:
        raw.close()
    suffix = b"".join(parts) if reader.problem is None else b"}"
    return _rank_trace(name, _metadata(prefix, suffix, name), columns, reader)


def _rank_trace(
    name: str, metadata: dict[str, Any], columns: _Columns, reader: _Reader
) -> RankTrace:
    info = metadata.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    rank = info.get("rank")
    rank_from = "distributedInfo"
    if not isinstance(rank, int):
        rank = rank_from_name(name)
        rank_from = "file name"
    if rank is None:
        raise TraceError(
            "cannot tell which rank this trace is: no distributedInfo.rank and no rank "
            "number in the file name (rank-N, workerN)",
            source=name,
        )
    world = info.get("world_size")
    backend = info.get("backend")
    devices = metadata.get("deviceProperties")
    device = None
    if isinstance(devices, list) and devices and isinstance(devices[0], dict):
        device = str(devices[0].get("name")) if devices[0].get("name") else None
    problems = []
    if reader.problem:
        problems.append(reader.problem)
    if columns.skipped:
        problems.append(f"{columns.skipped} events with unusable fields were skipped")
    return RankTrace(
        source=name,
        rank=rank,
        rank_from=rank_from,
        world_size=world if isinstance(world, int) else None,
        backend=backend if isinstance(backend, str) else None,
        events=columns.table(),
        problems=tuple(problems),
        bytes_read=reader.offset + len(reader.buf),
        device=device,
        gpu_index=max(columns.devices, key=lambda d: columns.devices[d])
        if columns.devices
        else None,
        metadata={
            k: v
            for k, v in metadata.items()
            if k in ("distributedInfo", "schemaVersion", "host_name", "baseTimeNanoseconds")
        },
    )
