"""Chargeback rows: jobs' charges inside a period, grouped by account, user or partition, and
priced per GPU model.

A row's figures are sums over its jobs of :func:`~hpcscope.analysis.chargeback.waste.
attribute_waste` taken at each job's :func:`~hpcscope.analysis.chargeback.periods.
overlap_share` of the period. Cost = GPU-hours x the rate of the job's GPU model (per GPU-hour,
:class:`Rates`); the waste cost is the wasted GPU-hours at the same rate.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from hpcscope.analysis.chargeback.periods import Period, overlap_share
from hpcscope.analysis.chargeback.waste import JobCharge, JobUse, WasteCause, attribute_waste

#: The group of jobs with no value for the grouping column.
NO_VALUE = "(none)"

#: The key of the row that sums all groups (in brackets: no account, user or partition name).
TOTAL = "(total)"


class GroupBy(StrEnum):
    """What a chargeback row stands for."""

    ACCOUNT = "account"
    USER = "user"
    PARTITION = "partition"


@dataclass(frozen=True, slots=True)
class Rates:
    """Price of one GPU-hour per GPU model name (``H100-SXM5-80GB``), and for any other."""

    default_gpu_hour: float
    currency: str
    per_model: Mapping[str, float] = field(default_factory=dict)

    def for_model(self, model: str | None) -> float:
        if model is not None and model in self.per_model:
            return self.per_model[model]
        return self.default_gpu_hour


@dataclass
class ChargeRow:
    """One group's charge in one period (GPU-seconds; cost in the rates' currency)."""

    key: str
    jobs: int = 0
    allocated_gpu_seconds: float = 0.0
    useful_gpu_seconds: float = 0.0
    waste_gpu_seconds: dict[WasteCause, float] = field(
        default_factory=lambda: dict.fromkeys(WasteCause, 0.0)
    )
    cost: float = 0.0
    waste_cost: float = 0.0

    @property
    def lost_gpu_seconds(self) -> float:
        """All waste causes together (= allocated - useful)."""
        return sum(self.waste_gpu_seconds.values())

    @property
    def useful_ratio(self) -> float | None:
        if self.allocated_gpu_seconds <= 0:
            return None
        return self.useful_gpu_seconds / self.allocated_gpu_seconds

    def add(self, other: ChargeRow) -> None:
        self.jobs += other.jobs
        self.allocated_gpu_seconds += other.allocated_gpu_seconds
        self.useful_gpu_seconds += other.useful_gpu_seconds
        for cause, value in other.waste_gpu_seconds.items():
            self.waste_gpu_seconds[cause] += value
        self.cost += other.cost
        self.waste_cost += other.waste_cost


@dataclass(frozen=True, slots=True)
class ChargedJob:
    """A job with its whole charge (:func:`attribute_waste`), computed once for every period
    and view that reads it."""

    job: JobUse
    charge: JobCharge


def charge_jobs(jobs: Iterable[JobUse]) -> list[ChargedJob]:
    """Each job with its charge."""
    return [ChargedJob(job, attribute_waste(job)) for job in jobs]


def group_key(job: JobUse, by: GroupBy) -> str:
    value = {
        GroupBy.ACCOUNT: job.account,
        GroupBy.USER: job.user,
        GroupBy.PARTITION: job.partition,
    }[by]
    return value if value else NO_VALUE


def chargeback(
    jobs: Iterable[ChargedJob], period: Period, *, by: GroupBy, rates: Rates
) -> list[ChargeRow]:
    """One row per group with jobs inside ``period``, most lost GPU-seconds first."""
    rows: dict[str, ChargeRow] = {}
    for charged in jobs:
        job = charged.job
        share = overlap_share(job.start_time, job.end_time, period)
        if share <= 0.0:
            continue
        charge = charged.charge.scaled(share)
        rate_per_second = rates.for_model(job.gpu_model) / 3600.0
        key = group_key(job, by)
        row = rows.get(key)
        if row is None:
            row = rows[key] = ChargeRow(key)
        row.jobs += 1
        row.allocated_gpu_seconds += charge.allocated_gpu_seconds
        row.useful_gpu_seconds += charge.useful_gpu_seconds
        lost = 0.0
        for cause, value in charge.waste_gpu_seconds.items():
            row.waste_gpu_seconds[cause] += value
            lost += value
        row.cost += charge.allocated_gpu_seconds * rate_per_second
        row.waste_cost += lost * rate_per_second
    return sorted(rows.values(), key=lambda r: (-r.lost_gpu_seconds, r.key))


def totals(rows: Iterable[ChargeRow], *, key: str = TOTAL) -> ChargeRow:
    """The sum of ``rows``."""
    total = ChargeRow(key)
    for row in rows:
        total.add(row)
    return total


def trend(
    jobs: Iterable[ChargedJob], months: list[Period], *, by: GroupBy, rates: Rates
) -> dict[str, list[ChargeRow]]:
    """Per group, one row per period of ``months`` (an empty row where it had no job)."""
    listed = list(jobs)
    per_month = [
        {row.key: row for row in chargeback(listed, month, by=by, rates=rates)} for month in months
    ]
    keys = sorted({key for month in per_month for key in month})
    return {key: [month.get(key, ChargeRow(key)) for month in per_month] for key in keys}


@dataclass(frozen=True, slots=True)
class JobLoss:
    """One job's lost GPU-seconds inside a period, its largest cause and their cost."""

    job_id: str
    user: str | None
    account: str | None
    lost_gpu_seconds: float
    main_cause: WasteCause
    lost_cost: float


def top_losses(
    jobs: Iterable[ChargedJob], period: Period, *, rates: Rates, limit: int = 10
) -> list[JobLoss]:
    """The ``limit`` jobs that lost the most GPU-seconds inside ``period`` (ties by job id)."""
    losses: list[JobLoss] = []
    for charged in jobs:
        job = charged.job
        share = overlap_share(job.start_time, job.end_time, period)
        if share <= 0.0:
            continue
        waste = charged.charge.waste_gpu_seconds
        lost = sum(waste.values()) * share
        if lost <= 0.0:
            continue
        main = max(waste, key=waste.__getitem__)
        cost = lost * rates.for_model(job.gpu_model) / 3600.0
        losses.append(JobLoss(job.job_id, job.user, job.account, lost, main, cost))
    return sorted(losses, key=lambda j: (-j.lost_gpu_seconds, j.job_id))[:limit]
