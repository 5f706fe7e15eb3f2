"""Real PyTorch profiler traces of the communication patterns of expert, pipeline and sharded
data parallelism, from gloo ranks on the CPU, one injected slow rank per scenario.

Scenarios (``kind``):

* ``a2a``: expert-style ``all_to_all_single`` between two matmul blocks; with ``overlap`` the
  all-to-all is issued asynchronously (gloo runs it on its worker thread) and the main thread
  computes the next block while it runs;
* ``fsdp``: per layer an ``all_gather`` of the parameter shards, a matmul block, and in the
  backward a matmul block and a ``reduce_scatter`` of the gradients (what FSDP does);
* ``pipeline``: two stages and four micro-batches (GPipe order) with ``send``/``recv`` of the
  activations and gradients: stage 1 idles until stage 0's first forward (the bubble).

The slow rank sleeps ``delay_seconds`` per step (per micro-batch in the pipeline) before its
communication, so the others wait for it there.

Run as ``python -m tests.support.comm_ranks SPEC.json OUT_DIR`` (what :func:`generate` does).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tests.support.rank_launch import launch_ranks


@dataclass(frozen=True)
class CommScenario:
    name: str
    kind: str  # "a2a", "fsdp" or "pipeline"
    slow_rank: int
    delay_seconds: float = 0.02
    overlap: bool = False
    steps: int = 4  # profiled (active) steps
    size: int = 192  # matrix side of the matmul blocks
    ranks: int | None = None  # ranks taking part (the pipeline: 2), None: all


def generate(
    scenarios: list[CommScenario], out_dir: Path, *, world_size: int, timeout_seconds: float = 300
) -> Path:
    """Run the scenarios on ``world_size`` gloo ranks (one launch: starting torch costs most of
    the time); traces in ``out_dir/<name>/``.

    Raises:
        RuntimeError: the ranks failed (their output is in the message).
    """
    launch_ranks(
        "tests.support.comm_ranks",
        [asdict(s) for s in scenarios],
        out_dir,
        world_size=world_size,
        timeout_seconds=timeout_seconds,
    )
    return out_dir


# ----------------------------------------------------------------- inside the rank processes


def _rank_main(rank: int, spec: dict[str, Any], out_dir: str) -> None:  # pragma: no cover
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(spec["port"])
    dist.init_process_group("gloo", rank=rank, world_size=spec["world_size"])
    torch.set_num_threads(1)
    torch.manual_seed(rank)
    from torch.profiler import ProfilerActivity, profile, schedule

    scenarios = spec["scenarios"]
    (steps,) = {raw["steps"] for raw in scenarios}
    world = spec["world_size"]
    # a rank outside a scenario's ranks idles through its steps, its trace kept apart
    dirs = [
        Path(out_dir) / (raw["name"] if rank < (raw["ranks"] or world) else f"{raw['name']}.idle")
        for raw in scenarios
    ]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    current = [0]
    # one profiler session for every scenario (its first start costs seconds): one cycle of
    # wait, warm-up and active steps per scenario, each cycle's trace in its directory
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=steps, repeat=len(scenarios)),
        on_trace_ready=lambda p: p.export_chrome_trace(str(dirs[current[0]] / f"rank-{rank}.json")),
    ) as prof:
        for k, raw in enumerate(scenarios):
            current[0] = k
            step = (
                _step(rank, raw["ranks"] or world, raw) if rank < (raw["ranks"] or world) else _idle
            )
            for i in range(steps + 2):
                if i == 0:  # the cycle's wait step, not recorded
                    dist.barrier()
                step()
                prof.step()
    dist.barrier()
    dist.destroy_process_group()


def _idle() -> None:  # pragma: no cover
    pass


def _step(rank: int, world: int, raw: dict[str, Any]) -> Any:  # pragma: no cover
    """One training step of the scenario, as a callable."""
    import torch
    import torch.distributed as dist

    n = raw["size"]
    w = torch.randn(n, n) / n
    slow = rank == raw["slow_rank"]
    delay = raw["delay_seconds"]

    def block(x: Any, times: int = 3) -> Any:
        for _ in range(times):
            x = torch.tanh(x @ w)
        return x

    def a2a_step() -> None:
        x = block(torch.randn(n, n))
        out = torch.empty_like(x)
        if slow:
            time.sleep(delay)
        if raw["overlap"]:
            work = dist.all_to_all_single(out, x, async_op=True)
            block(x, 24)  # the next expert's compute while the tokens travel
            work.wait()
        else:
            dist.all_to_all_single(out, x)
        block(out)

    shard = torch.randn(n // world, n)

    def fsdp_step() -> None:
        for _ in range(2):  # layers
            parts = [torch.empty_like(shard) for _ in range(world)]
            dist.all_gather(parts, shard)
            block(torch.cat(parts))
        for _ in range(2):
            grad = block(torch.randn(n, n))
            if slow:
                time.sleep(delay / 2)
            out = torch.empty(n // world, n)
            dist.reduce_scatter(out, list(grad.chunk(world)))

    def pipeline_step() -> None:
        micro = 4
        sends: list[Any] = []  # isend, as Megatron's p2p does: a blocking send would deadlock GPipe
        if rank == 0:
            for _ in range(micro):
                y = block(torch.randn(n, n))
                if slow:
                    time.sleep(delay)
                sends.append(dist.isend(y, 1))
            for _ in range(micro):
                grad = torch.empty(n, n)
                dist.recv(grad, 1)
                block(grad)
        else:
            for _ in range(micro):
                act = torch.empty(n, n)
                dist.recv(act, 0)
                g = block(block(act))
                if slow:
                    time.sleep(delay)
                sends.append(dist.isend(g, 0))
        for handle in sends:
            handle.wait()

    return {"a2a": a2a_step, "fsdp": fsdp_step, "pipeline": pipeline_step}[raw["kind"]]


def main() -> None:  # pragma: no cover
    import json
    import warnings

    import torch.multiprocessing as mp

    warnings.filterwarnings("ignore")
    spec = json.loads(Path(sys.argv[1]).read_text())
    mp.spawn(  # type: ignore[no-untyped-call]  # torch leaves spawn unannotated
        _rank_main, args=(spec, sys.argv[2]), nprocs=spec["world_size"], join=True
    )


if __name__ == "__main__":  # pragma: no cover
    main()
