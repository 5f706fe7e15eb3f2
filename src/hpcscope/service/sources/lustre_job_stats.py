"""Lustre job_stats: per-job I/O of every OSS and MDS, from a spool of snapshot files.

Reads the ``<server>.job_stats`` files of ``dir`` whose modification time or size changed
(``service/collect/lustre_spool.py``) into ``lustre_job_stats``; each file read is one
``scrapes`` row (exporter ``lustre``) and one of the poll's targets.
"""

from __future__ import annotations

from datetime import datetime

from hpcscope.service.collect.lustre_spool import LustreSpool, scrape_rows
from hpcscope.service.collect.source import Batch, Health, Poll, ThreadedSource
from hpcscope.service.settings import Settings
from hpcscope.service.source_settings import LustreJobStatsSection
from hpcscope.service.sources import SourceContext, SourceSpec


class LustreJobStats(ThreadedSource):
    """The job_stats spool, read when its files change."""

    name = "lustre_job_stats"

    def __init__(self, spool: LustreSpool) -> None:
        self.spool = spool

    def read(self, now: datetime) -> Poll:
        reads = self.spool.collect_once()
        health = Health(
            self.name,
            now,
            targets=len(reads),
            ok=sum(1 for read in reads if read.ok),
            rows=sum(read.stored for read in reads),
            errors=tuple(read.error or f"{read.path}: failed" for read in reads if not read.ok),
        )
        return Poll(health, (Batch("scrapes", scrape_rows(reads)),) if reads else ())


def _configured(settings: Settings) -> bool:
    return settings.lustre_job_stats.dir is not None


def _build(context: SourceContext) -> LustreJobStats:
    settings = context.settings
    assert settings.lustre_job_stats.dir is not None
    return LustreJobStats(
        LustreSpool(
            context.store,
            settings.lustre_job_stats.dir,
            jobid_pattern=settings.lustre_job_stats.jobid_pattern,
        )
    )


SOURCE = SourceSpec(
    name="lustre_job_stats",
    settings=LustreJobStatsSection,
    order=30,
    configured=_configured,
    build=_build,
    summary="Lustre job_stats snapshots of every OSS/MDS: per-job I/O",
)
