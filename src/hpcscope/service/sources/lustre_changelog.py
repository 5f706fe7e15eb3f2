"""Lustre changelogs: each MDT's changelog records, for the data-path rules (DP-1, DP-2).

Reads the complete lines appended to ``<dir>/<mdt>.changelog`` since the last
poll, resolves parent FIDs with ``lfs fid2path`` when ``fid2path_mount`` is set, and
stores each record once in ``lustre_changelog`` (``service/telemetry_rules/spool.py``).
"""

from __future__ import annotations

from datetime import datetime

from hpcscope.service.collect.source import Health, Poll, ThreadedSource
from hpcscope.service.settings import Settings
from hpcscope.service.source_settings import LustreChangelogSection
from hpcscope.service.sources import SourceContext, SourceSpec
from hpcscope.service.telemetry_rules.spool import ChangelogSpool, fid2path


class LustreChangelog(ThreadedSource):
    """The changelog spool's new records, each cycle."""

    name = "lustre_changelog"

    def __init__(self, spool: ChangelogSpool) -> None:
        self.spool = spool

    def read(self, now: datetime) -> Poll:
        read = self.spool.collect_once()
        return Poll(Health(self.name, now, rows=read.rows, errors=read.errors[:20]))


def _configured(settings: Settings) -> bool:
    return settings.lustre_changelog.dir is not None


def _build(context: SourceContext) -> LustreChangelog:
    settings = context.settings
    assert settings.lustre_changelog.dir is not None
    mount = settings.lustre_changelog.fid2path_mount
    return LustreChangelog(
        ChangelogSpool(
            context.store,
            settings.lustre_changelog.dir,
            resolve=fid2path(mount) if mount else None,
            jobid_pattern=(
                settings.lustre_changelog.jobid_pattern or settings.lustre_job_stats.jobid_pattern
            ),
        )
    )


SOURCE = SourceSpec(
    name="lustre_changelog",
    settings=LustreChangelogSection,
    order=60,
    configured=_configured,
    build=_build,
    summary="Lustre MDT changelog records: file creations and opens for DP-1/DP-2",
)
