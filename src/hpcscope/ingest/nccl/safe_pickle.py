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
"""

from __future__ import annotations

import io
import pickle
import pickletools
from typing import NoReturn

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


class UnsafePickleError(SourceError):
    """A pickle that holds more than plain data, or is not a pickle at all."""


class _NoClassesUnpickler(pickle.Unpickler):
    """An unpickler that can build no object other than plain data."""

    def find_class(self, module: str, name: str) -> NoReturn:
        raise pickle.UnpicklingError(f"refused class {module}.{name}")

    def persistent_load(self, pid: object) -> NoReturn:
        raise pickle.UnpicklingError("refused persistent id")


def restricted_loads(data: bytes, *, source: str) -> object:
    """Load ``data`` if, and only if, it holds nothing but plain data.

    Raises:
        UnsafePickleError: an opcode, class or type outside the allowed set (nothing was
            executed), or a truncated/corrupt pickle; the message names the byte offset.
    """
    _check_opcodes(data, source)
    try:
        value = _NoClassesUnpickler(io.BytesIO(data)).load()
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
    _check_types(value, source)
    return value


_MEMO_OPCODES = frozenset({"PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET"})


def _check_opcodes(data: bytes, source: str) -> None:
    position = 0
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
    except UnsafePickleError:
        raise
    except (ValueError, EOFError) as exc:
        raise UnsafePickleError(
            f"not a readable pickle (truncated or corrupt near byte {position}): {exc}",
            source=source,
            field=f"byte {position}",
        ) from exc


def _check_types(value: object, source: str) -> None:
    stack: list[tuple[object, str]] = [(value, "$")]
    while stack:
        item, path = stack.pop()
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
