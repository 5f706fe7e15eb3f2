"""When to profile, and what to write: the capture's state machine, driven by optimizer steps.

A global ``torch.optim`` step post-hook (:func:`torch.optim.optimizer.
register_optimizer_step_post_hook`) calls :meth:`Capture.on_step` after every optimizer step of
the process: that is the training step's end, whatever the script looks like, so the capture
needs no change to it. Only the first optimizer that steps is counted (a second one, a GAN's
discriminator say, would otherwise count each step twice).

Windows: the first opens after ``first_step`` steps (past the start-up), the next ones at the
first step that ends in a new ``every_seconds`` slot of the Unix clock (ranks step together,
so they open the same window at the same step; node clocks are NTP-close). A window runs
``torch.profiler`` over ``wait + warmup + active`` steps with the profiler's step numbers set
to the job's global step, so ``ProfilerStep#N`` means the same step on every rank and the
central analysis matches them. The trace is written by Kineto's own exporter
(``export_chrome_trace``) to a temporary name and renamed; then the meta file
(:class:`hpcscope.model.capture.CaptureMeta`). Between windows the hook costs one counter
increment and one clock read per step.

Any failure inside the capture switches it off for the process (one line on stderr): the
training must never fail because of hpcscope.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpcscope.model.capture import (
    DEFAULT_EVERY_SECONDS,
    DEFAULT_FIRST_STEP,
    DEFAULT_SCHEDULE,
    ENV_ENABLE,
    ENV_EVERY_SECONDS,
    ENV_FIRST_STEP,
    ENV_SCHEDULE,
    ENV_SPOOL,
    CaptureMeta,
    meta_name,
    parse_schedule,
    trace_name,
)
from hpcscope.model.errors import ConfigError

DEFAULT_SPOOL = "/run/hpcscope/capture"


@dataclass(frozen=True, slots=True)
class CaptureSettings:
    """What to capture and where (from the environment the TaskProlog sets)."""

    spool: Path
    job_id: str
    schedule: tuple[int, int, int] = DEFAULT_SCHEDULE
    every_seconds: float = DEFAULT_EVERY_SECONDS
    first_step: int = DEFAULT_FIRST_STEP

    @property
    def job_dir(self) -> Path:
        return self.spool / self.job_id

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> CaptureSettings | None:
        """The settings, or None when ``HPCSCOPE_CAPTURE`` is not 1.

        Raises:
            ConfigError: a malformed setting, naming the variable (a ValueError).
        """
        env = os.environ if environ is None else environ
        if env.get(ENV_ENABLE, "").strip().lower() not in ("1", "true", "yes"):
            return None
        job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or "local"
        schedule = parse_schedule(env[ENV_SCHEDULE]) if env.get(ENV_SCHEDULE) else DEFAULT_SCHEDULE
        every = _number(env, ENV_EVERY_SECONDS, DEFAULT_EVERY_SECONDS)
        if not every > 0:
            raise ConfigError(f"{every:g}: must be > 0 seconds", source=ENV_EVERY_SECONDS)
        first_raw = _number(env, ENV_FIRST_STEP, DEFAULT_FIRST_STEP)
        first = int(first_raw)
        if first < 0 or first != first_raw:
            raise ConfigError(f"{first_raw:g}: must be an integer >= 0", source=ENV_FIRST_STEP)
        return cls(
            spool=Path(env.get(ENV_SPOOL) or DEFAULT_SPOOL),
            job_id=job,
            schedule=schedule,
            every_seconds=every,
            first_step=first,
        )


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    try:
        return float(raw) if raw else default
    except ValueError:
        raise ConfigError(f"{raw!r}: not a number", source=name) from None


def _int_env(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw.isdigit() else None


def _claimed_gpu(local_rank: int | None) -> int | None:
    if local_rank is None:
        return None
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v]
    if local_rank < len(visible) and visible[local_rank].isdigit():
        return int(visible[local_rank])
    return local_rank


def _rank_and_world() -> tuple[int, int]:
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    return _int_env("RANK") or 0, _int_env("WORLD_SIZE") or 1


class Capture:
    """The per-process capture: call :meth:`on_step` after every optimizer step.

    Args:
        settings: schedule and spool.
        clock: Unix seconds (tests pass a fake).
        profiler: ``(schedule_fn, on_trace_ready) -> profiler`` with ``start``, ``step``,
            ``stop``, ``step_num`` and ``export_chrome_trace`` (default: ``torch.profiler.
            profile`` of CPU activity, plus CUDA when the process has a GPU).
    """

    def __init__(
        self,
        settings: CaptureSettings,
        *,
        clock: Callable[[], float] = time.time,
        profiler: Callable[[Callable[[int], Any], Callable[[Any], None]], Any] | None = None,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._make_profiler = profiler or _torch_profiler
        self.steps = 0
        self.windows_written = 0
        self.disabled = False
        self._optimizer: int | None = None
        self._profiler: Any = None
        self._window = 0
        self._base = 0
        self._start_ts = 0.0
        self._last_slot: int | None = None
        self._done = False  # the open window's trace was written

    # ------------------------------------------------------------------ the hook

    def on_step(self, optimizer: object, *_: object) -> None:
        """The global optimizer step post-hook (``(optimizer, args, kwargs)``)."""
        if self.disabled:
            return
        if self._optimizer is None:
            self._optimizer = id(optimizer)
        elif id(optimizer) != self._optimizer:
            return
        self.steps += 1
        try:
            if self._profiler is not None:
                self._advance()
            else:
                window = self._due()
                if window is not None:
                    self._open(window)
        except Exception as exc:  # never fail the training
            self.disabled = True
            self._profiler = None
            sys.stderr.write(f"hpcscope.capture: disabled after an error: {exc!r}\n")

    def _due(self) -> int | None:
        """The window to open now, or None. Window 0: after ``first_step`` steps; then one
        per ``every_seconds`` slot of the clock (its index is the window's number)."""
        if self.windows_written == 0 and self._last_slot is None:
            if self.steps >= self.settings.first_step:
                self._last_slot = math.floor(self._clock() / self.settings.every_seconds)
                return 0
            return None
        slot = math.floor(self._clock() / self.settings.every_seconds)
        if self._last_slot is not None and slot > self._last_slot:
            self._last_slot = slot
            return slot
        return None

    # ------------------------------------------------------------------ one window

    def _action(self, step: int) -> Any:
        from torch.profiler import ProfilerAction

        wait, warmup, active = self.settings.schedule
        offset = step - self._base
        if offset < wait or offset >= wait + warmup + active:
            return ProfilerAction.NONE
        if offset < wait + warmup:
            return ProfilerAction.WARMUP
        if offset < wait + warmup + active - 1:
            return ProfilerAction.RECORD
        return ProfilerAction.RECORD_AND_SAVE

    def _open(self, window: int) -> None:
        self._window = window
        self._base = self.steps  # the next step's global number (steps are counted from 0)
        self._done = False
        profiler = self._make_profiler(self._action, self._ready)
        profiler.step_num = self._base  # ProfilerStep#N = the job's global step N
        first = self._action(self._base)
        profiler.current_action = first
        if hasattr(profiler, "_prev_schedule_action"):
            profiler._prev_schedule_action = first
        profiler.start()
        self._profiler = profiler

    def _advance(self) -> None:
        profiler = self._profiler
        wait, warmup, active = self.settings.schedule
        if self.steps - self._base == wait + warmup:
            self._start_ts = self._clock()
        profiler.step()  # the trace is written when the last active step ends
        if self._done or self.steps - self._base >= wait + warmup + active:
            profiler.stop()
            self._profiler = None

    def _ready(self, profiler: Any) -> None:
        """Kineto's ``on_trace_ready``: the trace, then its meta, each renamed into place."""
        wait, warmup, active = self.settings.schedule
        rank, world = _rank_and_world()
        local = _int_env("LOCAL_RANK")
        if local is None:
            local = _int_env("SLURM_LOCALID")
        directory = self.settings.job_dir
        directory.mkdir(parents=True, exist_ok=True)
        trace = directory / trace_name(rank, self._window)
        temporary = directory / f".{trace.name}.{os.getpid()}.tmp"
        profiler.export_chrome_trace(str(temporary))
        os.replace(temporary, trace)
        first = self._base + wait + warmup
        meta = CaptureMeta(
            job_id=self.settings.job_id,
            node=os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0],
            gpu=_claimed_gpu(local),
            rank=rank,
            world_size=world,
            local_rank=local,
            window=self._window,
            first_step=first,
            last_step=first + active - 1,
            start_ts=self._start_ts or self._clock(),
            end_ts=self._clock(),
            trace=trace.name,
            schedule=(wait, warmup, active),
        )
        target = directory / meta_name(rank, self._window)
        temporary = directory / f".{target.name}.{os.getpid()}.tmp"
        temporary.write_text(meta.to_json() + "\n")
        os.replace(temporary, target)
        self.windows_written += 1
        self._done = True


def _torch_profiler(schedule: Callable[[int], Any], ready: Callable[[Any], None]) -> Any:
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        activities.append(ProfilerActivity.CUDA)
    return profile(activities=activities, schedule=schedule, on_trace_ready=ready)
