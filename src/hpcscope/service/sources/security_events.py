"""The security alert engine: drains what the Falco and Tetragon sources (and Falco's
``http_output`` on ``POST /api/ingest/falco``) put in the buffer, evaluates the event and
correlation rules, stores the alerts and the accesses to protected paths
(``service/alerts/engine.py``). Polled after the tails, in the same cycle."""

from __future__ import annotations

from datetime import datetime

from hpcscope.service.alerts.engine import SecurityCollection
from hpcscope.service.collect.source import Health, Poll, ThreadedSource
from hpcscope.service.security.tetragon_policy import protected_roots
from hpcscope.service.settings import Settings
from hpcscope.service.sources import SourceContext, SourceSpec


class SecurityEvents(ThreadedSource):
    """Each cycle, one drain of the security events buffer into the rules."""

    name = "security_events"

    def __init__(self, engine: SecurityCollection) -> None:
        self.engine = engine

    def read(self, now: datetime) -> Poll:
        cycle = self.engine.collect_once(now=now)
        health = Health(
            self.name,
            now,
            rows=cycle.falco_rows + cycle.tetragon_rows,
            alerts=cycle.alerts,
            errors=cycle.errors,
        )
        return Poll(health)


def _configured(settings: Settings) -> bool:
    return any(
        value is not None
        for value in (
            settings.falco_ingest_token,
            settings.falco_events_path,
            settings.tetragon_events_path,
        )
    )


def _build(context: SourceContext) -> SecurityEvents:
    topology = context.topology
    return SecurityEvents(
        SecurityCollection(
            context.store,
            context.buffer(),
            context.rules,
            checkpoint_roots=[topology.checkpoint_root],
            protected_roots=protected_roots(topology),
        )
    )


SOURCE = SourceSpec(
    name="security_events",
    order=55,
    configured=_configured,
    build=_build,
    summary="the security alert engine over the Falco and Tetragon events",
)
