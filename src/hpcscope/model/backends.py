"""The read seam between the pages and where GPU samples live (``docs/storage.md``).

Every read of GPU samples hpcscope makes goes through one method of :class:`GpuMetrics`, one
method per read:

- :meth:`GpuMetrics.job_gpus`: what a job report (the job page, the job list, the kept summary
  behind chargeback and the SLOs, the notifications' job notes) reads of a job's GPUs;
- :meth:`GpuMetrics.samples_for_jobs`: raw samples of jobs (the live verdicts, the telemetry
  rules, the straggler evidence of traces);
- :meth:`GpuMetrics.jobs_seen`: which jobs had GPUs reporting in a window;
- :meth:`GpuMetrics.latest` and :meth:`GpuMetrics.last_seen`: the cluster overview and the
  live diagram;
- :meth:`GpuMetrics.gpu_timeseries`: a job's per-GPU charts, the notes' recent minutes;
- :meth:`GpuMetrics.idle_gpu_samples` and :meth:`GpuMetrics.xid_counts`: the telemetry rules'
  GPU inputs (the rules themselves run in hpcscope, on either backend).

Two backends answer them:

- ``embedded``: hpcscope's own collector wrote the samples into DuckDB
  (:class:`hpcscope.store.reports.EmbeddedSamples`);
- ``prometheus``: a site's Prometheus, VictoriaMetrics, Thanos or Mimir scraped the same
  exporters, read over the Prometheus HTTP API
  (:class:`hpcscope.service.backends.prometheus.PrometheusSamples`), from its recording rules
  when it has them (aggregates), else from raw ``query_range`` at a bounded step.

The analysis is the same whichever backend answered: it sees raw samples
(``GPU_SAMPLE_SCHEMA``) or per-GPU aggregates (:data:`GPU_AGGREGATE_SCHEMA`), and each read
says how it was answered (:class:`ReadSource`), which the page's JSON shows.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

import pyarrow as pa

from hpcscope.model.schemas import TS

MetricsBackend = Literal["embedded", "prometheus"]
"""The ``metrics_backend`` setting."""

MetricsRead = Literal["store", "recording_rules", "query_range"]
"""How a read was answered: the embedded store, the engine's recording rules, or the engine's
raw samples (``query_range``)."""

#: Columns of a GPU's aggregate whose mean a report shows (sum and count each).
AGGREGATE_MEANS: tuple[str, ...] = (
    "reported_util_ratio",
    "sm_active_ratio",
    "tensor_active_ratio",
    "sm_occupancy_ratio",
    "dram_active_ratio",
    "power_watts",
    "sm_clock_hertz",
)

GPU_AGGREGATE_SCHEMA = pa.schema(
    [
        pa.field("job_id", pa.string()),
        pa.field("node", pa.string(), nullable=False),
        pa.field("gpu", pa.int16(), nullable=False),
        pa.field("gpu_instance_id", pa.int16()),
        pa.field("observed_seconds", pa.float64()),
        pa.field("useful_seconds", pa.float64()),
        *[
            pa.field(f"{column}_{part}", pa.float64())
            for column in AGGREGATE_MEANS
            for part in ("sum", "count")
        ],
        pa.field("energy_joules", pa.float64()),
        pa.field("max_temperature_celsius", pa.float64()),
        pa.field("max_fb_used_bytes", pa.float64()),
        pa.field("slowdown_seconds", pa.float64()),
        pa.field("thermal_seconds", pa.float64()),
        pa.field("xid", pa.int64()),
        pa.field("first_ts", TS),
        pa.field("last_ts", TS),
    ]
)
"""One row per job GPU (and MIG instance) over a window: sums a report folds into means
(``<column>_sum`` / ``<column>_count``, base units), observed and useful GPU-seconds, energy
(J), maxima, seconds with a slowdown (and a thermal) clock reason, the Xid seen to change, the
first and last time covered."""


@dataclass(frozen=True, slots=True)
class ReadSource:
    """Which backend answered a read, and how (the ``metrics`` object of a page's JSON).

    Attributes:
        backend: ``embedded`` or ``prometheus``.
        read: ``store``, ``recording_rules`` or ``query_range``.
        step_seconds: the resolution read (a rule's window, a ``query_range`` step); None for
            the store's raw samples.
    """

    backend: MetricsBackend
    read: MetricsRead
    step_seconds: float | None = None

    def to_dict(self) -> dict[str, object]:
        return {"backend": self.backend, "read": self.read, "step_seconds": self.step_seconds}


STORE_READ = ReadSource("embedded", "store")


@dataclass(frozen=True, slots=True)
class JobGpuRead:
    """What a report reads of jobs' GPUs: raw samples (``GPU_SAMPLE_SCHEMA``) or aggregates
    (:data:`GPU_AGGREGATE_SCHEMA`), exactly one of the two.

    Attributes:
        samples: raw (or downsampled) samples, each weighing the time to the next one.
        aggregates: per-GPU aggregates of the engine's recording rules.
        max_interval_seconds: the cap of one sample's weight for ``samples`` (three scrape
            intervals, or the ``query_range`` step when it is coarser).
        source: how it was read.
    """

    source: ReadSource
    samples: pa.Table | None = None
    aggregates: pa.Table | None = None
    max_interval_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class GpuTime:
    """Allocated GPU time and how much of it the SMs were really active.

    ``allocated_seconds`` counts every scraped interval a job held a GPU; ``measured_seconds``
    the part with a real-efficiency sample (SM_ACTIVE; unknown while profiling is paused);
    ``useful_seconds`` = sum of interval x SM_ACTIVE; ``reported_busy_seconds`` = sum of
    interval x GPU_UTIL. Lost = measured - useful.
    """

    allocated_seconds: float
    measured_seconds: float
    useful_seconds: float
    reported_busy_seconds: float
    first_ts: datetime | None
    last_ts: datetime | None
    jobs: int


@dataclass(frozen=True, slots=True)
class TimeseriesRead:
    """Per job GPU and time bucket: ``bucket`` (its start), ``job_id``, ``node``, ``gpu``,
    ``reported_util_ratio``, ``sm_active_ratio``, ``tensor_active_ratio`` (bucket means),
    ordered by bucket, job, node and GPU."""

    table: pa.Table
    source: ReadSource


class GpuSampleReader(Protocol):
    """Reads raw GPU samples of jobs; the caller has already checked the jobs' visibility."""

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


class GpuMetrics(GpuSampleReader, Protocol):
    """Every GPU-sample read (the module docstring). Times are naive UTC; callers check
    visibility and scope before anything they read reaches a viewer."""

    @property
    def backend(self) -> MetricsBackend:
        """``embedded`` or ``prometheus``."""
        ...

    @property
    def lag_seconds(self) -> float:
        """How long after a sample every read includes it (0 for the store; an engine's
        recording rules include it at their next evaluation)."""
        ...

    def job_gpus(
        self,
        job_ids: Sequence[str],
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        columns: Collection[str] | None = None,
    ) -> JobGpuRead:
        """The GPUs of ``job_ids`` in ``[since, until]`` as a report reads them.

        ``columns``: the :data:`GPU_AGGREGATE_SCHEMA` columns the caller uses (None: all); an
        answer in aggregates may leave the others null (raw samples come whole)."""
        ...

    def jobs_seen(
        self,
        *,
        since: datetime,
        until: datetime | None = None,
        job_ids: Sequence[str] | None = None,
    ) -> list[str]:
        """Job ids with GPU samples in ``[since, until]`` (any job, scheduler-known or not;
        only those of ``job_ids`` when given), sorted."""
        ...

    def latest(
        self,
        *,
        since: datetime,
        until: datetime | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """The newest sample at or before ``until`` of every GPU (one row per job copy of a
        shared GPU) that reported since ``since``: ``GPU_SAMPLE_SCHEMA`` rows. ``columns``:
        the sample columns the caller reads (default all); a backend may leave the others
        null (an engine is then not asked for them)."""
        ...

    def last_seen(self, *, since: datetime) -> Mapping[tuple[str, int], datetime]:
        """When each (node, GPU) last reported, for those that did since ``since``."""
        ...

    def idle_gpu_samples(self, *, since: datetime, until: datetime) -> pa.Table:
        """For the telemetry rules (SC-4, GM-1): every sample in ``[since, until]`` (``ts``,
        ``node``, ``gpu``, ``job_id``, ``reported_util_ratio``, ``sm_active_ratio``,
        ``fb_used_bytes``) of the GPUs that had a sample of no job then, by node, GPU, time."""
        ...

    def xid_counts(self, *, since: datetime, until: datetime) -> pa.Table:
        """dcgm-exporter's Xid counts (``DCGM_EXP_XID_ERRORS_COUNT``) in ``[since, until]``:
        rows of :data:`hpcscope.model.node_facts.GPU_XID_COUNT_SCHEMA`."""
        ...

    def gpu_time(
        self,
        job_ids: Sequence[str] | None,
        *,
        since: datetime,
        until: datetime,
        max_interval_seconds: float,
    ) -> GpuTime:
        """Allocated, measured, useful and reported-busy GPU-seconds of ``job_ids`` (None:
        every job) between ``since`` and ``until`` (the diagram's cost of lost GPU-hours)."""
        ...

    def gpu_timeseries(
        self,
        job_ids: Sequence[str],
        *,
        bucket_seconds: int,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> TimeseriesRead:
        """Per job GPU, the means of each time bucket (:class:`TimeseriesRead`)."""
        ...
