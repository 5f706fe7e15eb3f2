"""Parse the training recorder's JSON lines (format ``hpcscope-training/1``).

The lines (:mod:`hpcscope.model.training_events`) are written by the training process, so
every field is checked (types, ranges, finite losses). A bad line is an error naming its file
and line and is skipped; the good lines around it are kept.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, overload

import orjson

from hpcscope.model.errors import SourceError
from hpcscope.model.training_events import FORMAT, KINDS, TrainingEvent


class TrainingEventError(SourceError):
    """A training-event line that cannot be used."""


class _Common(TypedDict):
    """The fields every kind of event has (:class:`TrainingEvent`'s)."""

    kind: str
    job_id: str
    node: str
    gpu: int | None
    rank: int
    pid: int | None
    ts: float
    source: str
    line: int


@dataclass
class EventsParse:
    """What a batch of lines gave: the events, and an error per rejected line."""

    events: list[TrainingEvent] = field(default_factory=list)
    errors: list[TrainingEventError] = field(default_factory=list)


@overload
def _int(raw: Mapping[str, object], name: str, *, optional: Literal[False] = False) -> int: ...
@overload
def _int(raw: Mapping[str, object], name: str, *, optional: bool) -> int | None: ...
def _int(raw: Mapping[str, object], name: str, *, optional: bool = False) -> int | None:
    value = raw.get(name)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name}: expected an integer >= 0, got {value!r}")
    return value


@overload
def _str(raw: Mapping[str, object], name: str, *, optional: Literal[False] = False) -> str: ...
@overload
def _str(raw: Mapping[str, object], name: str, *, optional: bool) -> str | None: ...
def _str(raw: Mapping[str, object], name: str, *, optional: bool = False) -> str | None:
    value = raw.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name}: expected a non-empty string, got {value!r}")
    return value


def _shards(raw: Any) -> dict[str, tuple[float, int]]:
    if not isinstance(raw, dict) or not raw:
        raise ValueError("shards: expected an object of shard -> [mean loss, batches]")
    out: dict[str, tuple[float, int]] = {}
    for shard, pair in raw.items():
        ok = isinstance(pair, list) and len(pair) == 2
        loss, batches = (pair[0], pair[1]) if ok else (None, None)
        if (not ok or isinstance(loss, bool) or not isinstance(loss, (int, float))
                or not math.isfinite(loss) or isinstance(batches, bool)
                or not isinstance(batches, int) or batches < 1):  # fmt: skip
            raise ValueError(f"shards: {shard!r}: expected [finite mean loss, batches >= 1]")
        out[str(shard)] = (float(loss), batches)
    return out


def parse_event(raw: Any, *, source: str, line: int) -> TrainingEvent:
    """One decoded line as an event.

    Raises:
        ValueError: a field that is missing or of the wrong type (the message names it).
    """
    if not isinstance(raw, dict):
        raise ValueError("expected a JSON object")
    if raw.get("format") != FORMAT:
        raise ValueError(f"format: expected {FORMAT!r}, got {raw.get('format')!r}")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    ts = raw.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not 0 < ts < 1e11:
        raise ValueError(f"ts: expected seconds since the epoch, got {ts!r}")
    common: _Common = {
        "kind": kind, "job_id": _str(raw, "job_id"), "node": _str(raw, "node"),
        "gpu": _int(raw, "gpu", optional=True), "rank": _int(raw, "rank"),
        "pid": _int(raw, "pid", optional=True), "ts": float(ts), "source": source, "line": line,
    }  # fmt: skip
    if kind == "load":
        weights_only = raw.get("weights_only")
        if not isinstance(weights_only, bool):
            raise ValueError(f"weights_only: expected true or false, got {weights_only!r}")
        return TrainingEvent(**common, path=_str(raw, "path"), weights_only=weights_only,
                             owner=_str(raw, "owner", optional=True))  # fmt: skip
    return TrainingEvent(**common, window=_int(raw, "window"), shards=_shards(raw.get("shards")))


def parse_event_lines(lines: Iterable[tuple[int, bytes]], *, source: str) -> EventsParse:
    """Parse ``(line number, bytes)`` pairs; bad lines become errors (file and line named)."""
    out = EventsParse()
    for number, text in lines:
        if not text.strip():
            continue
        try:
            raw = orjson.loads(text)
            out.events.append(parse_event(raw, source=source, line=number))
        except (orjson.JSONDecodeError, ValueError) as exc:
            out.errors.append(TrainingEventError(str(exc), source=source, line=number))
    return out
