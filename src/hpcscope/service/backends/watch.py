"""An engine that is down is a collection fault: the collection-health alert ``OPS-1``.

With ``metrics_backend: prometheus`` the GPU samples are collected by the site's engine, so
hpcscope's collection of them is the engine answering. After every collector cycle
:class:`EngineWatch` asks the engine one cheap instant query; an engine that has not answered
for longer than the silence threshold raises ``OPS-1`` with the engine's URL as the target
(once while it is down, again when it answers, with the gap recorded in ``collection_gaps``),
the same alert as a dcgm-exporter target that is not scraped (``docs/scraping.md``). The pages
meanwhile say what they cannot show (``docs/storage.md``, "An engine that does not answer").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

import pyarrow as pa

from hpcscope.analysis.collection_health import Gap, gap_alert
from hpcscope.model.alerts import Alert
from hpcscope.model.schemas import GAP_SCHEMA
from hpcscope.model.timeutil import utcnow
from hpcscope.service.backends.client import EngineClient, MetricsBackendError
from hpcscope.store import Store
from hpcscope.store import alerts as alert_store

log = logging.getLogger(__name__)

#: What the watch asks: answered by every Prometheus-API engine without reading any series.
PROBE = "vector(1)"


class EngineWatch:
    """Raises ``OPS-1`` while the engine does not answer (see the module docstring).

    Args:
        store: where the alert and the gap go.
        engine: the process' engine client.
        silence_seconds: how long the engine may not answer before it is an outage.
        now: the clock.
    """

    def __init__(
        self,
        store: Store,
        engine: EngineClient,
        *,
        silence_seconds: float,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        self.store = store
        self.engine = engine
        self.silence_seconds = silence_seconds
        self._now = now
        self._last_ok: datetime | None = None
        self._failing: tuple[datetime, str] | None = None
        self._alerted = False

    def after_cycle(self) -> Alert | None:
        """Probe the engine once; the alert raised (or closed), if any."""
        now = self._now()
        try:
            self.engine.query(PROBE, at=now)
        except MetricsBackendError as error:
            return self._down(now, str(error))
        return self._up(now)

    def _down(self, now: datetime, reason: str) -> Alert | None:
        if self._failing is None:
            self._failing = (self._last_ok or now, reason)
        since, first_reason = self._failing
        gap = Gap(self.engine.url, None, since, now, first_reason)
        if gap.seconds < self.silence_seconds or self._alerted:
            return None
        self._alerted = True
        alert = gap_alert(gap, now=now, ongoing=True)
        alert_store.upsert_alerts(self.store, [alert]).result()
        log.warning("metrics engine down: %s", reason)
        return alert

    def _up(self, now: datetime) -> Alert | None:
        self._last_ok = now
        failing, self._failing = self._failing, None
        alerted, self._alerted = self._alerted, False
        if failing is None:
            return None
        gap = Gap(self.engine.url, None, failing[0], now, failing[1])
        self.store.append("collection_gaps", pa.Table.from_pylist([gap.row()], schema=GAP_SCHEMA))
        if not alerted and gap.seconds < self.silence_seconds:
            return None
        alert = gap_alert(gap, now=now)
        alert_store.upsert_alerts(self.store, [alert]).result()
        log.info("metrics engine answers again after %.0f s", gap.seconds)
        return alert
