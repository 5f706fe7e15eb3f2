"""The read seam between job reports and where GPU samples live (``docs/storage.md``).

A job report needs, per GPU and time, what dcgm-exporter reported (util, SM and tensor active,
clocks, memory, power, temperature...) attributed to jobs by the ``hpc_job`` label: rows of
:data:`hpcscope.model.schemas.GPU_SAMPLE_SCHEMA`. Two backends provide them:

- ``embedded``: hpcscope's own collector wrote them into DuckDB
  (:class:`hpcscope.store.reports.EmbeddedSamples`);
- ``prometheus``: a site's Prometheus, VictoriaMetrics, Thanos or Mimir scraped the same
  exporters, read over the Prometheus HTTP API
  (:class:`hpcscope.service.backends.prometheus.PrometheusSamples`).

The analysis is the same whichever backend answered: it only sees the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal, Protocol

import pyarrow as pa

MetricsBackend = Literal["embedded", "prometheus"]
"""The ``metrics_backend`` setting."""


class GpuSampleReader(Protocol):
    """Reads GPU samples of jobs; the caller has already checked the jobs' visibility."""

    def samples_for_jobs(
        self,
        job_ids: Sequence[str],
        *,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> pa.Table:
        """Rows of ``GPU_SAMPLE_SCHEMA`` of ``job_ids`` with ``since <= ts <= until`` (UTC;
        None: unbounded, as far as the backend keeps samples)."""
        ...
