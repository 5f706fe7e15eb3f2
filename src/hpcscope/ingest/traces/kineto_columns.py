"""Kineto trace events -> numpy columns (:class:`~hpcscope.model.trace_events.EventTable`).

Each block of events is decoded with one call to msgspec's typed decoder, which builds only the
fields declared below (unknown keys are skipped inside the C decoder, never materialised as
Python objects), then becomes numpy column chunks at once: ``map`` over attribute getters and
interning dicts, no per-event Python loop. Strings (names, process groups, threads named by
Kineto) are interned to integer codes. Only complete events (``"ph": "X"`` with a ``dur``; an
event without a ``ph`` counts as one when it has a ``dur``) of the categories the analysis uses
are kept (see ``_CATEGORIES``); every other phase is decoded to a struct with no field.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from itertools import compress
from operator import attrgetter
from typing import Any, Literal, Union

import msgspec
import numpy as np
import numpy.typing as npt

from hpcscope.model.trace_events import EventKind, EventTable

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


class _Args(msgspec.Struct, frozen=True, gc=False):
    correlation: int | None = -1
    stream: int | str | None = -1
    device: int | str | None = -1
    group: str | None = msgspec.field(default=None, name="Process Group Name")


_NO_ARGS = _Args()


class _LooseEvent(msgspec.Struct, gc=False):
    """An event converted field by field (:meth:`EventColumns.add_loose`), whatever its ``ph``
    says: the duration test decides, as for a typed block."""

    cat: str = ""
    name: str = ""
    tid: int | str = 0
    ts: float = 0.0
    dur: float = -1.0
    args: _Args | None = _NO_ARGS


class _Event(_LooseEvent, tag_field="ph", tag="X"):
    """A complete event: the only phase that carries ``dur``, so the only one kept (the same
    fields, tagged for the decoder's union)."""


#: The categories Kineto writes (``libkineto/src/ActivityType.cpp``, and the flow and trace
#: spans of ``output_json.cpp``), and none. Decoded against this list, an event's ``cat`` is
#: the list's own string, not a new one: no allocation, and the category lookup of
#: :meth:`EventColumns.add` finds it without hashing or comparing its characters. A block
#: with a category not listed fails this decoder and is decoded with ``cat`` as any string.
KINETO_CATEGORIES = (
    *_CATEGORIES,
    "",
    "ac2g",
    "fwdbwd",
    "Trace",
    "cpu_instant_event",
    "external_correlation",
    "overhead",
    "cuda_sync",
    "cuda_profiler_range",
    "glow_runtime",
    "mtia_runtime",
    "mtia_ccp_events",
    "mtia_insight",
    "hpu_op",
    "xpu_runtime",
    "xpu_driver",
    "collective_comm",
    "privateuse1_runtime",
    "privateuse1_driver",
    "gpu_pm_counter",
)
_KnownCategory: Any = Literal[KINETO_CATEGORIES]  # built from a tuple of strings


class _KnownEvent(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    """:class:`_Event` with ``cat`` one of :data:`KINETO_CATEGORIES`."""

    cat: _KnownCategory = ""
    name: str = ""
    tid: int | str = 0
    ts: float = 0.0
    dur: float = -1.0
    args: _Args = _NO_ARGS  # "args": null fails it (the next decoder takes the block)


#: Every other phase of the Chrome trace format (instant, counter, flow, async, object,
#: metadata... events): decoded to a struct with no field at all, so the decoder skips their
#: keys and builds nothing (a 54 MB rank holds ~90,000 such events: flow arrows, instants).
#: Their ``cat``/``dur`` attributes are defaults under a JSON name no event has, so the
#: category test drops them without a special case. A phase not listed (or no ``ph``) makes
#: the block fail typed decoding: it is then converted event by event, with the same result.
_OTHER_PHASES = tuple("BEiICbnestfSTpFPNODMVvRc()")
_NO_KEY = "~hpcscope-absent~"
_OTHER_EVENTS = tuple(
    msgspec.defstruct(
        f"_Phase{ord(phase)}",
        [
            ("cat", str, msgspec.field(default="", name=_NO_KEY + "cat")),
            ("dur", float, msgspec.field(default=-1.0, name=_NO_KEY + "dur")),
        ],
        gc=False,
        tag_field="ph",
        tag=phase,
    )
    for phase in _OTHER_PHASES
)

_KNOWN_EVENT: Any = Union[(_KnownEvent, *_OTHER_EVENTS)]  # built from a tuple of types
_ANY_EVENT: Any = Union[(_Event, *_OTHER_EVENTS)]
_DECODER = msgspec.json.Decoder(list[_KNOWN_EVENT])


@functools.cache
def _any_category_decoder() -> msgspec.json.Decoder[list[Any]]:
    """The decoder of a block with a category :data:`KINETO_CATEGORIES` does not list, or an
    ``"args": null`` (built on first use: most traces never need it)."""
    return msgspec.json.Decoder(list[_ANY_EVENT])


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


def _integer(key: Any) -> int | None:
    """An id written as an integer or as a string of digits (older Kineto), else None."""
    if type(key) is int:
        return key
    if isinstance(key, str) and key.isdigit():
        return int(key)
    return None


class _ThreadCodes(dict[Any, int]):
    """Thread ids: integers (and strings of digits) as themselves; Kineto writes some threads
    as names ("PyTorch Profiler"), which get negative codes -2, -3, ... so they never collide
    with a real id."""

    def __init__(self) -> None:
        super().__init__()
        self.named = 0

    def __missing__(self, key: Any) -> int:
        code = _integer(key)
        if code is None:
            self.named += 1
            code = -1 - self.named
        self[key] = code
        return code


class _StreamCodes(dict[Any, int]):
    """``args.stream``: an integer or a string of digits, else -1."""

    def __missing__(self, key: Any) -> int:
        code = _integer(key)
        self[key] = -1 if code is None else code
        return self[key]


_CAT = attrgetter("cat")
_NAME = attrgetter("name")
_TID = attrgetter("tid")
_TS = attrgetter("ts")
_DUR = attrgetter("dur")
_ARGS = attrgetter("args")
_CORRELATION = attrgetter("correlation")
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


class EventColumns:
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
        self._null_args = True  # whether the last block decoded may have "args": null

    def add(self, events: list[Any], *, null_args: bool = True) -> None:
        """Add a block of events (``null_args``: whether an ``args`` may be None)."""
        n = len(events)
        if not n:
            return
        kind = np.fromiter(map(self.kinds.__getitem__, map(_CAT, events)), np.int8, n)
        keep = kind >= 0
        if not keep.all():  # other phases and categories: dropped before any other column
            events = list(compress(events, keep.tolist()))
            kind, n = kind[keep], len(events)
            if not n:
                return
        # complete events only: the duration test (in the Chrome trace format only "X"
        # events carry "dur"; instant, flow, counter and metadata events have none) also
        # holds for a block converted event by event, whatever its ``ph``
        dur = np.fromiter(map(_DUR, events), np.float64, n)
        keep = dur >= 0
        if not keep.all():
            events = list(compress(events, keep.tolist()))
            kind, dur, n = kind[keep], dur[keep], len(events)
            if not n:
                return
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
        if null_args and None in args:  # "args": null
            args = [_NO_ARGS if a is None else a for a in args]
        thread = self._threads(events, n)
        on_stream = (kind >= EventKind.KERNEL) & (kind != EventKind.RUNTIME)
        on_stream &= kind != EventKind.PYTHON_GC
        if on_stream.any():
            # only the GPU events' streams are read (a third of the events on a GPU rank)
            rows = np.flatnonzero(on_stream)
            gpu_args = list(compress(args, on_stream.tolist()))
            stream = np.fromiter(
                map(self.streams.__getitem__, map(_STREAM, gpu_args)), np.int64, rows.shape[0]
            )
            thread[rows] = np.where(stream >= 0, stream, thread[rows])
            kernels = kind[rows] == EventKind.KERNEL
            if kernels.any():
                kernel_args = list(compress(gpu_args, kernels.tolist()))
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
                self._groups(args, n),
            )
        )

    def _groups(self, args: list[_Args], n: int) -> npt.NDArray[np.int32]:
        """Process-group codes; most events name none (a count of the Nones is C-speed)."""
        groups = list(map(_GROUP, args))
        if groups.count(None) == n:
            return np.full(n, -1, np.int32)
        return np.fromiter(map(self.groups.__getitem__, groups), np.int32, n)

    def _threads(self, events: list[_Event], n: int) -> npt.NDArray[np.int64]:
        """Thread ids: integers as they are (one pass), else through :class:`_ThreadCodes`."""
        try:
            return np.fromiter(map(_TID, events), np.int64, n)
        except (TypeError, ValueError):
            return np.fromiter(map(self.threads.__getitem__, map(_TID, events)), np.int64, n)

    def add_loose(self, raw: list[Any]) -> None:
        """Events that do not fit the typed decoder (odd types, a phase it does not list, no
        phase): convert field by field; an event of another phase than ``X`` is dropped, as
        the typed decoder drops it."""
        typed: list[_LooseEvent] = []
        for item in raw:
            if not isinstance(item, dict):
                self.skipped += 1
                continue
            phase = item.get("ph", "X")
            if type(phase) is str and phase != "X":
                continue
            try:
                typed.append(msgspec.convert(item, _LooseEvent, strict=False))
            except msgspec.ValidationError:
                self.skipped += 1
        self.add(typed)

    def decode(self, view: memoryview) -> list[Any] | None:
        """A block of events (a JSON array): typed, or as plain values when a field has an
        unexpected type (:meth:`consume` converts those one by one); None when the block is
        not valid JSON."""
        for decoder in (_DECODER, None):
            try:
                typed: list[Any] = (decoder or _any_category_decoder()).decode(view)
                self._null_args = decoder is None
                return typed
            except msgspec.ValidationError:
                continue
            except msgspec.DecodeError:
                return None
        try:
            loose: list[Any] = msgspec.json.decode(view)
        except msgspec.DecodeError:
            return None
        return loose

    def consume(self, events: list[Any]) -> None:
        """Add a decoded block."""
        if events and not isinstance(events[0], msgspec.Struct):  # a typed block: structs
            self.add_loose(events)
        else:
            self.add(events, null_args=self._null_args)

    def table(self) -> EventTable:
        dtypes = (np.int8, np.int32, np.int64, np.float64, np.float64, np.int64, np.int32)
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
            group=columns[6],
            names=tuple(self.names),
            groups=self.groups.names(),
        )
