"""Documents of the job pages' JSON twins and of ``hpcscope jobs --json``.

``GET /api/jobs`` is a :class:`JobList`, ``GET /api/jobs/{id}`` a :class:`JobReportDocument`,
``GET /api/jobs/{id}/timeseries`` a :class:`JobTimeseries`; the collector's health in
``GET /api/cluster`` is a list of :class:`TargetHealth` and of :class:`CollectionGap`.
"""

from __future__ import annotations

from collections.abc import Sequence

from hpcscope.analysis.jobs.report import JobReport
from hpcscope.service.contract import Contract, Number, UtcText


class GpuReportDocument(Contract):
    """One GPU of a job (ratios 0-1, seconds of samples, energy in joules)."""

    node: str
    gpu: int
    gpu_instance_id: int | None
    verdict: str
    reported_util_ratio: Number | None
    sm_active_ratio: Number | None
    tensor_active_ratio: Number | None
    sm_occupancy_ratio: Number | None
    dram_active_ratio: Number | None
    power_watts: Number | None
    sm_clock_hertz: Number | None
    max_temperature_celsius: Number | None
    slowdown_share: Number | None
    throttle_reasons: int
    xid: int | None
    observed_seconds: Number
    useful_seconds: Number
    energy_joules: Number | None


class MetricsReadDocument(Contract):
    """How the metrics backend answered a page's GPU reads: ``backend`` (``embedded``,
    ``prometheus``), ``read`` (``store``, ``recording_rules``, ``query_range``) and the
    resolution read (``step_seconds``: a rule's window, a query_range step; null: every
    sample)."""

    backend: str
    read: str
    step_seconds: Number | None


class JobReportDocument(Contract):
    """What hpcscope says about one job: reported vs real, GPU-hours, cost, verdict."""

    job_id: str
    name: str | None
    user: str | None
    account: str | None
    partition: str | None
    state: str | None
    start_time: UtcText | None
    end_time: UtcText | None
    elapsed_seconds: Number | None
    gpus_allocated: int | None
    gpus_observed: int
    reported_util_ratio: Number | None
    sm_active_ratio: Number | None
    tensor_active_ratio: Number | None
    allocated_gpu_hours: Number | None
    observed_gpu_hours: Number
    useful_gpu_hours: Number
    coverage_ratio: Number | None
    idle_gpus: int
    energy_joules: Number | None
    cost_allocated: Number | None
    cost_useful: Number | None
    cost_lost: Number | None
    currency: str
    verdict: str
    explanation: str
    gpus: list[GpuReportDocument]
    #: ``raw`` samples (running jobs, jobs not yet summarised) or the kept ``summary`` of a
    #: finished job (its raw samples may have passed retention).
    source: str
    #: How the metrics backend answered a ``raw`` report (null for a kept summary).
    metrics: MetricsReadDocument | None = None

    @classmethod
    def from_report(cls, report: JobReport) -> JobReportDocument:
        """The document of one report."""
        return cls.model_validate(report.to_dict())


class JobList(Contract):
    """Every job the caller may see, newest first."""

    jobs: list[JobReportDocument]

    @classmethod
    def from_reports(cls, reports: Sequence[JobReport]) -> JobList:
        """The list document of ``reports`` (in their order)."""
        return cls(jobs=[JobReportDocument.from_report(r) for r in reports])


class GpuSeries(Contract):
    """One GPU's buckets: ``t`` in Unix seconds, one ratio per bucket (null: no sample)."""

    node: str
    gpu: int
    t: list[Number]
    reported_util_ratio: list[Number | None]
    sm_active_ratio: list[Number | None]
    tensor_active_ratio: list[Number | None]


class TimeRange(Contract):
    """A stretch of time in Unix seconds, ``[start, end]``."""

    start: Number
    end: Number


class JobTimeseries(Contract):
    """Per-GPU reported vs real over a job's life (``bucket_seconds`` null: no data left).

    ``source`` says what the buckets were read from (``raw`` samples, 1-minute ``rollup``s, or
    null when nothing is left); ``out_of_retention`` lists the parts of the job's life whose data
    retention dropped, so a chart says so instead of drawing a zero.
    """

    job_id: str
    bucket_seconds: int | None
    source: str | None
    series: list[GpuSeries]
    out_of_retention: list[TimeRange]
    #: How the metrics backend answered (null: nothing was read).
    metrics: MetricsReadDocument | None = None


class TargetHealth(Contract):
    """One scrape target over the last 15 minutes (no job data)."""

    target: str
    exporter: str | None
    node: str | None
    last_attempt: UtcText | None
    last_success: UtcText | None
    failures_since_success: int
    last_error: str | None
    last_duration_seconds: Number | None
    last_samples: int | None
    rejected_lines: int | None


class CollectionGap(Contract):
    """A span in which a target's series has no samples, and why."""

    target: str
    node: str | None
    start_ts: UtcText
    end_ts: UtcText
    reason: str
