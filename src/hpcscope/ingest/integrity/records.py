"""Parse the integrity hook's JSON lines (format ``hpcscope-integrity/1``).

One line per rank and step (:mod:`hpcscope.model.integrity`). The lines are written by the
training process, so everything is checked: types, sizes (every sketch has ``sketch_dim``
floats), ranges. A bad line is reported with its file and line and skipped; the good lines
around it are kept (:class:`RecordsParse`). JSON has no NaN or infinity: a null norm reads as
infinite and a null sketch entry as NaN (what the hook's encoder writes for them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from hpcscope.model.bounds import loads_json
from hpcscope.model.errors import SourceError
from hpcscope.model.integrity import FORMAT, BucketReport, IntegrityRecord, ReducedSlice


class IntegrityRecordError(SourceError):
    """An integrity record line that cannot be used."""


@dataclass
class RecordsParse:
    """What a batch of lines gave: the records, and an error per rejected line."""

    records: list[IntegrityRecord] = field(default_factory=list)
    errors: list[IntegrityRecordError] = field(default_factory=list)


def _int(raw: Mapping[str, object], name: str, *, minimum: int = 0) -> int:
    value = raw.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return value


def _str(raw: Mapping[str, object], name: str) -> str:
    value = raw.get(name)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name}: expected a non-empty string, got {value!r}")
    return value


def _floats(
    raw: Mapping[str, object], name: str, size: int
) -> np.ndarray[Any, np.dtype[np.float64]]:
    value = raw.get(name)
    if not isinstance(value, list) or len(value) != size:
        got = len(value) if isinstance(value, list) else type(value).__name__
        raise ValueError(f"{name}: expected {size} numbers, got {got}")
    try:
        return np.array(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: not all numbers") from None


def _bucket(raw: Any, k: int) -> BucketReport:
    if not isinstance(raw, dict):
        raise ValueError("buckets: each bucket must be an object")
    if "norm" not in raw:
        raise ValueError("norm: missing")
    norm = raw["norm"]
    if norm is None:  # NaN/Inf: JSON has no such numbers, the hook's encoder writes null
        norm = float("inf")
    if isinstance(norm, bool) or not isinstance(norm, (int, float)):
        raise ValueError(f"norm: expected a number, got {norm!r}")
    if not math.isnan(norm) and norm < 0:
        raise ValueError(f"norm: negative ({norm})")
    return BucketReport(
        index=_int(raw, "index"),
        numel=_int(raw, "numel", minimum=1),
        norm=float(norm),
        nonfinite=_int(raw, "nonfinite"),
        sketch=_floats(raw, "sketch", k),
        reduced=_reduced(raw, k),
    )


def _reduced(raw: Mapping[str, object], k: int) -> tuple[ReducedSlice, ...]:
    """``reduced_sketch`` (the whole bucket: slice 0 of 1) or ``reduced_slices``."""
    whole = raw.get("reduced_sketch")
    slices = raw.get("reduced_slices")
    if whole is not None and slices is not None:
        raise ValueError("reduced_sketch and reduced_slices: give one, not both")
    if whole is not None:
        return (ReducedSlice(0, 1, _floats(raw, "reduced_sketch", k)),)
    if slices is None:
        return ()
    if not isinstance(slices, list):
        raise ValueError("reduced_slices: expected a list")
    out: list[ReducedSlice] = []
    for position, item in enumerate(slices):
        if not isinstance(item, dict):
            raise ValueError(f"reduced_slices[{position}]: expected an object")
        of = _int(item, "of", minimum=1)
        index = _int(item, "slice")
        if index >= of:
            raise ValueError(f"reduced_slices[{position}]: slice {index} of {of}")
        if any(part.slice == index for part in out):
            raise ValueError(f"reduced_slices[{position}]: slice {index} twice")
        out.append(ReducedSlice(index, of, _floats(item, "sketch", k)))
    return tuple(out)


def parse_record(line: str | bytes, *, source: str, line_number: int) -> IntegrityRecord:
    """One line as a record.

    Raises:
        IntegrityRecordError: not JSON, another format, or a field that does not fit; the
            message names the file, the line and the field.
    """
    try:
        raw = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        try:  # the standard library's NaN / Infinity literals (a hook without orjson)
            raw = loads_json(line, source=source)
        except ValueError:
            raise IntegrityRecordError(
                f"not JSON: {exc}", source=source, line=line_number
            ) from None
    if not isinstance(raw, dict):
        raise IntegrityRecordError(
            "a record must be a JSON object", source=source, line=line_number
        )
    if raw.get("format") != FORMAT:
        raise IntegrityRecordError(
            f"format {raw.get('format')!r} is not {FORMAT!r}",
            source=source,
            line=line_number,
            field="format",
        )
    try:
        k = _int(raw, "sketch_dim", minimum=1)
        buckets = raw.get("buckets")
        if not isinstance(buckets, list) or not buckets:
            raise ValueError("buckets: expected a non-empty list")
        gpu = raw.get("gpu")
        if gpu is not None and (isinstance(gpu, bool) or not isinstance(gpu, int) or gpu < 0):
            raise ValueError(f"gpu: expected an integer >= 0 or null, got {gpu!r}")
        checksum = raw.get("param_checksum")
        if checksum is not None and not isinstance(checksum, str):
            raise ValueError(f"param_checksum: expected a string or null, got {checksum!r}")
        ts = raw.get("ts")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
            raise ValueError(f"ts: expected epoch seconds, got {ts!r}")
        world = _int(raw, "world_size", minimum=1)
        rank = _int(raw, "rank")
        if rank >= world:
            raise ValueError(f"rank: {rank} is not below world_size {world}")
        parsed = tuple(_bucket(b, k) for b in buckets)
        if len({b.index for b in parsed}) != len(parsed):
            raise ValueError("buckets: an index appears twice")
        return IntegrityRecord(
            job_id=_str(raw, "job_id"),
            node=_str(raw, "node"),
            gpu=gpu,
            rank=rank,
            world_size=world,
            step=_int(raw, "step"),
            ts=float(ts),
            sketch_dim=k,
            seed=_int(raw, "seed"),
            buckets=parsed,
            param_checksum=checksum,
            source=source,
            line=line_number,
        )
    except ValueError as exc:
        name, _, message = str(exc).partition(": ")
        raise IntegrityRecordError(
            message or name, source=source, line=line_number, field=name if message else None
        ) from None


def parse_lines(lines: Iterable[tuple[int, str | bytes]], *, source: str) -> RecordsParse:
    """Parse ``(line number, text)`` pairs; blank lines are skipped, bad ones reported."""
    result = RecordsParse()
    for number, text in lines:
        if not text.strip():
            continue
        try:
            result.records.append(parse_record(text, source=source, line_number=number))
        except IntegrityRecordError as exc:
            result.errors.append(exc)
    return result
