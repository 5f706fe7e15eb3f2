"""The demo's opening jobs: one per workload profile, filling the 2 x 8 cluster."""

from __future__ import annotations

from typing import TypedDict

from hpcscope.twin.workloads import Profile


class _DemoJobRequired(TypedDict):
    """What every demo job names."""

    name: str
    user: str
    account: str
    profile: Profile
    gpus: int
    duration_seconds: float


class DemoJob(_DemoJobRequired, total=False):
    """The keyword arguments of :meth:`Scheduler.submit` for one of the demo's jobs."""

    straggler_gpu: int | None
    fail_after_seconds: float | None
    spread_nodes: int
    nodelist: tuple[str, ...]


_HOUR = 3600.0

#: The demo's opening jobs (keyword arguments of :meth:`Scheduler.submit`).
DEMO_SCENARIO: tuple[DemoJob, ...] = (
    {
        "name": "llama-7b-pretrain",
        "user": "alice",
        "account": "vision",
        "profile": Profile.STRAGGLER,
        "gpus": 8,
        "duration_seconds": 8 * _HOUR,
        # two nodes, GPUs 0-3 of each (AllReduce over InfiniBand); the straggler is the 7th GPU
        # of the job: GPU 2 of the second node
        "spread_nodes": 2,
        "straggler_gpu": 6,
    },
    {
        "name": "bert-finetune",
        "user": "bob",
        "account": "nlp",
        "profile": Profile.DATA_STARVED,
        "gpus": 4,
        "duration_seconds": 8 * _HOUR,
        "nodelist": ("gpu02",),
    },
    {
        "name": "whisper-train",
        "user": "dave",
        "account": "speech",
        "profile": Profile.HEALTHY,
        "gpus": 2,
        "duration_seconds": 8 * _HOUR,
    },
    {
        "name": "jupyter-debug",
        "user": "bob",
        "account": "nlp",
        "profile": Profile.IDLE_ALLOCATED,
        "gpus": 1,
        "duration_seconds": 8 * _HOUR,
    },
    {
        "name": "vit-sweep-17",
        "user": "alice",
        "account": "vision",
        "profile": Profile.FAILED,
        "gpus": 1,
        "duration_seconds": 2 * _HOUR,
        "fail_after_seconds": 120.0,
    },
)
