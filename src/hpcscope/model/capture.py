"""Trace capture through the golden path: the spool files a job's ranks write.

With capture switched on by the site (the Slurm TaskProlog, ``deploy/slurm/prolog``), every
rank of a PyTorch job profiles a few steps now and then (:mod:`hpcscope.capture`) and writes,
per capture window, into ``<capture spool>/<job>/``:

* ``rank-00003.window-00000000.pt.trace.json``: the real Kineto trace of its window (Chrome
  trace JSON as ``torch.profiler`` exports it), ``ProfilerStep#N`` numbered by the job's
  global optimizer step so that the ranks' steps line up;
* ``rank-00003.window-00000000.meta.json``: one JSON object (:class:`CaptureMeta`) that says
  what the rank *claims*: job, node, GPU, rank, world size, window, steps and times.

plus, through the environment the TaskProlog sets, NCCL's own ``NCCL_DEBUG_FILE`` logs
(``nccl-<host>-<pid>.log``) and the PyTorch NCCL flight-recorder dumps
(``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``: ``flight-recorder-rank-<rank>``). The meta is written
after the trace: a window's rank is complete once its meta exists. Everything in the spool
is written by the job and **untrusted**: the collector re-derives job, node and GPU from the
platform's allocations before it attributes anything.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from hpcscope.model.bounds import loads_json
from hpcscope.model.errors import ConfigError, SourceError

FORMAT = "hpcscope-capture/1"

#: ``rank-00003.window-00000000`` (rank and window, zero-padded so names sort).
_STEM = "rank-{rank:05d}.window-{window:08d}"
TRACE_SUFFIX = ".pt.trace.json"
META_SUFFIX = ".meta.json"
META_PATTERN = re.compile(r"^rank-(\d+)\.window-(\d+)\.meta\.json$")
NCCL_LOG_PATTERN = "nccl-*.log"
FLIGHT_RECORDER_PREFIX = "flight-recorder-rank-"

#: Environment the TaskProlog exports and :mod:`hpcscope.capture` reads.
ENV_ENABLE = "HPCSCOPE_CAPTURE"
ENV_SPOOL = "HPCSCOPE_CAPTURE_SPOOL"
ENV_SCHEDULE = "HPCSCOPE_CAPTURE_SCHEDULE"
ENV_EVERY_SECONDS = "HPCSCOPE_CAPTURE_EVERY_SECONDS"
ENV_FIRST_STEP = "HPCSCOPE_CAPTURE_FIRST_STEP"

#: Defaults: 3 steps waited, 1 warm-up step, 4 steps recorded; first window at step 20 (past
#: the start-up), then one every 10 minutes.
DEFAULT_SCHEDULE = (3, 1, 4)
DEFAULT_EVERY_SECONDS = 600.0
DEFAULT_FIRST_STEP = 20


def trace_name(rank: int, window: int) -> str:
    """The trace file of ``rank`` in ``window``."""
    return _STEM.format(rank=rank, window=window) + TRACE_SUFFIX


def meta_name(rank: int, window: int) -> str:
    """The meta file of ``rank`` in ``window``."""
    return _STEM.format(rank=rank, window=window) + META_SUFFIX


class CaptureMetaError(SourceError):
    """A capture meta file that is not JSON, not this format, or has a bad field."""


def parse_schedule(raw: str, *, source: str = ENV_SCHEDULE) -> tuple[int, int, int]:
    """``"3,1,4"`` -> (wait, warmup, active) steps.

    Raises:
        ConfigError: not three non-negative integers with ``active >= 1`` (a ValueError),
            naming ``source`` (the variable or config key).
    """
    parts = [p.strip() for p in raw.split(",")]
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ConfigError(f"{raw!r}: want wait,warmup,active (three integers)", source=source)
    wait, warmup, active = (int(p) for p in parts)
    if active < 1:
        raise ConfigError(f"{raw!r}: active must be at least 1 step", source=source)
    return wait, warmup, active


@dataclass(frozen=True, slots=True)
class CaptureMeta:
    """What one rank says about its window (claims, checked by the collector).

    Attributes:
        job_id: ``SLURM_JOB_ID`` as the rank saw it.
        node: ``SLURMD_NODENAME`` or the short host name.
        gpu: ``CUDA_VISIBLE_DEVICES[LOCAL_RANK]`` when a number, else the local rank, else None.
        rank / world_size / local_rank: from ``torch.distributed`` or the launcher's env.
        window: 0 for the first window, then the index of the ``every_seconds`` slot of the
            Unix clock the window opened in (ranks in step agree on it).
        first_step / last_step: the recorded (active) optimizer steps.
        start_ts / end_ts: Unix seconds when the window's recording began and when the trace
            was written.
        trace: the trace file's name in the same directory.
        schedule: (wait, warmup, active) steps.
    """

    job_id: str
    node: str
    gpu: int | None
    rank: int
    world_size: int
    local_rank: int | None
    window: int
    first_step: int
    last_step: int
    start_ts: float
    end_ts: float
    trace: str
    schedule: tuple[int, int, int]
    format: str = FORMAT

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, *, source: str = "meta") -> CaptureMeta:
        """Parse one meta file.

        Raises:
            CaptureMetaError: not JSON, another format, or a field missing or of the wrong
                type (a ValueError), naming ``source`` and the field.
        """
        try:
            data: Any = loads_json(text, source=source)
        except ValueError as exc:
            raise CaptureMetaError(f"not JSON: {exc}", source=source) from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise CaptureMetaError(f"not a {FORMAT} object", source=source, field="format")
        name = "schedule"
        try:
            schedule = tuple(int(x) for x in data["schedule"])
            if len(schedule) != 3:
                raise ValueError("want three integers")
            # the meta file's fields, each converted by its kind (_FIELDS), as keyword arguments
            values: dict[str, Any] = {}
            for name, kind in _FIELDS:
                raw = data[name]
                values[name] = None if raw is None and name in _OPTIONAL else kind(raw)
            return cls(**values, schedule=(schedule[0], schedule[1], schedule[2]))
        except KeyError as exc:
            raise CaptureMetaError(
                f"missing field {exc.args[0]!r}", source=source, field=str(exc.args[0])
            ) from None
        except (TypeError, ValueError) as exc:
            raise CaptureMetaError(f"bad value: {exc}", source=source, field=name) from None


_FIELDS: tuple[tuple[str, Any], ...] = (
    ("job_id", str), ("node", str), ("gpu", int), ("rank", int), ("world_size", int),
    ("local_rank", int), ("window", int), ("first_step", int), ("last_step", int),
    ("start_ts", float), ("end_ts", float), ("trace", str),
)  # fmt: skip
_OPTIONAL = frozenset({"gpu", "local_rank"})


@dataclass(frozen=True, slots=True)
class StoredCapture:
    """One row of ``trace_captures``: a job's capture window once analysed (see
    :mod:`hpcscope.store.capture_ddl` for what ``job_id``, ``claimed_job_id`` and
    ``attribution`` mean). ``delay_seconds_per_step`` is the straggler's excess over the
    median rank, ``what_if_gain_seconds_per_step`` the step time saved if it were not slow."""

    job_id: str
    capture_window: int
    claimed_job_id: str
    updated: datetime
    window_start: datetime | None
    window_end: datetime | None
    ranks: int
    world_size: int
    steps: int
    nodes: tuple[str, ...]
    attribution: str
    straggler_rank: int | None
    straggler_phase: str | None
    straggler_node: str | None
    straggler_gpu: int | None
    delay_seconds_per_step: float | None
    what_if_gain_seconds_per_step: float | None
    notes: tuple[str, ...]
    result_json: str
