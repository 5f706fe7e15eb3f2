"""Trace captures: the golden path's per-window Kineto traces, analysed per job and window.

Reads the new meta files of ``<spool_dir>/<job>/``, reduces each rank's trace to its summary,
checks the rank's node and GPU against the allocations and analyses a window when all its
ranks are in or ``grace_seconds`` after its first (``service/traces/captures.py``) into
``trace_captures``.
"""

from __future__ import annotations

from datetime import datetime

from hpcscope.service.collect.source import Health, Poll, ThreadedSource
from hpcscope.service.settings import Settings
from hpcscope.service.source_settings import CaptureSection
from hpcscope.service.sources import SourceContext, SourceSpec
from hpcscope.service.traces.captures import CaptureSpool


class Captures(ThreadedSource):
    """The capture spool's new ranks and ready windows, each cycle."""

    name = "capture"

    def __init__(self, spool: CaptureSpool) -> None:
        self.spool = spool

    def read(self, now: datetime) -> Poll:
        cycle = self.spool.collect_once()
        health = Health(
            self.name, now, rows=cycle.windows_analysed, errors=tuple(cycle.errors[:20])
        )
        return Poll(health)


def _configured(settings: Settings) -> bool:
    return settings.capture.spool_dir is not None


def _build(context: SourceContext) -> Captures:
    settings = context.settings
    assert settings.capture.spool_dir is not None
    return Captures(
        CaptureSpool(
            context.store,
            settings.capture.spool_dir,
            grace_seconds=settings.capture.grace_seconds,
        )
    )


SOURCE = SourceSpec(
    name="capture",
    settings=CaptureSection,
    order=70,
    configured=_configured,
    build=_build,
    summary="the golden path's trace capture windows: phases per job and window",
)
