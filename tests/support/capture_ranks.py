"""A plain DDP training script on N gloo CPU ranks, one of them slow in one phase.

It knows nothing of hpcscope: it is the researcher's script the golden path's capture must
profile without a change (``hpcscope.capture`` switched on by the environment, through
``sitecustomize``). The delayed rank sleeps ``delay_seconds`` per step inside the chosen phase
(data: in ``Dataset.__getitem__``; forward: between two layers; backward: in the backward of an
identity autograd function; optimizer: in ``SGD.step``). Every rank also sleeps a little in
each phase, standing for device time, so that steps are not CPU-bound on a shared machine.

Run as ``python -m tests.support.capture_ranks SPEC.json`` with
``{"world_size": 4, "port": 29500, "steps": 30, "rank": 2, "phase": "data",
"delay_seconds": 0.05}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

WORK_SECONDS = {"data": 0.002, "forward": 0.004, "backward": 0.006, "optimizer": 0.002}


def _rank_main(rank: int, spec: dict[str, Any]) -> None:  # pragma: no cover - in the ranks
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(spec["port"])
    os.environ["LOCAL_RANK"] = str(rank)  # as torchrun sets it
    dist.init_process_group("gloo", rank=rank, world_size=spec["world_size"])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    delay = float(spec["delay_seconds"]) if rank == spec["rank"] else 0.0

    def pause(phase: str, share: float = 1.0) -> None:
        time.sleep(WORK_SECONDS[phase] * share)
        if delay and phase == spec["phase"]:
            time.sleep(delay * share)

    class Data(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
        def __len__(self) -> int:
            return 1 << 16

        def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
            pause("data", share=1 / 16)
            return torch.randn(64), torch.tensor(i % 10)

    class SlowBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x.view_as(x)

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            pause("backward")
            return grad

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(64, 256)
            self.b = torch.nn.Linear(256, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.relu(self.a(x))
            pause("forward")
            return self.b(SlowBackward.apply(h))

    class SlowSGD(torch.optim.SGD):
        def step(self, closure: Any = None) -> Any:
            pause("optimizer")
            return super().step(closure)

    model = torch.nn.parallel.DistributedDataParallel(Net(), bucket_cap_mb=0.05)
    opt = SlowSGD(model.parameters(), lr=0.01)
    loader = iter(torch.utils.data.DataLoader(Data(), batch_size=16))
    for _ in range(int(spec["steps"])):
        x, y = next(loader)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:  # pragma: no cover - run as a script
    import warnings

    import torch.multiprocessing as mp

    warnings.filterwarnings("ignore")
    spec_path = Path(sys.argv[1])
    spec = json.loads(spec_path.read_text())
    mp.spawn(_rank_main, args=(spec,), nprocs=spec["world_size"], join=True)


if __name__ == "__main__":  # pragma: no cover
    main()
