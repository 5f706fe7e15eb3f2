"""Nodes and partitions as the scheduler reports them (slurmrestd, ``sinfo --json``, ``sinfo``).

Values, not tables: a cluster has tens to thousands of nodes, read once a minute, and the
consumers (topology check, GPU capacity, which GPU indices are in use) want objects.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcscope.ingest.slurm.gres import GresEntry
from hpcscope.model.errors import SourceError


@dataclass(frozen=True, slots=True)
class SlurmNode:
    """One compute node.

    Attributes:
        name: the node name (``NodeName``).
        states: base state then flags, upper case (``("IDLE", "DRAIN")``).
        partitions: partitions the node belongs to.
        gres: configured GRES (``gpu:h100:8(S:0-1)``).
        gres_used: GRES in use, with the ``IDX:`` lists of busy GPUs.
        cpus: configured CPUs, when reported.
        real_memory_bytes: configured memory, when reported.
        reason: why the node is down or drained.
    """

    name: str
    states: tuple[str, ...]
    partitions: tuple[str, ...] = ()
    gres: tuple[GresEntry, ...] = ()
    gres_used: tuple[GresEntry, ...] = ()
    cpus: int | None = None
    real_memory_bytes: int | None = None
    reason: str | None = None

    @property
    def gpus(self) -> int:
        """Configured GPUs (MIG instances count one each, as Slurm counts them)."""
        return sum(entry.count for entry in self.gres if entry.name == "gpu")

    @property
    def gpus_used(self) -> int:
        """GPUs in use according to ``gres_used``."""
        return sum(entry.count for entry in self.gres_used if entry.name == "gpu")

    @property
    def gpu_indices_used(self) -> tuple[int, ...]:
        """Indices of the busy GPUs (``IDX:0,3``), sorted."""
        out: set[int] = set()
        for entry in self.gres_used:
            if entry.name == "gpu" and entry.indices:
                out.update(entry.indices)
        return tuple(sorted(out))


@dataclass(frozen=True, slots=True)
class SlurmPartition:
    """One partition.

    Attributes:
        name: the partition name, without sinfo's default marker ``*``.
        nodes: its node list as a hostlist expression.
        state: ``UP``, ``DOWN``, ``DRAIN``, ``INACTIVE``.
        is_default: whether jobs land here when they name no partition.
        max_time_seconds: the partition's time limit (None: unlimited or unknown).
        total_nodes: node count, when reported.
        total_cpus: CPU count, when reported.
    """

    name: str
    nodes: str | None
    state: str | None = None
    is_default: bool = False
    max_time_seconds: int | None = None
    total_nodes: int | None = None
    total_cpus: int | None = None


@dataclass(frozen=True, slots=True)
class InventorySnapshot:
    """Nodes and partitions from one document; ``warnings`` lists what was skipped."""

    nodes: tuple[SlurmNode, ...] = ()
    partitions: tuple[SlurmPartition, ...] = ()
    warnings: tuple[SourceError, ...] = ()
