"""Where job reports read GPU samples: the embedded store or a Prometheus HTTP API.

``metrics_backend: embedded`` (the default) reads the ``gpu_samples`` table hpcscope's collector
fills; ``metrics_backend: prometheus`` reads ``prometheus_url`` (Prometheus, VictoriaMetrics,
Thanos, Mimir). Scheduler records, kept summaries and everything else stay in the store.
"""

from __future__ import annotations

from hpcscope.model.backends import GpuSampleReader
from hpcscope.service.backends.prometheus import MetricsBackendError, PrometheusSamples
from hpcscope.service.settings import Settings
from hpcscope.store import Store
from hpcscope.store.reports import EmbeddedSamples

__all__ = ["MetricsBackendError", "PrometheusSamples", "sample_reader"]


def sample_reader(settings: Settings, store: Store) -> GpuSampleReader:
    """The reader the settings choose (``prometheus_url`` is checked by the settings)."""
    if settings.metrics_backend == "prometheus":
        assert settings.prometheus_url is not None  # the settings validator requires it
        return PrometheusSamples(
            settings.prometheus_url,
            step_seconds=settings.scrape_interval_seconds,
            lookback_seconds=settings.prometheus_lookback_seconds,
            timeout_seconds=settings.prometheus_timeout_seconds,
        )
    return EmbeddedSamples(store)
