"""GPU processes: each node's NVML process list, with each process's Slurm job (GM-1, GM-2).

Reads ``<dir>/<node>/compute-apps.csv`` when it changed, with the node's
``gpus.csv`` and the copied ``proc/<pid>/cgroup`` files, into ``gpu_processes``
(``service/telemetry_rules/spool.py``).
"""

from __future__ import annotations

from datetime import datetime

from hpcscope.service.collect.source import Health, Poll, ThreadedSource
from hpcscope.service.settings import Settings
from hpcscope.service.source_settings import GpuProcessesSection
from hpcscope.service.sources import SourceContext, SourceSpec
from hpcscope.service.telemetry_rules.spool import ProcessSpool


class GpuProcesses(ThreadedSource):
    """The process spool's changed nodes, each cycle."""

    name = "gpu_processes"

    def __init__(self, spool: ProcessSpool) -> None:
        self.spool = spool

    def read(self, now: datetime) -> Poll:
        read = self.spool.collect_once()
        return Poll(Health(self.name, now, rows=read.rows, errors=read.errors[:20]))


def _configured(settings: Settings) -> bool:
    return settings.gpu_processes.dir is not None


def _build(context: SourceContext) -> GpuProcesses:
    assert context.settings.gpu_processes.dir is not None
    return GpuProcesses(ProcessSpool(context.store, context.settings.gpu_processes.dir))


SOURCE = SourceSpec(
    name="gpu_processes",
    settings=GpuProcessesSection,
    order=61,
    configured=_configured,
    build=_build,
    summary="per-node NVML process lists with their Slurm jobs: GM-1/GM-2",
)
