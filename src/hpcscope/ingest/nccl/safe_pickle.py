"""Read a pickle that may only hold plain data, without ever running code from it.

PyTorch writes flight-recorder dumps as pickles. Unpickling runs whatever callables the pickle
names (``GLOBAL``/``STACK_GLOBAL`` + ``REDUCE``, ``BUILD``, ``INST``/``OBJ``/``NEWOBJ``), so a
dump from an untrusted place is code. hpcscope never uses the default unpickler on them. Three
walls, each enough on its own:

1. every opcode is checked **before** anything is built (``pickletools.genops`` only decodes):
   only the opcodes that make ``dict``, ``list``, ``tuple``, ``str``, ``int``, ``float``,
   ``bool`` and ``None`` (plus framing and the memo) are allowed; the first other opcode is
   refused with its byte offset;
2. the unpickler that then builds the data refuses every class lookup (``find_class``) and
   every persistent id;
3. the result is walked and anything not of the allowed types is refused.

What the data describes is bounded too (:mod:`hpcscope.model.bounds`): the walk visits each
container once, refuses a container that holds itself (a cycle, naming the byte where the
pickle refers back to it), nesting deeper than ``max_depth``, and more than ``max_objects``
values as a consumer would walk them (a list shared twice at each of 30 levels is 2**30
values in a few hundred bytes); an integer wider than :data:`MAX_INT_BITS` is refused at its
opcode (printing one of a million digits takes seconds).
"""

from __future__ import annotations

import io
import pickle
import pickletools
from typing import NoReturn

from hpcscope.model.bounds import DEFAULT_BOUNDS, ReadBounds, check_graph
from hpcscope.model.errors import SourceError

#: Opcodes that build only dict/list/tuple/str/int/float/bool/None, or frame and memoise.
ALLOWED_OPCODES = frozenset(
    {
        "PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK", "DUP",
        "PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET", "MEMOIZE",
        "NONE", "NEWTRUE", "NEWFALSE",
        "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4",
        "FLOAT", "BINFLOAT",
        "STRING", "BINSTRING", "SHORT_BINSTRING",
        "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8",
        "EMPTY_LIST", "APPEND", "APPENDS", "LIST",
        "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
        "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS",
    }
)  # fmt: skip

_ALLOWED_TYPES = (dict, list, tuple, str, int, float, bool, type(None))
#: Widest integer a dump may hold (sizes, ids and nanosecond times fit in 64).
MAX_INT_BITS = 256


class UnsafePickleError(SourceError):
    """A pickle that holds more than plain data, or is not a pickle at all."""


class _NoClassesUnpickler(pickle.Unpickler):
    """An unpickler that can build no object other than plain data."""

    def find_class(self, module: str, name: str) -> NoReturn:
        raise pickle.UnpicklingError(f"refused class {module}.{name}")

    def persistent_load(self, pid: object) -> NoReturn:
        raise pickle.UnpicklingError("refused persistent id")


def restricted_loads(data: bytes, *, source: str, bounds: ReadBounds = DEFAULT_BOUNDS) -> object:
    """Load ``data`` if, and only if, it holds nothing but plain data, within ``bounds``.

    Raises:
        UnsafePickleError: an opcode, class or type outside the allowed set (nothing was
            executed), or a truncated/corrupt pickle; the message names the byte offset.
        BoundExceeded: a reference cycle (naming the byte), too deep, too many values.
    """
    memo = _check_opcodes(data, source)
    unpickler = _NoClassesUnpickler(io.BytesIO(data))
    try:
        value = unpickler.load()
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        IndexError,
        KeyError,  # a memo get of nothing put
        AttributeError,  # plain opcodes in a wrong order: APPEND on a dict, SETITEM on a list
        OverflowError,
        RecursionError,
    ) as exc:
        raise UnsafePickleError(f"cannot unpickle: {exc!r}", source=source) from exc
    built = {id(item): index for index, item in unpickler.memo.copy().items()}

    def where(container: object) -> str | None:
        index = built.get(id(container))
        offset = memo.get(index) if index is not None else None
        return f"byte {offset}" if offset is not None else None

    check_graph(value, source=source, bounds=bounds, where=where)
    _check_types(value, source)
    return value


_MEMO_OPCODES = frozenset({"PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET"})


def _check_opcodes(data: bytes, source: str) -> dict[int, int]:
    """Refuse what builds more than plain data (module docstring); returns, per memo index,
    the byte of its first reference back (``GET``), else of its ``PUT``."""
    position = 0
    put: dict[int, int] = {}
    got: dict[int, int] = {}
    try:
        for opcode, argument, offset in pickletools.genops(data):
            position = offset if offset is not None else position
            if opcode.name not in ALLOWED_OPCODES:
                detail = f" {argument!r}" if argument is not None else ""
                raise UnsafePickleError(
                    f"refused pickle opcode {opcode.name}{detail} at byte {position}: a "
                    "flight-recorder dump holds only plain data (dict, list, tuple, str, int, "
                    "float, bool, None); nothing was executed",
                    source=source,
                    field=f"byte {position}",
                )
            if opcode.name in _MEMO_OPCODES and isinstance(argument, int) and argument > len(data):
                # the unpickler sizes its memo by the index: a huge one is a huge allocation
                # (a real pickle numbers its memo entries from 0, one per object, so an index
                # beyond the byte count is never honest)
                raise UnsafePickleError(
                    f"pickle memo index {argument} at byte {position} exceeds the dump's size",
                    source=source,
                    field=f"byte {position}",
                )
            if opcode.name == "MEMOIZE":
                put.setdefault(len(put), position)
            elif opcode.name in _MEMO_OPCODES and isinstance(argument, int):
                (got if "GET" in opcode.name else put).setdefault(argument, position)
            elif isinstance(argument, int) and argument.bit_length() > MAX_INT_BITS:
                raise UnsafePickleError(
                    f"integer of {argument.bit_length()} bits at byte {position} (at most "
                    f"{MAX_INT_BITS}): refused",
                    source=source,
                    field=f"byte {position}",
                )
    except UnsafePickleError:
        raise
    except (ValueError, EOFError) as exc:
        raise UnsafePickleError(
            f"not a readable pickle (truncated or corrupt near byte {position}): {exc}",
            source=source,
            field=f"byte {position}",
        ) from exc
    return put | got


def _check_types(value: object, source: str) -> None:
    """Every value of an allowed type; each container once (the graph is checked: acyclic,
    bounded)."""
    stack: list[tuple[object, str]] = [(value, "$")]
    seen: set[int] = set()
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict | list | tuple):
            if id(item) in seen:
                continue
            seen.add(id(item))
        if not isinstance(item, _ALLOWED_TYPES):
            raise UnsafePickleError(
                f"refused value of type {type(item).__name__}", source=source, field=path
            )
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str | int):
                    raise UnsafePickleError(
                        f"refused dict key of type {type(key).__name__}", source=source, field=path
                    )
                stack.append((child, f"{path}.{key}"))
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{path}[{i}]") for i, child in enumerate(item))
