"""The twin's training jobs under the golden path's capture: Kineto traces, meta, NCCL logs.

What a real job writes into ``<capture spool>/<job>/`` with capture on
(:mod:`hpcscope.capture`, format :mod:`hpcscope.model.capture`), the twin writes for each
running training job (healthy, data-starved, straggler profiles): once soon after the job
starts and then every ``every_seconds`` of simulated time, one capture window per rank:

* a Kineto trace as ``torch.profiler``'s ``export_chrome_trace`` writes it for a CUDA rank
  (``distributedInfo`` with backend ``nccl``, ``deviceProperties``, ``baseTimeNanoseconds``,
  ``ProfilerStep#N`` on the training thread, the DataLoader's ``__next__``, ATen forward
  operators, autograd's ``evaluate_function`` ranges on the autograd thread, the ``nccl:all_reduce``
  annotation and ``c10d::allreduce_``, ``Optimizer.step#AdamW.step``, the GEMM and
  ``ncclDevKernel_AllReduce`` kernels on the GPU's streams with their ``cudaLaunchKernel``
  correlations);
* the meta file the capture writes after it;
* an ``NCCL_DEBUG=INFO`` log per rank (init and the rings and channels over ``NET/IB`` when the
  job spans nodes).

The steps follow the same time model as the counters (:func:`hpcscope.twin.workloads.
shares_for`): a straggler's backward takes twice as long (its GPU is thermally throttled), so
its peers wait at the AllReduce; in a data-starved job one rank per step is still loading its
batch while the others wait. Everything is deterministic under the seed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict

import numpy as np

from hpcscope.model.capture import CaptureMeta, meta_name, trace_name
from hpcscope.twin.scheduler import JobState, SimJob
from hpcscope.twin.workloads import Profile

#: Per-rank step phases in milliseconds: data, forward, backward, AllReduce transfer, optimizer.
_STEP_MS: dict[Profile, tuple[float, float, float, float, float]] = {
    Profile.HEALTHY: (1.0, 10.0, 20.0, 5.0, 3.0),
    Profile.STRAGGLER: (2.0, 10.0, 20.0, 6.0, 4.0),
    Profile.DATA_STARVED: (4.0, 3.0, 5.0, 3.0, 1.0),
}
#: The straggler's backward, and a data-starved job's slow loader, in milliseconds.
STRAGGLER_BACKWARD_MS = 40.0
STARVED_DATA_MS = 60.0
SCHEDULE = (3, 1, 4)
_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1_execute_segment_k_off_kernel__5x_cublas"  # noqa: E501
_NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


@dataclass(frozen=True, slots=True)
class _Rank:
    rank: int
    node: str
    gpu: int
    local_rank: int
    pid: int


class TraceSpool:
    """Writes capture windows of the twin's running training jobs into a spool root.

    Args:
        root: the capture spool (``capture_spool_dir`` of the server).
        seed: noise of the step times.
        every_seconds: simulated seconds between a job's windows.
        first_after_seconds: simulated seconds after a job's start before its first window.
    """

    def __init__(
        self,
        root: Path,
        *,
        seed: int = 42,
        every_seconds: float = 600.0,
        first_after_seconds: float = 5.0,
    ) -> None:
        self.root = root
        self.seed = seed
        self.every_seconds = every_seconds
        self.first_after_seconds = first_after_seconds
        self._written: dict[int, int] = {}  # job -> windows written

    def advance(self, now: float, jobs: Iterable[SimJob]) -> int:
        """Write every window that is due at ``now``; returns how many were written."""
        written = 0
        for job in jobs:
            if job.state is not JobState.RUNNING or job.start_time is None:
                continue
            if job.profile not in _STEP_MS or job.faulted(now):
                continue
            first = job.start_time + self.first_after_seconds
            if now < first:
                continue
            window = int((now - first) // self.every_seconds)
            if self._written.get(job.job_id, -1) >= window:
                continue
            self._written[job.job_id] = window
            self.write_window(job, window, at=now)
            written += 1
        return written

    def write_window(self, job: SimJob, window: int, *, at: float) -> None:
        """One capture window of ``job``: every rank's trace and meta, and its NCCL logs."""
        directory = self.root / str(job.job_id)
        directory.mkdir(parents=True, exist_ok=True)
        ranks = [
            _Rank(i, node, gpu, sum(1 for n, _ in job.allocation[:i] if n == node),
                  4000 + job.job_id % 1000 * 10 + i)
            for i, (node, gpu) in enumerate(job.allocation)
        ]  # fmt: skip
        wait, warmup, active = SCHEDULE
        first_step = 100 + window * 1000 + wait + warmup
        steps = _step_times(job, len(ranks), active, seed=self.seed + job.job_id + window)
        start_us = (at - steps[0].end[-1] / 1e3 - 0.001) * 1e6  # the window ends at ``at``
        for r in ranks:
            events = _rank_events(r, steps, first_step, start_us, len(ranks))
            trace = directory / trace_name(r.rank, window)
            _write_atomic(trace, json.dumps(_document(r, len(ranks), events, start_us)))
            meta = CaptureMeta(
                job_id=str(job.job_id),
                node=r.node,
                gpu=r.gpu,
                rank=r.rank,
                world_size=len(ranks),
                local_rank=r.local_rank,
                window=window,
                first_step=first_step,
                last_step=first_step + active - 1,
                start_ts=start_us / 1e6,
                end_ts=at,
                trace=trace.name,
                schedule=SCHEDULE,
            )
            _write_atomic(directory / meta_name(r.rank, window), meta.to_json() + "\n")
            if window == 0:
                nccl = directory / f"nccl-{r.node}-{r.pid}.log"
                _write_atomic(nccl, _nccl_log(r, ranks, job))


def _write_atomic(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


@dataclass(slots=True)
class _Steps:
    """One rank's steps: each phase's (start, end) in ms from the window start, per step."""

    data: list[tuple[float, float]] = field(default_factory=list)
    forward: list[tuple[float, float]] = field(default_factory=list)
    backward: list[tuple[float, float]] = field(default_factory=list)
    comm: list[tuple[float, float]] = field(default_factory=list)
    done: list[tuple[float, float]] = field(default_factory=list)
    end: list[float] = field(default_factory=list)


class _Event(TypedDict):
    """A complete (``X``) event of a Chrome trace, as ``export_chrome_trace`` writes it."""

    ph: str
    cat: str
    name: str
    pid: int
    tid: int
    ts: float
    dur: float
    args: NotRequired[dict[str, int | str]]


def _step_times(job: SimJob, world: int, active: int, *, seed: int) -> list[_Steps]:
    """Per rank, per step: phase boundaries in ms from the window start (ranks share the
    step start: the previous AllReduce ended them together)."""
    rng = np.random.default_rng(seed)
    data, forward, backward, transfer, optimizer = _STEP_MS[job.profile]
    out = [_Steps() for _ in range(world)]
    t = 0.0
    for step in range(active):
        launch = []
        for r in range(world):
            d = data * (1 + rng.normal(0, 0.05))
            if job.profile is Profile.DATA_STARVED and r == step % world:
                d = STARVED_DATA_MS * (1 + rng.normal(0, 0.05))
            f = forward * (1 + rng.normal(0, 0.02))
            b = backward * (1 + rng.normal(0, 0.02))
            if job.profile is Profile.STRAGGLER and r == job.straggler_gpu:
                b = STRAGGLER_BACKWARD_MS * (1 + rng.normal(0, 0.02))
            out[r].data.append((t, t + d))
            out[r].forward.append((t + d, t + d + f))
            out[r].backward.append((t + d + f, t + d + f + b))
            launch.append(t + d + f + b)
        done = max(launch) + transfer
        for r in range(world):
            out[r].comm.append((launch[r], done))
            out[r].done.append((done, done + optimizer))
            out[r].end.append(done + optimizer)
        t = done + optimizer + 0.05
    return out


def _rank_events(
    r: _Rank, steps: list[_Steps], first_step: int, start_us: float, world: int
) -> list[_Event]:
    mine = steps[r.rank]
    main, autograd, compute, comm_stream = r.pid, r.pid + 1, 7, 20
    events: list[_Event] = []
    correlation = 1000 * (r.rank + 1)

    def x(cat: str, name: str, tid: int, lo: float, hi: float, **args: int) -> None:
        event: _Event = {
            "ph": "X", "cat": cat, "name": name, "pid": r.pid if cat != "kernel" else r.gpu,
            "tid": tid, "ts": round(start_us + lo * 1e3, 3), "dur": round((hi - lo) * 1e3, 3),
        }  # fmt: skip
        if args:
            event["args"] = dict(args)
        events.append(event)

    def launch(lo: float, hi: float, name: str, stream: int, kernel_lo: float) -> None:
        nonlocal correlation
        correlation += 1
        x("cuda_runtime", "cudaLaunchKernel", main, lo, lo + 0.006, correlation=correlation)
        x("kernel", name, stream, kernel_lo, hi, device=r.gpu, stream=stream,
          correlation=correlation)  # fmt: skip

    for i in range(len(mine.end)):
        step = first_step + i
        lo = mine.data[i][0]
        x("user_annotation", f"ProfilerStep#{step}", main, lo, mine.end[i])
        d_lo, d_hi = mine.data[i]
        x("cpu_op", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", main,
          d_lo, d_hi)  # fmt: skip
        f_lo, f_hi = mine.forward[i]
        half = (f_lo + f_hi) / 2
        for a, b in ((f_lo, half), (half, f_hi)):
            x("cpu_op", "aten::linear", main, a, a + 0.05)
            launch(a, b, _GEMM, compute, a + 0.01)
        b_lo, b_hi = mine.backward[i]
        mid = (b_lo + b_hi) / 2
        for a, b in ((b_lo, mid), (mid, b_hi)):
            x("cpu_op", "autograd::engine::evaluate_function: MmBackward0", autograd, a, b)
            launch(a, b, _GEMM, compute, a + 0.01)
        c_lo, c_hi = mine.comm[i]
        x("user_annotation", "nccl:all_reduce", main, c_lo, c_lo + 0.03)
        x("cpu_op", "c10d::allreduce_", main, c_lo, c_hi)
        launch(c_lo, c_hi, _NCCL_KERNEL, comm_stream, c_lo + 0.01)
        events[-1]["args"].update({"Collective name": "allreduce", "Process Group Name": "0",
                                   "Group size": world})  # fmt: skip
        o_lo, o_hi = mine.done[i]
        x("user_annotation", "Optimizer.step#AdamW.step", main, o_lo, o_hi)
        launch(o_lo, o_hi, "multi_tensor_apply_kernel", compute, o_lo + 0.01)
    return events


def _document(r: _Rank, world: int, events: list[_Event], start_us: float) -> object:
    return {
        "schemaVersion": 1,
        "deviceProperties": [
            {
                "id": r.gpu,
                "name": "NVIDIA H100 80GB HBM3",
                "totalGlobalMem": 85045510144,
                "computeMajor": 9,
                "computeMinor": 0,
                "numSms": 132,
            }
        ],
        "distributedInfo": {"backend": "nccl", "rank": r.rank, "world_size": world},
        "record_shapes": 0,
        "with_stack": 0,
        "trace_id": f"{r.node}-{r.pid}",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 0,
        "traceEvents": [
            {
                "ph": "M",
                "name": "process_name",
                "pid": r.pid,
                "tid": 0,
                "args": {"name": f"python {r.pid}"},
            },
            {
                "ph": "M",
                "name": "process_name",
                "pid": r.gpu,
                "tid": 0,
                "args": {"name": f"GPU {r.gpu}"},
            },
            *events,
        ],
    }


def _nccl_log(r: _Rank, ranks: list[_Rank], job: SimJob) -> str:
    """NCCL_DEBUG=INFO start-up lines as NCCL 2.21 prints them (init, rings, transport)."""
    host = r.node
    nodes = job.nodes
    prefix = f"{host}:{r.pid}:{r.pid}"
    lines = [
        f"{prefix} [{r.local_rank}] NCCL INFO Bootstrap : Using ib0:10.0.{nodes.index(host)}.1<0>",
        f"{prefix} [{r.local_rank}] NCCL INFO NET/IB : Using [0]mlx5_{r.local_rank}:1/IB ; "
        "OOB ib0:10.0.0.1<0>",
        f"{prefix} [{r.local_rank}] NCCL INFO cudaDriverVersion 12040",
        f"{prefix} [{r.local_rank}] NCCL INFO comm 0x55d0c0a0 rank {r.rank} nranks "
        f"{len(ranks)} cudaDev {r.gpu} nvmlDev {r.gpu} busId {r.gpu + 0x18:x}000 commId "
        f"0x{job.job_id:x} - Init START",
    ]
    nxt = ranks[(r.rank + 1) % len(ranks)]
    via = "NET/IB/0/GDRDMA" if nxt.node != host else "P2P/CUMEM"
    lines.append(
        f"{prefix} [{r.local_rank}] NCCL INFO Channel 00/0 : {r.rank}[{r.gpu}] -> "
        f"{nxt.rank}[{nxt.gpu}] [send] via {via}"
    )
    lines.append(
        f"{prefix} [{r.local_rank}] NCCL INFO comm 0x55d0c0a0 rank {r.rank} nranks "
        f"{len(ranks)} cudaDev {r.gpu} nvmlDev {r.gpu} busId {r.gpu + 0x18:x}000 commId "
        f"0x{job.job_id:x} - Init COMPLETE"
    )
    return "\n".join(lines) + "\n"
