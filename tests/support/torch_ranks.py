"""Real PyTorch profiler traces from N gloo ranks on the CPU, with an injected straggler.

Reusable test utility: :func:`generate` launches ``world_size`` real processes (torch 2.13 CPU,
``gloo``), trains a small MLP under ``torch.profiler`` for several scenarios in one launch (one
torch import per rank for the whole matrix), and writes per-rank Kineto traces plus the ground
truth each rank measured itself: its step wall times and the seconds actually spent in the
injected delay.

A scenario chooses DDP (bucketed AllReduce overlapping backward) or a manual AllReduce of
the flattened gradients after backward (one collective per step, not overlapped), with or
without ``record_function`` phase annotations, and at
most one injection: a ``time.sleep`` of ``delay_seconds`` per step on one rank inside one phase
(data: in ``Dataset.__getitem__``, so under ``DataLoader.__next__``; forward: between two layers;
backward: in the backward of an identity autograd function; optimizer: in ``step``). Every rank
also sleeps ``work_seconds`` in each phase, standing for device time (a GPU rank's CPU mostly
waits too): with three ranks on a shared two-core machine, CPU-bound steps would measure core
contention more than the model, and the injected delay would be blurred by it.

Run as ``python -m tests.support.torch_ranks SPEC.json OUT_DIR`` (what :func:`generate` does).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.support.rank_launch import launch_ranks

PHASES = ("data", "forward", "backward", "optimizer")


@dataclass(frozen=True)
class Injection:
    rank: int
    phase: str  # one of PHASES
    delay_seconds: float


@dataclass(frozen=True)
class Scenario:
    name: str
    mode: str = "ddp"  # "ddp" or "manual"
    annotate: bool = False
    injection: Injection | None = None
    steps: int = 4  # profiled (active) steps
    work_seconds: tuple[float, float, float, float] = (0.002, 0.004, 0.008, 0.002)
    gzip_rank0: bool = False  # write rank 0 as .json.gz (file naming varies by rank)


@dataclass(frozen=True)
class RankTruth:
    step_seconds: list[float]
    injected_seconds: list[float]


@dataclass
class Run:
    out_dir: Path
    world_size: int
    scenarios: dict[str, Scenario]
    truth: dict[str, dict[int, RankTruth]] = field(default_factory=dict)

    def trace_dir(self, name: str) -> Path:
        return self.out_dir / name


def generate(
    scenarios: list[Scenario], out_dir: Path, *, world_size: int = 3, timeout_seconds: float = 600
) -> Run:
    """Run every scenario on ``world_size`` gloo ranks; return where the traces are.

    Raises:
        RuntimeError: the ranks failed (their output is in the message).
    """
    launch_ranks(
        "tests.support.torch_ranks",
        [asdict(s) for s in scenarios],
        out_dir,
        world_size=world_size,
        timeout_seconds=timeout_seconds,
    )
    run = Run(out_dir, world_size, {s.name: s for s in scenarios})
    for s in scenarios:
        run.truth[s.name] = {}
        for rank in range(world_size):
            data = json.loads((out_dir / f"{s.name}.truth" / f"{rank}.json").read_text())
            run.truth[s.name][rank] = RankTruth(**data)
    return run


# ----------------------------------------------------------------- inside the rank processes


def _rank_main(rank: int, spec: dict[str, Any], out_dir: str) -> None:  # pragma: no cover
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(spec["port"])
    world = spec["world_size"]
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    torch.manual_seed(0)

    for raw in spec["scenarios"]:
        _run_scenario(rank, world, raw, out_dir)
    dist.destroy_process_group()


def _run_scenario(  # pragma: no cover
    rank: int, world: int, raw: dict[str, Any], out_dir: str
) -> None:
    """One scenario on this rank: train under the profiler, write the trace and the truth."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    inj = raw["injection"]
    delay = inj["delay_seconds"] if inj and inj["rank"] == rank else 0.0
    where = inj["phase"] if inj else None
    injected: list[float] = []

    work = dict(zip(PHASES, raw["work_seconds"], strict=True))

    def pause(phase: str, seconds: float, share: float = 1.0, where: Any = where) -> None:
        time.sleep(work[phase] * share)
        if seconds > 0 and where == phase:
            t0 = time.perf_counter()
            time.sleep(seconds * share)
            injected[-1] += time.perf_counter() - t0

    class Data(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
        def __init__(self) -> None:
            self.x = torch.randn(4096, 64)
            self.y = torch.randint(0, 10, (4096,))

        def __len__(self) -> int:
            return 4096

        def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
            pause("data", delay, share=1 / 16)
            return self.x[i], self.y[i]

    class SlowBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x.view_as(x)

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            pause("backward", delay)
            return grad

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(64, 256)
            self.b = torch.nn.Linear(256, 256)
            self.c = torch.nn.Linear(256, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.relu(self.a(x))
            pause("forward", delay)
            h = SlowBackward.apply(torch.relu(self.b(h)))
            return self.c(h)

    class SlowSGD(torch.optim.SGD):
        def step(self, closure: Any = None) -> Any:
            pause("optimizer", delay)
            return super().step(closure)

    net = Net()
    model: torch.nn.Module = (
        torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.05)
        if raw["mode"] == "ddp"
        else net
    )
    if raw["mode"] != "ddp":
        for p in net.parameters():
            dist.broadcast(p.data, 0)
    opt = SlowSGD(model.parameters(), lr=0.01)
    loader = iter(torch.utils.data.DataLoader(Data(), batch_size=16))
    annotate = raw["annotate"]

    def region(label: str) -> Any:
        import contextlib

        return record_function(label) if annotate else contextlib.nullcontext()

    target = Path(out_dir) / raw["name"]
    target.mkdir(parents=True, exist_ok=True)
    suffix = ".json.gz" if raw["gzip_rank0"] and rank == 0 else ".json"
    trace_path = target / (
        f"rank-{rank}{suffix}"
        if rank % 2 == 0
        else f"worker{rank}_step_{raw['steps']}.pt.trace{suffix}"
    )
    step_seconds: list[float] = []
    dist.barrier()
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=raw["steps"]),
        on_trace_ready=lambda p: p.export_chrome_trace(str(trace_path)),
    ) as prof:
        for _ in range(raw["steps"] + 2):
            injected.append(0.0)
            t0 = time.perf_counter()
            with region("## data_load ##"):
                x, y = next(loader)
            with region("## forward ##"):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            with region("## backward ##"):
                loss.backward()
            if raw["mode"] != "ddp":
                # one AllReduce of the flattened gradients (a fusion buffer, as apex's
                # flat_dist_call and Horovod do): one collective per step, after backward
                grads = [p.grad for p in net.parameters() if p.grad is not None]
                flat = torch._utils._flatten_dense_tensors(grads)
                dist.all_reduce(flat)
                flat /= world
                for grad, reduced in zip(
                    grads, torch._utils._unflatten_dense_tensors(flat, grads), strict=True
                ):
                    grad.copy_(reduced)
            with region("## optimizer ##"):
                opt.step()
            step_seconds.append(time.perf_counter() - t0)
            prof.step()
    # the profiled steps are the last `steps` iterations
    keep = raw["steps"]
    truth_dir = Path(out_dir) / f"{raw['name']}.truth"
    truth_dir.mkdir(exist_ok=True)
    (truth_dir / f"{rank}.json").write_text(
        json.dumps({"step_seconds": step_seconds[-keep:], "injected_seconds": injected[-keep:]})
    )
    dist.barrier()


def main() -> None:  # pragma: no cover
    import warnings

    import torch.multiprocessing as mp

    warnings.filterwarnings("ignore")
    spec = json.loads(Path(sys.argv[1]).read_text())
    mp.spawn(_rank_main, args=(spec, sys.argv[2]), nprocs=spec["world_size"], join=True)


if __name__ == "__main__":  # pragma: no cover
    main()
