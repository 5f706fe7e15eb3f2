"""What the telemetry scenarios share: their jobs, datasets, FIDs and traffic shapes."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import datetime

from hpcscope.model.timeutil import from_epoch_seconds
from hpcscope.twin.attacks import JOBS
from hpcscope.twin.lustre import LustreTarget
from hpcscope.twin.telemetry_traces import (
    PORTS_PER_NODE,
    SECOND_NS,
    PortTraffic,
)

MINUTE = 60.0
GB = 1e9
MB = 1e6
DATASET = "/lustre/datasets/imagenet"
DATASET_FID = "[0x200000402:0x1:0x0]"
TRAIN_FID = "[0x200000402:0x2:0x0]"
MANIFEST_FID = "[0x200000402:0x3:0x0]"
CHECKPOINT_FID = "[0x200000403:0x1:0x0]"
OSS = "oss1"
DATASET_OSTS = (
    LustreTarget(OSS, "es01a-OST0004", "ost"),
    LustreTarget(OSS, "es01a-OST0005", "ost"),
)
CHECKPOINT_OST = LustreTarget(OSS, "es01a-OST0001", "ost")
MDT = "es01a-MDT0000"
#: The site's dataset registry and jobid format the Lustre scenarios assume.
DATASET_LISTS = {"DP-1": {"datasets": [f"{DATASET} vision es01a-OST0004,es01a-OST0005"]}}
FIDS = {
    DATASET_FID: DATASET,
    TRAIN_FID: f"{DATASET}/train",
    MANIFEST_FID: f"{DATASET}/MANIFEST.sha256",
    CHECKPOINT_FID: "/lustre/checkpoints/run-c",
}


def at_seconds(t0: int, seconds: float) -> datetime:
    """``seconds`` after ``t0`` (ns since the epoch), naive UTC."""
    return from_epoch_seconds(t0 / SECOND_NS + seconds)


def job_row(
    t0: int, job_id: str, nodes: Sequence[str], *, start: float = 0.0, end: float | None = None,
    partition: str = "gpu",
) -> dict[str, object]:  # fmt: skip
    """Slurm's record of one of the twin's jobs (``jobs`` columns), times from ``t0``."""
    user, account = JOBS[job_id]
    return {
        "job_id": job_id, "user": user, "account": account, "partition": partition,
        "state": "RUNNING" if end is None else "COMPLETED", "start_time": at_seconds(t0, start),
        "end_time": None if end is None else at_seconds(t0, end), "nodes": ",".join(nodes),
        "gpus": PORTS_PER_NODE * len(nodes), "source": "twin",
    }  # fmt: skip


def allocation_rows(
    t0: int, job_id: str, node: str, gpu_indexes: Sequence[int], *, start: float = 0.0,
    end: float | None = None,
) -> list[dict[str, object]]:  # fmt: skip
    """The job mapping's allocation of some GPUs of ``node`` (``job_allocations`` columns)."""
    return [
        {"job_id": job_id, "node": node, "gpu": g, "gpu_instance_id": None,
         "start_time": at_seconds(t0, start),
         "end_time": None if end is None else at_seconds(t0, end)}
        for g in gpu_indexes
    ]  # fmt: skip


def spread(rx: float, tx: float) -> PortTraffic:
    """A node's traffic over its eight rails (NCCL stripes collectives over every HCA)."""
    return dict.fromkeys(range(PORTS_PER_NODE), (rx / PORTS_PER_NODE, tx / PORTS_PER_NODE))


def with_extra(base: PortTraffic, port: int, rx: float = 0.0, tx: float = 0.0) -> PortTraffic:
    out = dict(base)
    r, t = out.get(port, (0.0, 0.0))
    out[port] = (r + rx, t + tx)
    return out


def quiet(_: float) -> PortTraffic:
    """No traffic beyond the idle keep-alives."""
    return {}


def data_parallel(
    rate: float, start: float = 0.0, end: float = math.inf
) -> Callable[[float], PortTraffic]:
    return lambda t: spread(rate, rate) if start < t <= end else {}
