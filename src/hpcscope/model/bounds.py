"""Bounds every reader of outside input is held to, by construction.

A parser's cost must follow from its input's size, not from what the input describes: a
60-byte pickle whose list holds itself, a YAML anchor graph that refers to itself or doubles
at each level, a gzip of 2 MB that expands to gigabytes, or 100,000 nested brackets all look
small on disk. Each reader checks what it builds against :class:`ReadBounds` and raises
:class:`BoundExceeded` (a :class:`~hpcscope.model.errors.SourceError`, so the CLI exits 2 and
the server answers 413 or 422) that names the file, the bound and where it was crossed:

* **objects** — values in the document as its consumer walks it: a value reachable twice
  (a pickle memo reference, a YAML alias) counts each time (:func:`check_graph` counts in
  linear time, without expanding);
* **depth** — containers nested in containers;
* **cycles** — a container that contains itself is refused (no consumer of ours walks a
  cycle), naming the offset or line where the reader can tell;
* **decompressed bytes** and **ratio** — what a compressed input may expand to
  (:func:`check_expansion`);
* **wall time** — a :class:`Deadline` that long loops check (the bound a slow machine still
  meets for inputs within the other bounds).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcscope.model.errors import SourceError

#: Values in one document, counted as walked (shared references counted each time).
MAX_OBJECTS = 5_000_000
#: Containers nested in containers (real documents of ours nest fewer than 20).
MAX_DEPTH = 200
#: Bytes a compressed input may expand to.
MAX_DECOMPRESSED_BYTES = 2 << 30
#: Decompressed over compressed bytes, judged once :data:`RATIO_FLOOR_BYTES` came out.
MAX_RATIO = 200.0
#: Below this many decompressed bytes no ratio is judged (a small file of spaces may expand
#: 1000 times and cost nothing).
RATIO_FLOOR_BYTES = 1 << 20
#: Seconds one reader may run on one input.
MAX_SECONDS = 10.0


class BoundExceeded(SourceError):
    """An input past one of its reader's bounds (module docstring); ``bound`` names which:
    ``objects``, ``depth``, ``cycle``, ``bytes``, ``ratio`` or ``seconds``."""

    def __init__(
        self,
        message: str,
        *,
        bound: str,
        source: str,
        line: int | None = None,
        column: int | None = None,
        field: str | None = None,
    ) -> None:
        self.bound = bound
        super().__init__(message, source=source, line=line, column=column, field=field)


@dataclass(frozen=True, slots=True)
class ReadBounds:
    """The bounds of one read (module docstring; defaults are the module's constants)."""

    max_objects: int = MAX_OBJECTS
    max_depth: int = MAX_DEPTH
    max_decompressed_bytes: int = MAX_DECOMPRESSED_BYTES
    max_ratio: float = MAX_RATIO
    max_seconds: float = MAX_SECONDS


DEFAULT_BOUNDS = ReadBounds()


class Deadline:
    """The wall-time bound of one read: :meth:`check` raises once ``seconds`` have passed.

    Args:
        seconds: the bound.
        source: the input, named in the error.
        clock: monotonic seconds (a seam for tests).
    """

    def __init__(
        self, seconds: float, *, source: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.seconds = seconds
        self.source = source
        self._clock = clock
        self._until = clock() + seconds

    def check(self, where: str | None = None) -> None:
        """Raises:
        BoundExceeded: the read has run past its bound (``where``: how far it got)."""
        if self._clock() > self._until:
            raise BoundExceeded(
                f"reading took more than {self.seconds:g} s: refused",
                bound="seconds",
                source=self.source,
                field=where,
            )


_CONTAINERS = (dict, list, tuple, set, frozenset)


def _plain_children(value: object) -> Iterable[object] | None:
    if isinstance(value, dict):
        return (part for pair in value.items() for part in pair)
    if isinstance(value, _CONTAINERS):
        return value
    return None


#: Containers walked between two deadline checks.
_CHECK_EVERY = 4096


def check_graph(
    value: object,
    *,
    source: str,
    bounds: ReadBounds = DEFAULT_BOUNDS,
    where: Callable[[object], str | None] | None = None,
    deadline: Deadline | None = None,
    children: Callable[[object], Iterable[object] | None] = _plain_children,
) -> int:
    """Check a built document (dicts, lists, tuples, sets and scalars) against ``bounds``.

    The walk visits each container once (iteratively: no recursion, whatever the depth) and
    counts the values a consumer walking the document as a tree would meet, shared
    references included, without walking them again.

    Args:
        value: the document.
        source: the input, named in errors.
        bounds: ``max_objects`` and ``max_depth`` apply.
        where: for a container, where the input made it (``"byte 12"``), or None: named in
            the error of a cycle.
        deadline: checked every few thousand containers.
        children: a container's children, None for a value that is not one (the default
            reads plain data; a YAML reader passes its node graph's).

    Returns:
        The number of values counted.

    Raises:
        BoundExceeded: a cycle, too deep, or too many values.
    """
    root = children(value)
    if root is None:
        return 1
    sizes: dict[int, int] = {}
    open_ids: set[int] = set()
    # frames: the container, its children still to walk, the values counted under it so far
    frames: list[tuple[object, Iterator[object], list[int]]] = []
    walked = 0

    def enter(container: object, below: Iterable[object]) -> None:
        nonlocal walked
        if len(frames) >= bounds.max_depth:
            raise BoundExceeded(
                f"nested deeper than {bounds.max_depth} levels: refused",
                bound="depth",
                source=source,
                field=_named(where, container),
            )
        walked += 1
        if deadline is not None and walked % _CHECK_EVERY == 0:
            deadline.check()
        open_ids.add(id(container))
        frames.append((container, iter(below), [1]))

    enter(value, root)
    while frames:
        container, pending, total = frames[-1]
        child = next(pending, _DONE)
        if child is _DONE:
            frames.pop()
            open_ids.discard(id(container))
            sizes[id(container)] = total[0]
            if frames:
                _add(frames[-1][2], total[0], bounds, source)
            continue
        below = children(child)
        if below is None:
            _add(total, 1, bounds, source)
        elif id(child) in open_ids:
            raise BoundExceeded(
                "refers to itself (a reference cycle): refused",
                bound="cycle",
                source=source,
                field=_named(where, child),
            )
        elif id(child) in sizes:
            _add(total, sizes[id(child)], bounds, source)
        else:
            enter(child, below)
    return sizes[id(value)]


_DONE = object()


def _add(total: list[int], count: int, bounds: ReadBounds, source: str) -> None:
    total[0] += count
    if total[0] > bounds.max_objects:
        raise BoundExceeded(
            f"holds more than {bounds.max_objects:,} values (shared references counted each "
            "time): refused",
            bound="objects",
            source=source,
        )


def _named(where: Callable[[object], str | None] | None, container: object) -> str | None:
    return where(container) if where is not None else None


def loads_json(data: str | bytes, *, source: str) -> Any:
    """:func:`json.loads`, with nesting deeper than the interpreter's recursion limit refused.

    JSON holds no shared references nor cycles, and no more values than bytes: its one
    unbounded dimension is depth, which ``json.loads`` meets with ``RecursionError``.

    Raises:
        BoundExceeded: nested too deeply.
        json.JSONDecodeError, UnicodeDecodeError: as :func:`json.loads` raises them.
    """
    try:
        return json.loads(data)
    except RecursionError:
        raise BoundExceeded(
            "JSON nested too deeply to read: refused", bound="depth", source=source
        ) from None


@contextmanager
def refusing_deep_nesting(*, source: str, line: int | None = None) -> Iterator[None]:
    """Turn a decoder's ``RecursionError`` (msgspec's and ``json``'s answer to nesting deeper
    than the interpreter's stack) into :class:`BoundExceeded` naming the input."""
    try:
        yield
    except RecursionError:
        raise BoundExceeded(
            "nested too deeply to read: refused", bound="depth", source=source, line=line
        ) from None


def check_expansion(
    expanded_bytes: int,
    compressed_bytes: int,
    *,
    source: str,
    bounds: ReadBounds = DEFAULT_BOUNDS,
) -> None:
    """Check what a compressed input has expanded to so far (call it as bytes come out).

    Raises:
        BoundExceeded: past ``max_decompressed_bytes``, or past ``max_ratio`` once
            :data:`RATIO_FLOOR_BYTES` came out.
    """
    if expanded_bytes > bounds.max_decompressed_bytes:
        raise BoundExceeded(
            f"expands to more than {bounds.max_decompressed_bytes:,} bytes: refused",
            bound="bytes",
            source=source,
            field=f"byte {compressed_bytes} of the compressed input",
        )
    if expanded_bytes > RATIO_FLOOR_BYTES and expanded_bytes > bounds.max_ratio * max(
        1, compressed_bytes
    ):
        raise BoundExceeded(
            f"expands more than {bounds.max_ratio:g} times ({expanded_bytes:,} bytes from "
            f"{compressed_bytes:,}): a decompression bomb, refused",
            bound="ratio",
            source=source,
            field=f"byte {compressed_bytes} of the compressed input",
        )


def read_text(path: str | Path, *, error: type[SourceError] = SourceError) -> str:
    """A text file's content, UTF-8: an unreadable file or bytes that are not UTF-8 (a binary
    file given where a YAML or text file is expected) raise ``error`` naming the file and the
    byte, never a bare ``UnicodeDecodeError``.

    Raises:
        SourceError: (``error``) the file cannot be read, or is not UTF-8 text.
    """
    source = str(path)
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror or exc}", source=source) from None
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8 text (byte {exc.start}: {exc.reason})", source=source) from None
