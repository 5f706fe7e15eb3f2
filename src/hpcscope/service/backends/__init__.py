"""Where GPU-sample reads are answered: the embedded store or a Prometheus-API engine.

``metrics_backend: embedded`` (the default) reads the tables hpcscope's collector fills;
``metrics_backend: prometheus`` reads ``prometheus_url`` (Prometheus, VictoriaMetrics, Thanos,
Mimir) through one :class:`EngineClient` per process. Scheduler records, kept summaries and
everything else stay in the store.
"""

from __future__ import annotations

from hpcscope.model.backends import GpuMetrics
from hpcscope.service.backends.client import (
    EngineClient,
    EngineConfig,
    EngineHealth,
    MetricsBackendError,
)
from hpcscope.service.backends.prometheus import PrometheusSamples
from hpcscope.service.settings import Settings
from hpcscope.store import Store
from hpcscope.store.reports import EmbeddedSamples

__all__ = [
    "EngineClient",
    "EngineConfig",
    "EngineHealth",
    "MetricsBackendError",
    "PrometheusSamples",
    "engine_client",
    "sample_reader",
]


def engine_client(settings: Settings) -> EngineClient:
    """A client of the engine the settings name (``prometheus_url`` is checked by them)."""
    return EngineClient(EngineConfig.from_settings(settings))


def sample_reader(
    settings: Settings, store: Store, *, engine: EngineClient | None = None
) -> GpuMetrics:
    """The backend the settings choose; ``engine``: the process' client (else a new one)."""
    if settings.metrics_backend == "prometheus":
        return PrometheusSamples(
            engine if engine is not None else engine_client(settings),
            step_seconds=settings.scrape_interval_seconds,
            lookback_seconds=settings.prometheus_lookback_seconds,
            recording_rules=settings.prometheus_recording_rules,
            rule_window_seconds=settings.prometheus_rule_interval_seconds,
            rule_delay_seconds=settings.prometheus_rule_delay_seconds,
        )
    return EmbeddedSamples(store)
