"""The SLO document (``GET /api/slo``, ``hpcscope slo --json``, ``docs/schemas/slo-report``)."""

from __future__ import annotations

from hpcscope.service.contract import Contract, Number, UtcText


class WindowBurnDocument(Contract):
    """The burn rate over one alert window ending now (null: no event in the window)."""

    window_seconds: Number
    good: Number
    total: Number
    burn_rate: float | None


class BurnAlertDocument(Contract):
    """One multiwindow multi-burn-rate pair and whether its condition holds now."""

    name: str
    severity: str
    long_window_seconds: Number
    short_window_seconds: Number
    burn_rate_threshold: Number
    can_fire: bool
    firing: bool


class HistoryPointDocument(Contract):
    """Good and total events of one day, and their SLI (null: no event that day)."""

    bucket_start: UtcText
    good: Number
    total: Number
    sli_ratio: float | None


class SloDocument(Contract):
    """One SLO over the compliance window: SLI, error budget, burn rates, alerts, history."""

    slo: str
    title: str
    measures: str
    event_unit: str
    objective_ratio: float
    window_seconds: Number
    good: Number
    total: Number
    sli_ratio: float | None
    error_budget_ratio: float
    budget_remaining_ratio: float
    max_burn_rate: float
    burns: list[WindowBurnDocument]
    alerts: list[BurnAlertDocument]
    history: list[HistoryPointDocument]


class QueueWaitGroupDocument(Contract):
    """Queue waits (Slurm submit to start) of the jobs that started in the window, per
    partition and QOS."""

    partition: str | None
    qos: str | None
    jobs: int
    p50_wait_seconds: float
    p95_wait_seconds: float


class AccountSloDocument(Contract):
    """One account's SLIs over the window (inside the reader's scope)."""

    account: str | None
    queue_wait_sli_ratio: float | None
    job_success_sli_ratio: float | None
    gpu_efficiency_sli_ratio: float | None
    ended_jobs: int


class SloReport(Contract):
    """The SLOs as one principal may see them: over their own jobs (researcher), their
    accounts' (team lead) or the cluster's (admin)."""

    generated_at: UtcText
    scope: str
    window_seconds: Number
    queue_wait_threshold_seconds: Number
    slos: list[SloDocument]
    queue_waits: list[QueueWaitGroupDocument]
    ended_jobs_by_cause: dict[str, int]
    accounts: list[AccountSloDocument]
