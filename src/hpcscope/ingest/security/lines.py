"""JSON lines in, rows and typed errors out: what the Falco and Tetragon parsers share.

A stream is read line by line (a file, a pipe, a list of byte strings); a blank line is
skipped; a line that is not a JSON object of the expected shape becomes a
:class:`SecurityEventError` naming the source, the 1-based line and, for malformed JSON, the
1-based column. Parsing goes on with the next line.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import IO

import msgspec
import orjson
import pyarrow as pa

from hpcscope.model.errors import SourceError

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
NOT_AVAILABLE = "<NA>"

_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|z|[+-]\d{2}:\d{2})$"
)
_MSGSPEC_BYTE = re.compile(r"\(byte (\d+)\)")


class SecurityEventError(SourceError):
    """A Falco or Tetragon line that could not be read (source, line, column, field)."""


@dataclass(frozen=True, slots=True)
class ParseResult:
    """Rows of the lines that parsed, and one error per line that did not.

    Attributes:
        table: the rows, in input order, with the parser's schema.
        errors: typed errors, in input order.
        lines: non-blank lines read.
    """

    table: pa.Table
    errors: tuple[SecurityEventError, ...]
    lines: int


def iter_lines(
    stream: IO[bytes] | Iterable[bytes], *, first_line: int = 1
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line number, line)`` for every non-blank line, newline stripped.

    Args:
        stream: a binary file or pipe (read lazily, line by line) or any iterable of lines.
        first_line: the number of the first line (a tailer resuming mid-file passes its own).
    """
    number = first_line - 1
    for line in stream:
        number += 1
        stripped = line.strip()
        if stripped:
            yield number, stripped


def decode_error(
    exc: msgspec.DecodeError, line: bytes, *, source: str, line_number: int
) -> SecurityEventError:
    """Turn msgspec's error into ours, with the column of malformed JSON (from orjson)."""
    if isinstance(exc, msgspec.ValidationError):
        message = str(exc)
        field = None
        path = re.search(r"at `\$\.?([^`]*)`", message)
        if path is not None:
            field = path.group(1) or None
            message = message[: path.start()].rstrip(" -")
        missing = re.search(r"missing required field `([^`]+)`", message)
        if missing is not None:
            field = f"{field}.{missing.group(1)}" if field else missing.group(1)
            message = "missing required field"
        return SecurityEventError(message, source=source, line=line_number, field=field)
    column: int | None = None
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError as json_exc:
        column = json_exc.colno
    else:  # msgspec refused what orjson accepts (e.g. an integer beyond 64 bits)
        byte = _MSGSPEC_BYTE.search(str(exc))
        column = int(byte.group(1)) + 1 if byte else None
    message = str(exc).removeprefix("JSON is malformed: ")
    message = "not JSON: " + message[:1].lower() + message[1:]
    return SecurityEventError(message, source=source, line=line_number, column=column)


def as_int(value: object) -> int | None:
    """An integer field: ints and decimal strings (protojson writes 64-bit ints as strings).

    ``None``, ``<NA>``, booleans, floats with a fraction and values beyond int64 read as None.
    """
    if isinstance(value, bool):
        return None
    number: int
    if isinstance(value, int):
        number = value
    elif isinstance(value, float):
        if not value.is_integer():
            return None
        number = int(value)
    elif isinstance(value, str):
        text = value.strip()
        if not text or len(text) > 20:
            return None
        try:
            number = int(text, 10)
        except ValueError:
            return None
    else:
        return None
    return number if INT64_MIN <= number <= INT64_MAX else None


def as_str(value: object) -> str | None:
    """A text field: strings other than Falco's ``<NA>``; numbers as their decimal text."""
    if isinstance(value, str):
        return None if value == NOT_AVAILABLE else value
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return str(value)
    return None


def rfc3339_to_ns(text: str) -> int | None:
    """Nanoseconds since the epoch of an RFC 3339 time with up to 9 fraction digits."""
    match = _RFC3339.match(text.strip())
    if match is None:
        return None
    date, hour, minute, second, fraction, zone = match.groups()
    try:
        base = datetime.fromisoformat(
            f"{date}T{hour}:{minute}:{second}{'+00:00' if zone in ('Z', 'z') else zone}"
        )
    except ValueError:
        return None
    nanos = calendar.timegm(base.utctimetuple()) * 1_000_000_000
    nanos += int((fraction or "").ljust(9, "0"))
    return nanos if INT64_MIN <= nanos <= INT64_MAX else None


def table_from_rows(rows: Sequence[Mapping[str, object]], schema: pa.Schema) -> pa.Table:
    """Rows (dicts keyed by column; a missing column is null) -> a table with ``schema``.

    Arrow converts the rows in C++: the Python side never walks rows times columns."""
    return pa.Table.from_pylist(list(rows), schema=schema)
