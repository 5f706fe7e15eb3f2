"""The chargeback documents (``docs/schemas/chargeback*.schema.json``).

GPU-hours are unrounded floats (``allocated_gpu_hours * 3600`` gives back the GPU-seconds);
money is in ``currency`` at the rates listed in the document.
"""

from __future__ import annotations

from hpcscope.service.contract import Contract, UtcText


class WasteCauseDocument(Contract):
    """One waste cause: its name and what it counts."""

    cause: str
    meaning: str


class ChargeRowDocument(Contract):
    """One group's charge in the period (or the total)."""

    key: str
    jobs: int
    allocated_gpu_hours: float
    useful_gpu_hours: float
    useful_ratio: float | None
    lost_gpu_hours: float
    waste_gpu_hours: dict[str, float]
    """GPU-hours per waste cause; they sum to ``lost_gpu_hours`` = allocated - useful."""
    cost: float
    lost_cost: float


class RateDocument(Contract):
    """The price of one GPU-hour of a GPU model."""

    gpu_model: str
    gpu_hour_rate: float


class JobLossDocument(Contract):
    """One of the jobs that lost the most GPU-hours in the period."""

    job_id: str
    user: str | None
    account: str | None
    lost_gpu_hours: float
    main_cause: str
    lost_cost: float


class ChargebackReport(Contract):
    """Chargeback of one period grouped by account, user or partition (``GET
    /api/chargeback``, ``hpcscope chargeback --json``)."""

    by: str
    period: str
    start: UtcText
    end: UtcText
    account: str | None
    """Only this account's jobs (the monthly report of an account), or null for all in scope."""
    scope: str
    """Whose jobs the figures cover: ``all jobs``, or the viewer's own jobs and accounts."""
    currency: str
    default_gpu_hour_rate: float
    rates: list[RateDocument]
    causes: list[WasteCauseDocument]
    rows: list[ChargeRowDocument]
    total: ChargeRowDocument
    top_jobs: list[JobLossDocument]
    """The jobs that lost the most GPU-hours inside the period, most first (at most 10)."""


class TrendSeriesDocument(Contract):
    """One group's figures month by month (same order as ``months``)."""

    key: str
    allocated_gpu_hours: list[float]
    useful_gpu_hours: list[float]
    lost_gpu_hours: list[float]
    lost_cost: list[float]


class ChargebackTrend(Contract):
    """Lost GPU-hours and their cost per group over the last months (``GET
    /api/chargeback/trend``): the decision-maker view."""

    by: str
    months: list[str]
    scope: str
    currency: str
    series: list[TrendSeriesDocument]
    total: TrendSeriesDocument
