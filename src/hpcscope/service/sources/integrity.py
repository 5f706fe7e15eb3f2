"""Gradient integrity: the opt-in DDP hook's per-rank records, judged into GI alerts.

Reads the lines appended to ``<spool_dir>/<job>/rank-<r>.jsonl`` (and the training
events beside them) since the last poll, re-derives each record's job from the allocations
and raises the GI rules' alerts (``service/integrity/spool.py``).
"""

from __future__ import annotations

from datetime import datetime

from hpcscope.service.collect.source import Health, Poll, ThreadedSource
from hpcscope.service.integrity.spool import IntegritySpool
from hpcscope.service.settings import Settings
from hpcscope.service.source_settings import IntegritySection
from hpcscope.service.sources import SourceContext, SourceSpec


class Integrity(ThreadedSource):
    """The integrity spool's new lines each cycle."""

    name = "integrity"

    def __init__(self, spool: IntegritySpool) -> None:
        self.spool = spool

    def read(self, now: datetime) -> Poll:
        cycle = self.spool.collect_once()
        health = Health(
            self.name,
            now,
            rows=cycle.records,
            alerts=cycle.alerts,
            errors=tuple(cycle.errors[:20]),
        )
        return Poll(health)


def _configured(settings: Settings) -> bool:
    return settings.integrity.spool_dir is not None


def _build(context: SourceContext) -> Integrity:
    assert context.settings.integrity.spool_dir is not None
    spool = IntegritySpool(context.store, context.settings.integrity.spool_dir, context.rules)
    return Integrity(spool)


SOURCE = SourceSpec(
    name="integrity",
    settings=IntegritySection,
    order=40,
    configured=_configured,
    build=_build,
    summary="the DDP hook's gradient records: GI alerts",
)
