"""A rank's trace reduction as a small, versioned, serialisable summary.

A summary is computed where the trace is written (in the job's epilog, or a step of the job:
``hpcscope traces summarize``) and shipped instead of the trace: the 54 MB ``df_index_resolver``
rank becomes a few tens of KB. A central merge (:func:`to_timeline` on every rank's summary, then
the same cross-rank attribution as for raw traces) gives exactly the answer of analysing the raw
traces, because the summary holds every field of the
:class:`~hpcscope.analysis.traces.rank_timeline.RankTimeline` and float64 arrays travel as their
IEEE bytes (no decimal rounding).

Why intervals and not phase seconds: a rank's per-step phase times depend on when the *other*
ranks reached each collective (the barrier wait is the time until the last arrival), so they can
only be computed once every rank is known. Each rank therefore ships, per step window: the CPU
phase regions, GPU compute by the phase that launched it (kernel classes), CPU busy time, and
every collective instance (step, type and process group, ordinal, start, end), plus its per-step
GC and launch-gap seconds and its GPU time breakdown. The format, its version and the
compatibility rule are in ``docs/traces.md``.

Encoding: MessagePack (msgspec), a map with a ``schema`` field first; arrays are little-endian
``float64``/``int64`` bytes.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from hpcscope.analysis.traces.comm_timeline import CommTimeline
from hpcscope.analysis.traces.gpu_breakdown import GpuBreakdown
from hpcscope.analysis.traces.intervals import Intervals
from hpcscope.analysis.traces.rank_timeline import RankTimeline
from hpcscope.model.errors import SourceError

#: Version of the summary format; a reader accepts only the versions it knows.
SUMMARY_SCHEMA = "hpcscope.traces.rank-summary/1"

_F64 = np.dtype("<f8")
_I64 = np.dtype("<i8")


class IntervalBytes(msgspec.Struct, frozen=True, array_like=True):
    """Merged intervals (µs): ``start`` and ``end`` as little-endian float64 bytes."""

    start: bytes
    end: bytes


class GpuTime(msgspec.Struct, frozen=True):
    """The rank's GPU time breakdown (HTA-compatible), seconds."""

    kernel_seconds: float
    idle_seconds: float
    compute_seconds: float
    non_compute_seconds: float


class CommBytes(msgspec.Struct, frozen=True):
    """The rank's events by communication class (:class:`CommTimeline`)."""

    classes: dict[str, IntervalBytes]
    bubble: IntervalBytes
    compute: IntervalBytes
    unclassified: dict[str, float]
    transfers: int
    #: ``[step, 2]`` GPU step windows (µs) as little-endian float64 bytes, start and end
    #: interleaved; empty on a CPU rank (and in summaries written before the field existed,
    #: which the reader takes as the CPU windows).
    step_windows_us: bytes = b""


class RankSummary(msgspec.Struct, frozen=True):
    """One rank's summary over the steps (window) its trace covers.

    Attributes mirror :class:`~hpcscope.analysis.traces.rank_timeline.RankTimeline`; arrays
    are bytes (``*_us`` float64 µs, ``collective_step/key/ordinal`` int64, per-step seconds
    float64), one entry per step or per collective instance.
    """

    schema: str
    rank: int
    source: str
    world_size: int | None
    backend: str | None
    has_gpu: bool
    steps: tuple[int, ...]
    step_start_us: bytes
    step_end_us: bytes
    regions: dict[str, IntervalBytes]
    gpu_compute: dict[str, IntervalBytes]
    cpu_busy: dict[str, IntervalBytes]
    collective_step: bytes
    collective_key: bytes
    collective_ordinal: bytes
    collective_start_us: bytes
    collective_end_us: bytes
    collective_keys: tuple[str, ...]
    gpu: GpuTime | None
    problems: tuple[str, ...]
    markers: tuple[str, ...]
    events: int
    bytes_read: int
    device: str | None
    host: str | None
    gc_seconds: bytes
    launch_gap_seconds: bytes
    gpu_index: int | None
    epoch_offset_us: float | None
    comm: CommBytes | None = None


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(RankSummary)


def _f64(values: npt.NDArray[Any]) -> bytes:
    return np.ascontiguousarray(values, dtype=_F64).tobytes()


def _i64(values: npt.NDArray[Any]) -> bytes:
    return np.ascontiguousarray(values, dtype=_I64).tobytes()


def _intervals(sets: dict[str, Intervals]) -> dict[str, IntervalBytes]:
    return {name: IntervalBytes(_f64(iv.start), _f64(iv.end)) for name, iv in sets.items()}


def summarize(timeline: RankTimeline) -> RankSummary:
    """The summary of one rank's reduction (:func:`~hpcscope.analysis.traces.rank_timeline.
    rank_timeline`)."""
    tl = timeline
    gpu = tl.gpu
    return RankSummary(
        schema=SUMMARY_SCHEMA,
        rank=tl.rank,
        source=tl.source,
        world_size=tl.world_size,
        backend=tl.backend,
        has_gpu=tl.has_gpu,
        steps=tuple(tl.steps),
        step_start_us=_f64(tl.step_start_us),
        step_end_us=_f64(tl.step_end_us),
        regions=_intervals(tl.regions),
        gpu_compute=_intervals(tl.gpu_compute),
        cpu_busy=_intervals(tl.cpu_busy),
        collective_step=_i64(tl.collective_step),
        collective_key=_i64(tl.collective_key),
        collective_ordinal=_i64(tl.collective_ordinal),
        collective_start_us=_f64(tl.collective_start_us),
        collective_end_us=_f64(tl.collective_end_us),
        collective_keys=tuple(tl.collective_keys),
        gpu=None
        if gpu is None
        else GpuTime(
            gpu.kernel_seconds, gpu.idle_seconds, gpu.compute_seconds, gpu.non_compute_seconds
        ),
        problems=tuple(tl.problems),
        markers=tuple(tl.markers),
        events=tl.events,
        bytes_read=tl.bytes_read,
        device=tl.device,
        host=tl.host,
        gc_seconds=_f64(tl.gc_seconds),
        launch_gap_seconds=_f64(tl.launch_gap_seconds),
        gpu_index=tl.gpu_index,
        epoch_offset_us=tl.epoch_offset_us,
        comm=None if tl.comm is None else _comm_bytes(tl.comm),
    )


def _comm_bytes(comm: CommTimeline) -> CommBytes:
    sets = _intervals({**comm.classes, "": comm.bubble, " ": comm.compute})
    return CommBytes(
        classes={k: v for k, v in sets.items() if k.strip()},
        bubble=sets[""],
        compute=sets[" "],
        unclassified=dict(comm.unclassified),
        transfers=comm.transfers,
        step_windows_us=b""
        if comm.step_windows_us is None
        else _f64(comm.step_windows_us.reshape(-1)),
    )


def _comm(comm: CommBytes | None, where: str) -> CommTimeline | None:
    if comm is None:
        return None
    sets = _interval_sets({**comm.classes, "": comm.bubble, " ": comm.compute}, "comm", where)
    windows = None
    if comm.step_windows_us:
        flat = _array(comm.step_windows_us, _F64, "comm.step_windows_us", where)
        if flat.shape[0] % 2:
            raise SourceError(
                "summary field comm.step_windows_us: an odd number of values", source=where
            )
        windows = flat.reshape(-1, 2)
    return CommTimeline(
        classes={k: v for k, v in sets.items() if k.strip()},
        bubble=sets[""],
        compute=sets[" "],
        unclassified=dict(comm.unclassified),
        transfers=comm.transfers,
        step_windows_us=windows,
    )


def _array(data: bytes, dtype: np.dtype[Any], field: str, source: str) -> npt.NDArray[Any]:
    if len(data) % dtype.itemsize:
        raise SourceError(
            f"summary field {field}: {len(data)} bytes is not whole numbers", source=source
        )
    return np.frombuffer(data, dtype=dtype).astype(dtype.newbyteorder("="))


def _interval_sets(sets: dict[str, IntervalBytes], field: str, source: str) -> dict[str, Intervals]:
    out: dict[str, Intervals] = {}
    for name, iv in sets.items():
        start = _array(iv.start, _F64, f"{field}.{name}", source)
        end = _array(iv.end, _F64, f"{field}.{name}", source)
        if start.shape != end.shape:
            raise SourceError(
                f"summary field {field}.{name}: starts and ends differ in number", source=source
            )
        out[name] = Intervals(start, end)
    return out


def to_timeline(summary: RankSummary, *, source: str | None = None) -> RankTimeline:
    """The rank's reduction back, exactly as :func:`summarize` got it.

    Raises:
        SourceError: arrays of inconsistent lengths (naming the field and ``source``).
    """
    s = summary
    where = source or s.source
    steps = len(s.steps)
    arrays = {
        "step_start_us": _array(s.step_start_us, _F64, "step_start_us", where),
        "step_end_us": _array(s.step_end_us, _F64, "step_end_us", where),
        "collective_step": _array(s.collective_step, _I64, "collective_step", where),
        "collective_key": _array(s.collective_key, _I64, "collective_key", where),
        "collective_ordinal": _array(s.collective_ordinal, _I64, "collective_ordinal", where),
        "collective_start_us": _array(s.collective_start_us, _F64, "collective_start_us", where),
        "collective_end_us": _array(s.collective_end_us, _F64, "collective_end_us", where),
    }
    for name in ("step_start_us", "step_end_us"):
        if arrays[name].shape[0] != steps:
            raise SourceError(
                f"summary field {name}: {arrays[name].shape[0]} values for {steps} steps",
                source=where,
            )
    instances = arrays["collective_step"].shape[0]
    for name, values in arrays.items():
        if name.startswith("collective_") and values.shape[0] != instances:
            raise SourceError(
                f"summary field {name}: {values.shape[0]} values for {instances} collectives",
                source=where,
            )
    gpu = s.gpu
    return RankTimeline(
        rank=s.rank,
        source=s.source,
        world_size=s.world_size,
        backend=s.backend,
        has_gpu=s.has_gpu,
        steps=tuple(s.steps),
        regions=_interval_sets(s.regions, "regions", where),
        gpu_compute=_interval_sets(s.gpu_compute, "gpu_compute", where),
        cpu_busy=_interval_sets(s.cpu_busy, "cpu_busy", where),
        collective_keys=tuple(s.collective_keys),
        gpu=None
        if gpu is None
        else GpuBreakdown(
            gpu.kernel_seconds, gpu.idle_seconds, gpu.compute_seconds, gpu.non_compute_seconds
        ),
        problems=tuple(s.problems),
        markers=tuple(s.markers),
        events=s.events,
        bytes_read=s.bytes_read,
        device=s.device,
        host=s.host,
        gc_seconds=_array(s.gc_seconds, _F64, "gc_seconds", where),
        launch_gap_seconds=_array(s.launch_gap_seconds, _F64, "launch_gap_seconds", where),
        gpu_index=s.gpu_index,
        epoch_offset_us=s.epoch_offset_us,
        comm=_comm(s.comm, where),
        **arrays,
    )


def encode_summary(summary: RankSummary) -> bytes:
    """The summary as MessagePack bytes (what ``hpcscope traces summarize`` writes)."""
    return _ENCODER.encode(summary)


def decode_summary(data: bytes, *, source: str) -> RankSummary:
    """Read a summary written by :func:`encode_summary`.

    Raises:
        SourceError: not a summary, an unknown ``schema`` version, or a field of the wrong
            type (msgspec's message names it as ``$.field``), naming ``source``.
    """
    try:
        summary = _DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        try:
            head = msgspec.msgpack.decode(data, type=dict[str, object])
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise SourceError("not an hpcscope trace summary", source=source) from None
        if head.get("schema") != SUMMARY_SCHEMA:
            raise _version_error(head.get("schema"), source) from None
        raise SourceError(f"invalid trace summary: {exc}", source=source) from None
    if summary.schema != SUMMARY_SCHEMA:
        raise _version_error(summary.schema, source)
    return summary


def _version_error(schema: object, source: str) -> SourceError:
    return SourceError(
        f"summary schema {schema!r} is not {SUMMARY_SCHEMA!r} (written by another hpcscope "
        "version: summarize the trace again)",
        source=source,
    )
