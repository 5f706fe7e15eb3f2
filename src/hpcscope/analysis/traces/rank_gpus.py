"""Which physical GPU each rank of a traced job ran on.

A Kineto trace names its rank (``distributedInfo.rank``), often its host (``host_name``) and,
on every kernel, the CUDA device index (``args.device``). That index counts the GPUs *visible
to the process*: Slurm sets ``CUDA_VISIBLE_DEVICES`` to the GPUs it allocated on the node, in
ascending order, so device ``i`` is the ``i``-th allocated GPU of that node (when every GPU of
the node is allocated, or the variable is unset, it is the physical index itself).

Mapping, for each rank:

* node: the allocated node whose name matches ``host_name`` (short names compared); without a
  host name, the ``rank // gpus_per_node``-th allocated node in Slurm's node order (torchrun's
  and Slurm's default block placement, ``SLURM_DISTRIBUTION=block``);
* GPU: the ``device``-th allocated GPU of that node; without a device index (CPU-only traces),
  the ``rank % gpus_per_node``-th.

Limits: a job that sets ``CUDA_VISIBLE_DEVICES`` itself, places ranks cyclically across
nodes, or runs several ranks per GPU is mapped wrongly; the mapping says how it was made
(``host_name`` or ``rank order``; ``device index`` or ``local rank``) so a report can show it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RankGpu:
    """A rank's GPU and how it was found."""

    rank: int
    node: str
    gpu: int
    how: str


def _natural(name: str) -> tuple[object, ...]:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def short_host(host: str) -> str:
    """A host name as Slurm names nodes: the first label, lower case (``gpu01.cluster`` and
    ``GPU01`` are node ``gpu01``)."""
    return host.split(".", 1)[0].lower()


def map_ranks_to_gpus(
    ranks: Iterable[tuple[int, str | None, int | None]],
    allocation: Sequence[tuple[str, int]],
) -> dict[int, RankGpu]:
    """Map ranks to allocated GPUs.

    Args:
        ranks: ``(rank, host_name, cuda_device_index)`` of each trace (None when unknown).
        allocation: the job's ``(node, gpu)`` pairs (from ``job_allocations``, or the GPUs its
            samples name).

    Returns:
        ``{rank: RankGpu}`` for the ranks that could be placed.
    """
    by_node: dict[str, list[int]] = {}
    for node, gpu in allocation:
        by_node.setdefault(node, [])
        if gpu not in by_node[node]:
            by_node[node].append(gpu)
    if not by_node:
        return {}
    nodes = sorted(by_node, key=_natural)
    for gpus in by_node.values():
        gpus.sort()
    per_node = len(by_node[nodes[0]])
    short = {short_host(node): node for node in nodes}
    out: dict[int, RankGpu] = {}
    for rank, host, device in ranks:
        found = short.get(short_host(host)) if host else None
        how_node = "host_name"
        if found is None:
            index = rank // per_node
            if index >= len(nodes):
                continue
            found, how_node = nodes[index], "rank order"
        node = found
        local = device if device is not None else rank % per_node
        how_gpu = "device index" if device is not None else "local rank"
        gpus = by_node[node]
        if not 0 <= local < len(gpus):
            continue
        out[rank] = RankGpu(rank, node, gpus[local], f"{how_node}, {how_gpu}")
    return out
