"""The SLO report of one principal: every figure over the jobs their scope admits.

Access (``docs/slo.md``, "Who sees what"): a researcher's SLOs are computed over their own jobs,
a team lead's over their own and their accounts' jobs, an admin's over the cluster. No figure
of a report comes from a job outside the reader's scope, so a cluster-wide aggregate (which
could give away another user's wait or failure when few jobs ran) is an admin's only; the
per-account breakdown is cut from the same scoped records.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl

from hpcscope.analysis.slo import events as slo_events
from hpcscope.analysis.slo.budget import error_budget_ratio
from hpcscope.model.access import JobScope, Principal, Role
from hpcscope.model.timeutil import iso_z
from hpcscope.service.slo.config import GPU_EFFICIENCY, JOB_SUCCESS, QUEUE_WAIT, SloConfig
from hpcscope.service.slo.contracts import (
    AccountSloDocument,
    BurnAlertDocument,
    HistoryPointDocument,
    QueueWaitGroupDocument,
    SloDocument,
    SloReport,
    WindowBurnDocument,
)
from hpcscope.service.slo.records import SloEvents, job_records, slo_events_of
from hpcscope.store import Store

DAY_SECONDS = 86400.0


def scope_name(principal: Principal) -> str:
    """``cluster``, ``accounts`` or ``own jobs``: what the report covers."""
    if principal.is_admin:
        return "cluster"
    if principal.role is Role.TEAM_LEAD and principal.coordinated_accounts:
        return "accounts"
    return "own jobs"


def _slo_documents(events: SloEvents, config: SloConfig, *, now: datetime) -> list[SloDocument]:
    documents = []
    start = now - timedelta(seconds=config.window_seconds)
    for definition in config.definitions:
        windows = slo_events.EventWindows.of(events.by_slo[definition.slo])  # sorted once
        status = slo_events.slo_status(
            windows,
            now=now,
            objective_ratio=definition.objective_ratio,
            window_seconds=config.window_seconds,
            pairs=config.pairs,
        )
        budget = error_budget_ratio(definition.objective_ratio)
        history = slo_events.history(windows, start=start, end=now, bucket_seconds=DAY_SECONDS)
        documents.append(
            SloDocument(
                slo=definition.slo,
                title=definition.title,
                measures=definition.measures,
                event_unit=definition.event_unit,
                objective_ratio=definition.objective_ratio,
                window_seconds=config.window_seconds,
                good=status.good,
                total=status.total,
                sli_ratio=status.sli_ratio,
                error_budget_ratio=budget,
                budget_remaining_ratio=status.budget_remaining_ratio,
                max_burn_rate=1.0 / budget,
                burns=[
                    WindowBurnDocument(
                        window_seconds=b.window_seconds,
                        good=b.good,
                        total=b.total,
                        burn_rate=b.burn_rate,
                    )
                    for b in status.burns
                ],
                alerts=[
                    BurnAlertDocument(
                        name=p.name,
                        severity=p.severity,
                        long_window_seconds=p.long_window_seconds,
                        short_window_seconds=p.short_window_seconds,
                        burn_rate_threshold=p.burn_rate,
                        can_fire=p.burn_rate < 1.0 / budget,
                        firing=p in status.firing,
                    )
                    for p in config.pairs
                ],
                history=[
                    HistoryPointDocument(
                        bucket_start=iso_z(r["bucket_start"]),
                        good=r["good"],
                        total=r["total"],
                        sli_ratio=r["sli_ratio"],
                    )
                    for r in history.iter_rows(named=True)
                ],
            )
        )
    return documents


def _accounts(events: SloEvents, *, start: datetime, end: datetime) -> list[AccountSloDocument]:
    """Each account's SLIs and ended jobs in ``(start, end]``: one grouping per SLO, not a
    filter per account and SLO."""

    def inside(frame: pl.DataFrame, column: str) -> pl.DataFrame:
        return frame.filter((pl.col(column) > start) & (pl.col(column) <= end))

    slis: dict[str, dict[str | None, float | None]] = {}
    for slo in (QUEUE_WAIT, JOB_SUCCESS, GPU_EFFICIENCY):
        sums = (
            inside(events.by_slo[slo], "event_time")
            .group_by("account")
            .agg(pl.col("good").sum(), pl.col("total").sum())
        )
        slis[slo] = {
            r["account"]: (r["good"] / r["total"] if r["total"] > 0 else None)
            for r in sums.iter_rows(named=True)
        }
    ended_rows = inside(events.records.filter(pl.col("exit_cause").is_not_null()), "end_time")
    ended = {
        r["account"]: int(r["n"])
        for r in ended_rows.group_by("account").agg(pl.len().alias("n")).iter_rows(named=True)
    }
    accounts = sorted(set(events.records["account"].to_list()), key=lambda a: (a is None, a or ""))
    return [
        AccountSloDocument(
            account=account,
            queue_wait_sli_ratio=slis[QUEUE_WAIT].get(account),
            job_success_sli_ratio=slis[JOB_SUCCESS].get(account),
            gpu_efficiency_sli_ratio=slis[GPU_EFFICIENCY].get(account),
            ended_jobs=ended.get(account, 0),
        )
        for account in accounts
    ]


def slo_report(
    store: Store, config: SloConfig, principal: Principal, *, now: datetime
) -> SloReport:
    """The SLOs over ``principal``'s scope at ``now`` (module docstring)."""
    return report_for_scope(
        store, config, principal.job_scope(), scope=scope_name(principal), now=now
    )


def report_for_scope(
    store: Store, config: SloConfig, job_scope: JobScope, *, scope: str, now: datetime
) -> SloReport:
    """The SLOs over the jobs ``job_scope`` admits (callers check who may ask)."""
    start = now - timedelta(seconds=config.window_seconds)
    records = job_records(store, job_scope, since=start)
    events = slo_events_of(records, config, now=now)
    waits = slo_events.wait_percentiles(
        events.by_slo[QUEUE_WAIT], start=start, end=now, by=("partition", "qos")
    )
    return SloReport(
        generated_at=iso_z(now),
        scope=scope,
        window_seconds=config.window_seconds,
        queue_wait_threshold_seconds=config.queue_wait_seconds,
        slos=_slo_documents(events, config, now=now),
        queue_waits=[
            QueueWaitGroupDocument(
                partition=r["partition"],
                qos=r["qos"],
                jobs=int(r["jobs"]),
                p50_wait_seconds=float(r["p50_wait_seconds"]),
                p95_wait_seconds=float(r["p95_wait_seconds"]),
            )
            for r in waits.iter_rows(named=True)
        ],
        ended_jobs_by_cause=slo_events.causes(records, start=start, end=now),
        accounts=_accounts(events, start=start, end=now),
    )
