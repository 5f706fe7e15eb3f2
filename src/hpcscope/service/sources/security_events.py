"""The security alert engine: drains what the Falco and Tetragon sources (and Falco's
``http_output`` on ``POST /api/ingest/falco``) put in the buffer, evaluates the event and
correlation rules, stores the alerts and the accesses to protected paths
(``service/alerts/engine.py``). Polled after the tails, in the same cycle."""

from __future__ import annotations

from datetime import datetime

from hpcscope.service.alerts.engine import SecurityCollection, SecurityLoop
from hpcscope.service.alerts.falco_meaning import load_falco_meaning, meaning_path
from hpcscope.service.collect.source import Batch, Health, Poll, ThreadedSource
from hpcscope.service.security.tetragon_policy import dataset_roots, protected_roots
from hpcscope.service.settings import Settings
from hpcscope.service.source_settings import SecurityEventsSection
from hpcscope.service.sources import SourceContext, SourceSpec


class SecurityEvents(ThreadedSource):
    """Each cycle, one drain of the security events buffer into the rules; between cycles,
    the engine's own loop every ``poll_seconds`` (started at the first cycle, stopped at the
    last), so an event's alert does not wait for the collector's next cycle."""

    name = "security_events"

    def __init__(self, engine: SecurityCollection, *, poll_seconds: float | None = None) -> None:
        self.engine = engine
        self.loop = SecurityLoop(engine, interval_seconds=poll_seconds) if poll_seconds else None

    def read(self, now: datetime) -> Poll:
        if self.loop is not None:
            self.loop.start()
        cycle = self.engine.collect_once(now=now)
        health = Health(
            self.name,
            now,
            rows=cycle.falco_rows + cycle.tetragon_rows,
            alerts=cycle.alerts,
            errors=cycle.errors,
        )
        return Poll(health)

    def finish(self, now: datetime) -> tuple[Batch, ...]:
        if self.loop is not None:
            self.loop.stop()
        return super().finish(now)


def _configured(settings: Settings) -> bool:
    return any(
        value is not None
        for value in (
            settings.falco.ingest_token,
            settings.falco.events_path,
            settings.tetragon.events_path,
        )
    )


def _build(context: SourceContext) -> SecurityEvents:
    topology = context.topology
    settings = context.settings
    return SecurityEvents(
        SecurityCollection(
            context.store,
            context.buffer(),
            context.rules,
            checkpoint_roots=[topology.checkpoint_root],
            dataset_roots=dataset_roots(topology),
            falco_meaning=load_falco_meaning(meaning_path(settings.rules_dir)),
            protected_roots=protected_roots(topology),
        ),
        poll_seconds=settings.security_events.poll_seconds,
    )


SOURCE = SourceSpec(
    name="security_events",
    settings=SecurityEventsSection,
    order=55,
    configured=_configured,
    build=_build,
    summary="the security alert engine over the Falco and Tetragon events",
)
