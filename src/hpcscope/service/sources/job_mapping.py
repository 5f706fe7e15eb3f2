"""The allocations: dcgm-exporter's hpc-job-mapping files and the Slurm prolog's job records.

Each cycle, first of all (the GPU samples of the cycle are judged by them), reads the
per-node mapping directories under ``dir`` (the files dcgm-exporter reads: one file per GPU
naming its jobs) and the prolog/epilog records under ``records_dir`` into
``job_allocations`` (``service/collect/attribution.py``).
"""

from __future__ import annotations

from datetime import datetime

from hpcscope.model.timeutil import epoch_seconds
from hpcscope.service.collect.attribution import MappingRoot
from hpcscope.service.collect.source import Health, Poll, ThreadedSource
from hpcscope.service.settings import Settings
from hpcscope.service.source_settings import JobMappingSection
from hpcscope.service.sources import SourceContext, SourceSpec


class JobMapping(ThreadedSource):
    """Reads the mapping root's node directories each cycle."""

    name = "job_mapping"

    def __init__(self, root: MappingRoot) -> None:
        self.root = root

    def read(self, now: datetime) -> Poll:
        lines = self.root.collect_once()
        return Poll(Health(self.name, now, rows=lines))


def _configured(settings: Settings) -> bool:
    return settings.job_mapping.dir is not None


def _build(context: SourceContext) -> JobMapping:
    settings = context.settings
    assert settings.job_mapping.dir is not None
    clock = context.clock
    return JobMapping(
        MappingRoot(
            context.store,
            settings.job_mapping.dir,
            settings.job_mapping.records_dir,
            clock=lambda: epoch_seconds(clock.now()),
        )
    )


SOURCE = SourceSpec(
    name="job_mapping",
    settings=JobMappingSection,
    order=0,
    configured=_configured,
    build=_build,
    summary="GPU to job mapping files and the prolog's job records: the allocations",
)
