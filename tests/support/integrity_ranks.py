"""Real DDP training on N gloo CPU ranks with hpcscope's integrity hook, and injected attacks.

Reusable test utility: :func:`generate` launches ``world_size`` real processes (torch CPU,
``gloo``), and for each scenario trains a small MLP under real DDP with
:class:`hpcscope.integrity.IntegrityHook` registered, writing the spool to
``<out>/spool/<scenario name>/rank-<r>.jsonl`` (the scenario name stands for the job id).

Attacks are rank-local transforms of the bucket before the AllReduce, composed here from the
hook's public parts (``observe`` then ``send``); the shipped hook never alters a gradient:

* ``scale``: the rank sends (and honestly reports) ``factor`` x its gradient;
* ``signflip``: sends ``-g``;
* ``noise``: sends ``g + N(0, s^2)`` with ``||noise|| = factor x ||g||``;
* ``liar``: sends ``-g`` but reports the sketch and norm of its honest ``g`` (GI-3's case);
* ``replica``: perturbs its own parameters by ``factor`` after an optimizer step (GI-4).

A scenario with ``overhead_steps > 0`` instead trains three identical DDP models in the same
processes, without a comm hook, with PyTorch's ``allreduce_hook`` and with the integrity hook,
in a rotating order, and records their step times (the overhead ratio measured in one run).

Run as ``python -m tests.support.integrity_ranks SPEC.json OUT_DIR`` (what :func:`generate` does).
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

ATTACKS = ("scale", "signflip", "noise", "liar", "replica")


@dataclass(frozen=True)
class Attack:
    kind: str  # one of ATTACKS
    rank: int
    start_step: int = 3
    factor: float = 10.0


@dataclass(frozen=True)
class Scenario:
    name: str
    seed: int = 0
    lr: float = 0.01
    data_seed: int = 0
    steps: int = 12
    batch_size: int = 64
    hidden: int = 256
    inputs: int = 64
    momentum: float = 0.0
    input_offset: float = 1.0  # inputs ~ N(offset, 1): ranks' gradients share a direction
    attack: Attack | None = None
    checksum_every: int = 5
    sketch_dim: int = 128
    overhead_steps: int = 0  # > 0: interleaved hook / no-hook timing instead of a spool run


@dataclass
class Run:
    out_dir: Path
    world_size: int
    scenarios: dict[str, Scenario]
    timings: dict[str, dict[int, dict[str, list[float]]]] = field(default_factory=dict)

    def spool(self) -> Path:
        return self.out_dir / "spool"

    def job_dir(self, name: str) -> Path:
        return self.spool() / name


def generate(
    scenarios: list[Scenario], out_dir: Path, *, world_size: int = 4, timeout_seconds: float = 900
) -> Run:
    """Run every scenario on ``world_size`` gloo ranks.

    Raises:
        RuntimeError: the ranks failed (their output is in the message).
    """
    launch_ranks(
        "tests.support.integrity_ranks",
        [asdict(s) for s in scenarios],
        out_dir,
        world_size=world_size,
        timeout_seconds=timeout_seconds,
    )
    run = Run(out_dir, world_size, {s.name: s for s in scenarios})
    for s in scenarios:
        if s.overhead_steps:
            run.timings[s.name] = {
                rank: json.loads((out_dir / "timings" / f"{s.name}-{rank}.json").read_text())
                for rank in range(world_size)
            }
    return run


# ----------------------------------------------------------------- inside the rank processes


def _rank_main(rank: int, spec: dict[str, Any], out_dir: str) -> None:  # pragma: no cover
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(spec["port"])
    dist.init_process_group("gloo", rank=rank, world_size=spec["world_size"])
    torch.set_num_threads(1)
    for raw in spec["scenarios"]:
        if raw["overhead_steps"]:
            _overhead(rank, spec["world_size"], raw, Path(out_dir))
        else:
            _train(rank, spec["world_size"], raw, Path(out_dir))
        dist.barrier()
    dist.destroy_process_group()


def _net(raw: dict[str, Any]) -> Any:  # pragma: no cover
    import torch

    torch.manual_seed(raw["seed"])
    return torch.nn.Sequential(
        torch.nn.Linear(raw["inputs"], raw["hidden"]),
        torch.nn.ReLU(),
        torch.nn.Linear(raw["hidden"], raw["hidden"]),
        torch.nn.ReLU(),
        torch.nn.Linear(raw["hidden"], 10),
    )


def _batches(rank: int, raw: dict[str, Any]) -> Any:  # pragma: no cover
    """A rank's own shard of a teacher-labelled task, in the scenario's data order."""
    import torch

    teacher = torch.Generator().manual_seed(1000 + raw["seed"])
    hidden = torch.randn(raw["inputs"], 64, generator=teacher)
    projection = torch.randn(64, 10, generator=teacher)
    order = torch.Generator().manual_seed(raw["data_seed"] * 7919 + rank)
    while True:  # labels of a random tanh teacher: learnable, not in a few steps
        x = torch.randn(raw["batch_size"], raw["inputs"], generator=order) + raw["input_offset"]
        yield x, (torch.tanh(x @ hidden / 8) @ projection).argmax(dim=1)


def _attack_hook(hook: Any, attack: dict[str, Any] | None, rank: int) -> Any:  # pragma: no cover
    import torch

    from hpcscope.integrity import comm_hook

    if attack is None or attack["rank"] != rank or attack["kind"] == "replica":
        return hook

    @comm_hook
    def attacked(process_group: Any, bucket: Any) -> Any:
        if hook._step < attack["start_step"]:
            return hook(process_group, bucket)
        buffer = bucket.buffer()
        kind = attack["kind"]
        if kind == "liar":
            observation = hook.observe(bucket, flat=buffer.clone())  # reports honest g
            buffer.neg_()  # sends -g
            return hook.send(process_group, bucket, observation)
        with torch.no_grad():
            if kind == "scale":
                buffer.mul_(attack["factor"])
            elif kind == "signflip":
                buffer.neg_()
            elif kind == "noise":
                noise = torch.randn_like(buffer)
                buffer.add_(noise * (attack["factor"] * buffer.norm() / noise.norm()))
        return hook(process_group, bucket)

    return attacked


def _train(rank: int, world: int, raw: dict[str, Any], out_dir: Path) -> None:  # pragma: no cover
    import torch

    from hpcscope.integrity import IntegrityHook

    net = _net(raw)
    model = torch.nn.parallel.DistributedDataParallel(net)
    hook = IntegrityHook(
        out_dir / "spool" / raw["name"],
        job_id=raw["name"],
        rank=rank,
        world_size=world,
        seed=raw["seed"] + 17,
        sketch_dim=raw["sketch_dim"],
        module=net,
        checksum_every=raw["checksum_every"],
        node=f"{raw['name']}-n{rank // 2}",  # two ranks per node, one node set per scenario
        gpu=rank % 2,
    )
    attack = raw["attack"]
    model.register_comm_hook(None, _attack_hook(hook, attack, rank))
    opt = torch.optim.SGD(model.parameters(), lr=raw["lr"], momentum=raw["momentum"])
    batches = _batches(rank, raw)
    for step in range(raw["steps"]):
        x, y = next(batches)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if (
            attack is not None
            and attack["kind"] == "replica"
            and attack["rank"] == rank
            and step + 1 == attack["start_step"]
        ):
            with torch.no_grad():
                for parameter in net.parameters():
                    parameter.add_(attack["factor"])
    hook.close()


def _overhead(
    rank: int, world: int, raw: dict[str, Any], out_dir: Path
) -> None:  # pragma: no cover
    """Three identical models: no comm hook (DDP's built-in AllReduce), PyTorch's
    ``allreduce_hook`` (what the integrity hook wraps) and the integrity hook; each step runs
    all three in a rotating order; record every step time."""
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    from hpcscope.integrity import IntegrityHook

    nets = {name: _net(raw) for name in ("plain", "allreduce_hook", "hooked")}
    models = {name: torch.nn.parallel.DistributedDataParallel(net) for name, net in nets.items()}
    hook = IntegrityHook(
        out_dir / "spool" / raw["name"], job_id=raw["name"], rank=rank, world_size=world,
        seed=raw["seed"], sketch_dim=raw["sketch_dim"], module=nets["hooked"],
        checksum_every=raw["checksum_every"], node="bench", gpu=rank,
    )  # fmt: skip
    models["allreduce_hook"].register_comm_hook(None, allreduce_hook)
    models["hooked"].register_comm_hook(None, hook)
    optimizers = {k: torch.optim.SGD(m.parameters(), lr=raw["lr"]) for k, m in models.items()}
    batches = _batches(rank, raw)
    names = list(models)
    times: dict[str, list[float]] = {key: [] for name in names for key in (name, f"cpu_{name}")}
    for step in range(raw["overhead_steps"] + 3):
        x, y = next(batches)
        for offset in range(len(names)):
            name = names[(step + offset) % len(names)]
            dist.barrier()
            t0, c0 = time.perf_counter(), time.process_time()
            optimizers[name].zero_grad()
            torch.nn.functional.cross_entropy(models[name](x), y).backward()
            optimizers[name].step()
            if step >= 3:  # the first steps build DDP's buckets
                times[name].append(time.perf_counter() - t0)
                times[f"cpu_{name}"].append(time.process_time() - c0)
    hook.close()
    target = out_dir / "timings"
    target.mkdir(exist_ok=True)
    (target / f"{raw['name']}-{rank}.json").write_text(json.dumps(times))


def main() -> None:  # pragma: no cover
    import warnings

    import torch.multiprocessing as mp

    warnings.filterwarnings("ignore")
    spec = json.loads(Path(sys.argv[1]).read_text())
    mp.spawn(_rank_main, args=(spec, sys.argv[2]), nprocs=spec["world_size"], join=True)


if __name__ == "__main__":  # pragma: no cover
    main()
