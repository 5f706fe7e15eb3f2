"""Line grammar of the Prometheus text exposition format 0.0.4: the slow, exact path.

:mod:`hpcscope.ingest.exposition.parser` parses most lines of a page without looking inside them (a
series key seen before is a dictionary hit). Every line it has not seen before comes here: a
full parse that either returns what the line says or names the column where it goes wrong and
why, in words an operator can act on.

Grammar accepted (the intersection of what ``prometheus_client.parser`` and Prometheus' own
``expfmt`` text parser accept, so a line we accept means the same thing to both)::

    sample   := ws* name ws* labels? ws+ value (ws+ timestamp)? ws*   (ws before value optional
                                                                       after a label block)
    name     := [a-zA-Z_:][a-zA-Z0-9_:]*
    labels   := '{' ws* (label (ws* ',' ws* label)* ws* ','?)? ws* '}'
    label    := lname ws* '=' ws* '"' (char | '\\\\' | '\\"' | '\\n')* '"'
    lname    := [a-zA-Z_][a-zA-Z0-9_]*, not starting with '__' (reserved)
    value    := a decimal float, 'NaN', or [+-]'Inf'/'Infinity' (case-insensitive), in range
    timestamp:= [+-]?[0-9]+ milliseconds, within int64
    comment  := ws* '#' ...; '# HELP name text' and '# TYPE name type' carry metadata
    ws       := ' ' | '\\t'

Differences, each pinned by ``tests/ingest/exposition/test_exposition_conformance.py`` (which runs
prometheus_client and Prometheus' ``promtool`` on the same pages): ``prometheus_client`` also
accepts text after the value and timestamp (``a 1 2 3``), float timestamps, leading or doubled
commas in a label block, unknown escapes (kept literally), signed NaN, overflowing values (read
as infinity), non-ASCII digits, ``{__name__="a"}``, quoted UTF-8 names and OpenMetrics types
(``info``...); Prometheus rejects these and so do we. Prometheus accepts label names starting
with ``__`` and a TYPE line without a type, prometheus_client rejects them and so do we. Blanks
that carry no meaning (CRLF line ends, trailing blanks) are accepted, as prometheus_client does.
Every rejection is per line: the rest of the page is kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_WS = " \t"

NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_LABEL_VALUE_RE = re.compile(r'(?:[^"\\]|\\.)*"')
_GOOD_ESCAPES_RE = re.compile(r'(?:[^\\]|\\[\\"n])*')
_ESCAPE_RE = re.compile(r'\\[\\"n]')
_HELP_ESCAPE_RE = re.compile(r"\\[\\n]")
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}

VALUE_RE = re.compile(
    r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
    r"|[+-]?[iI][nN][fF](?:[iI][nN][iI][tT][yY])?"
    r"|[nN][aA][nN]"
)
TIMESTAMP_RE = re.compile(r"[+-]?[0-9]+")
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_INF = float("inf")

METRIC_TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped"})
_COMMENT_SPLIT_RE = re.compile(r"[ \t\x0b\x0c]+")


@dataclass(frozen=True, slots=True)
class LineError:
    """Why a line was rejected: 1-based column, message, and the metric name when known."""

    column: int
    message: str
    metric: str | None = None


@dataclass(frozen=True, slots=True)
class SampleLine:
    """A parsed sample line.

    ``cache_key`` is the text the fast path will look up next time this series appears (the
    line up to the single space before the value), or None when the line's layout (tabs, a
    doubled space before the timestamp, trailing blanks) means the fast path would not find it.
    """

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    timestamp_ms: int | None
    cache_key: str | None


@dataclass(frozen=True, slots=True)
class MetaLine:
    """A comment line: ``kind`` is ``HELP``, ``TYPE`` or ``comment`` (anything else)."""

    kind: str
    family: str = ""
    text: str = ""


def parse_value(token: str) -> float | None:
    """The float a value token means, or None if Prometheus would not accept it."""
    if VALUE_RE.fullmatch(token) is None:
        return None
    value = float(token)
    if value in (_INF, -_INF) and "n" not in token and "N" not in token:
        return None  # overflow: Prometheus rejects 1e400 rather than reading +Inf
    return value


# In the value tokens of a page joined by spaces: control whitespace, '_' or a letter other
# than the exponent's (empty tokens make float() raise). `re` scans a positive character class
# ~20x faster than a negated one.
_ODD_VALUE_CHAR_RE = re.compile(r"[\t-\r\x1c-\x1f_a-df-zA-DF-Z]")


def fast_values(tokens: list[str]) -> list[float] | None:
    """Floats of plain decimal tokens in C-level passes, or None if any token needs care.

    ``float`` accepts more than the format allows (``1_0``, non-ASCII digits, surrounding
    control whitespace, ``+nan``, ``1e400`` read as infinity), so the page's tokens are first
    screened as one string: any such character, or any letter but an exponent's ``e``, sends
    the page's values through :func:`parse_value` one by one instead.
    """
    joined = " ".join(tokens)
    if not joined.isascii() or _ODD_VALUE_CHAR_RE.search(joined) is not None:
        return None
    try:
        values = list(map(float, tokens))
    except ValueError:
        return None
    total = sum(values)
    if total - total != 0.0:  # an overflow to infinity somewhere (no letters, so no NaN/Inf)
        return None
    return values


def parse_timestamp(token: str) -> int | None:
    """Milliseconds since the epoch from a timestamp token, or None if it is not an int64."""
    if TIMESTAMP_RE.fullmatch(token) is None:
        return None
    stamp = int(token)
    if not _INT64_MIN <= stamp <= _INT64_MAX:
        return None
    return stamp


def _unescape(raw: str) -> str:
    return _ESCAPE_RE.sub(lambda m: _ESCAPES[m.group(0)], raw) if "\\" in raw else raw


def _skip_ws(line: str, pos: int) -> int:
    end = len(line)
    while pos < end and line[pos] in _WS:
        pos += 1
    return pos


def _token_end(line: str, pos: int) -> int:
    end = len(line)
    while pos < end and line[pos] not in _WS:
        pos += 1
    return pos


def _describe_char(char: str) -> str:
    return repr(char) if char.isprintable() else f"U+{ord(char):04X}"


def _parse_labels(line: str, pos: int, name: str) -> tuple[int, list[tuple[str, str]]] | LineError:
    """Parse a label block whose '{' is at ``pos - 1``; return the position after '}'."""
    labels: list[tuple[str, str]] = []
    seen: set[str] = set()
    end = len(line)
    while True:
        pos = _skip_ws(line, pos)
        if pos >= end:
            return LineError(pos + 1, "label block is not closed: missing '}'", name)
        char = line[pos]
        if char == "}":
            return pos + 1, labels
        match = _LABEL_NAME_RE.match(line, pos)
        if match is None:
            if char == ",":
                return LineError(pos + 1, "empty label: a comma with no label before it", name)
            if char == '"':
                return LineError(
                    pos + 1,
                    "quoted (UTF-8) label names are not part of text format 0.0.4",
                    name,
                )
            return LineError(
                pos + 1,
                f"invalid label name starting with {_describe_char(char)}: label names are "
                "letters, digits and '_', not starting with a digit",
                name,
            )
        label = match.group()
        if label.startswith("__"):
            return LineError(
                pos + 1,
                f"label name {label!r} is reserved: names starting with '__' are Prometheus' own",
                name,
            )
        if label in seen:
            return LineError(pos + 1, f"duplicate label name {label!r}", name)
        seen.add(label)
        pos = _skip_ws(line, match.end())
        if pos >= end or line[pos] != "=":
            found = "end of line" if pos >= end else _describe_char(line[pos])
            return LineError(
                pos + 1, f"expected '=' after label name {label!r}, found {found}", name
            )
        pos = _skip_ws(line, pos + 1)
        if pos >= end or line[pos] != '"':
            found = "end of line" if pos >= end else _describe_char(line[pos])
            return LineError(
                pos + 1,
                f"the value of label {label!r} must be in double quotes, found {found}",
                name,
            )
        value_match = _LABEL_VALUE_RE.match(line, pos + 1)
        if value_match is None:
            return LineError(
                pos + 1, f"the value of label {label!r} is not terminated: missing '\"'", name
            )
        raw = line[pos + 1 : value_match.end() - 1]
        if "\\" in raw:
            good = _GOOD_ESCAPES_RE.match(raw)
            bad_at = good.end() if good is not None else 0
            if bad_at != len(raw):
                return LineError(
                    pos + 2 + bad_at,
                    f"invalid escape sequence {raw[bad_at : bad_at + 2]!r} in the value of label "
                    f'{label!r} (allowed: \\\\, \\" and \\n)',
                    name,
                )
        labels.append((label, _unescape(raw)))
        pos = _skip_ws(line, value_match.end())
        if pos < end and line[pos] == ",":
            pos += 1
            continue
        if pos >= end:
            return LineError(pos + 1, "label block is not closed: missing '}'", name)
        if line[pos] == "}":
            return pos + 1, labels
        return LineError(
            pos + 1,
            f"expected ',' or '}}' after the value of label {label!r}, "
            f"found {_describe_char(line[pos])}",
            name,
        )


_QUOTED_BODY = r'[^"\\]*(?:\\[\\"n][^"\\]*)*'  # unrolled: no alternation per character
_LABEL_PAIR = rf'[a-zA-Z_][a-zA-Z0-9_]*="{_QUOTED_BODY}"'
# The layout nearly every exporter writes: no blanks inside the series, one space before the
# value and before the timestamp. Lines it does not match take the character-level path.
_QUICK_LINE_RE = re.compile(
    rf"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{{((?:{_LABEL_PAIR}(?:,{_LABEL_PAIR})*,?)?)\}})? "
    r"([^ \t]+)(?: ([^ \t]+))?"
)
_QUICK_PAIR_RE = re.compile(rf'([a-zA-Z_][a-zA-Z0-9_]*)="({_QUOTED_BODY})"')


Labels = tuple[tuple[str, str], ...]


def _quick_sample(line: str, label_blocks: dict[str, Labels] | None) -> SampleLine | None:
    """The common layout in a few C-level regex calls, or None to take the careful path."""
    match = _QUICK_LINE_RE.fullmatch(line)
    if match is None:
        return None
    name, block, value_token, ts_token = match.groups()
    value = parse_value(value_token)
    if value is None:
        return None
    timestamp = None
    if ts_token is not None:
        timestamp = parse_timestamp(ts_token)
        if timestamp is None:
            return None
    labels: Labels = ()
    if block:
        cached = None if label_blocks is None else label_blocks.get(block)
        if cached is None:
            pairs = _QUICK_PAIR_RE.findall(block)
            if len({label for label, _ in pairs}) != len(pairs):
                return None
            if "__" in block and any(label.startswith("__") for label, _ in pairs):
                return None
            if "\\" in block:
                pairs = [(label, _unescape(raw)) for label, raw in pairs]
            cached = tuple(sorted(pairs))
            if label_blocks is not None:
                label_blocks[block] = cached
        labels = cached
    return SampleLine(name, labels, value, timestamp, line[: match.start(3) - 1])


def parse_sample_line(
    line: str, label_blocks: dict[str, Labels] | None = None
) -> SampleLine | LineError:
    """Parse one sample line (not a comment, not blank).

    Args:
        line: the line, without its line end.
        label_blocks: a cache from label block text (between the braces) to its labels, which
            the caller keeps across lines: a dcgm-exporter page repeats each GPU's block on
            every field.
    """
    quick = _quick_sample(line, label_blocks)
    if quick is not None:
        return quick
    end = len(line)
    pos = _skip_ws(line, 0)
    if line[pos] == "{":
        return LineError(
            pos + 1,
            "missing metric name before '{' (quoted UTF-8 metric names are not part of "
            "text format 0.0.4)",
        )
    match = NAME_RE.match(line, pos)
    if match is None:
        return LineError(
            pos + 1,
            f"invalid metric name starting with {_describe_char(line[pos])}: metric names are "
            "letters, digits, '_' and ':', not starting with a digit",
        )
    name = match.group()
    pos = match.end()
    if pos < end and line[pos] not in _WS and line[pos] != "{":
        return LineError(
            pos + 1, f"invalid character {_describe_char(line[pos])} in metric name", name
        )
    labels: list[tuple[str, str]] = []
    pos = _skip_ws(line, pos)
    if pos < end and line[pos] == "{":
        parsed = _parse_labels(line, pos + 1, name)
        if isinstance(parsed, LineError):
            return parsed
        pos, labels = parsed
    pos = _skip_ws(line, pos)
    if pos >= end:
        return LineError(pos + 1, "missing value after the series", name)
    value_end = _token_end(line, pos)
    value_token = line[pos:value_end]
    value = parse_value(value_token)
    if value is None:
        return LineError(
            pos + 1,
            f"invalid value {value_token!r}: expected a float such as 1, -2.5, 1e-05, NaN or +Inf",
            name,
        )
    value_start = pos
    pos = _skip_ws(line, value_end)
    timestamp: int | None = None
    ts_start = ts_end = -1
    if pos < end:
        ts_end = _token_end(line, pos)
        ts_token = line[pos:ts_end]
        timestamp = parse_timestamp(ts_token)
        if timestamp is None:
            return LineError(
                pos + 1,
                f"invalid timestamp {ts_token!r}: expected integer milliseconds since the epoch",
                name,
            )
        ts_start = pos
        pos = _skip_ws(line, ts_end)
        if pos < end:
            return LineError(pos + 1, "unexpected text after the timestamp", name)
    return SampleLine(
        name=name,
        labels=tuple(sorted(labels)),
        value=value,
        timestamp_ms=timestamp,
        cache_key=_cache_key(line, value_start, value_end, ts_start, ts_end),
    )


def _cache_key(
    line: str, value_start: int, value_end: int, ts_start: int, ts_end: int
) -> str | None:
    """The key under which the fast path will find this series next time, if it can.

    The fast path splits a line at its last space (and, for a timestamped line, the head again
    at its last space), so the key is the text before the single space that precedes the value.
    """
    if line[value_start - 1] != " ":
        return None
    if ts_start < 0:
        return line[: value_start - 1] if value_end == len(line) else None
    if ts_end == len(line) and ts_start == value_end + 1 and line[value_end] == " ":
        return line[: value_start - 1]
    return None


def parse_comment_line(line: str) -> MetaLine | LineError:
    """Parse a line whose first non-blank character is '#'."""
    parts = _COMMENT_SPLIT_RE.split(line.strip(" \t"), maxsplit=3)
    if len(parts) < 2 or parts[0] != "#" or parts[1] not in ("HELP", "TYPE"):
        return MetaLine("comment")
    kind = parts[1]
    column = line.index(kind) + 1
    if len(parts) < 3:
        return LineError(column, f"{kind} line without a metric name")
    family = parts[2]
    column = line.index(family, column + len(kind)) + 1
    if NAME_RE.fullmatch(family) is None:
        return LineError(column, f"invalid metric name {family!r} in {kind} line")
    if kind == "HELP":
        text = parts[3] if len(parts) > 3 else ""
        if "\\" in text:
            text = _HELP_ESCAPE_RE.sub(lambda m: _ESCAPES[m.group(0)], text)
        return MetaLine("HELP", family, text)
    if len(parts) < 4:
        return LineError(len(line.rstrip(" \t")) + 1, "TYPE line without a type", family)
    metric_type = parts[3]
    if metric_type not in METRIC_TYPES:
        return LineError(
            line.index(metric_type, column + len(family)) + 1,
            f"unknown metric type {metric_type!r}: expected counter, gauge, histogram, "
            "summary or untyped",
            family,
        )
    return MetaLine("TYPE", family, metric_type)
