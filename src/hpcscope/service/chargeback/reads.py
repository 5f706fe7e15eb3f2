"""Chargeback reads: kept summaries of the jobs a principal may see, turned into
:class:`~hpcscope.analysis.chargeback.waste.JobUse` and aggregated by the analysis.

The GPU model of a job (its rate) is the topology's model of the nodes its GPU rows name (the
most common one when a job spans models); a job without GPU rows costs the default rate. The
rates are the ``chargeback_gpu_hour_rates`` setting over the topology's ``gpu_hour_price``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import polars as pl
import pyarrow as pa

from hpcscope.analysis.chargeback.aggregate import (
    TOTAL,
    ChargedJob,
    ChargeRow,
    Rates,
    chargeback,
    top_losses,
    totals,
)
from hpcscope.analysis.chargeback.aggregate import GroupBy as GroupBy  # re-exported for serve
from hpcscope.analysis.chargeback.aggregate import trend as monthly_trend
from hpcscope.analysis.chargeback.frames import job_charges
from hpcscope.analysis.chargeback.periods import Period as Period  # these three for serve too
from hpcscope.analysis.chargeback.periods import month_of as month_of
from hpcscope.analysis.chargeback.periods import months_ending
from hpcscope.analysis.chargeback.periods import parse_period as parse_period
from hpcscope.analysis.chargeback.waste import CAUSE_LABELS, JobUse, WasteCause
from hpcscope.model.access import Principal
from hpcscope.model.timeutil import iso_z
from hpcscope.model.topology import Topology
from hpcscope.service.chargeback.contracts import (
    ChargebackReport,
    ChargebackTrend,
    ChargeRowDocument,
    JobLossDocument,
    RateDocument,
    TrendSeriesDocument,
    WasteCauseDocument,
)
from hpcscope.service.settings import Settings
from hpcscope.store import Store
from hpcscope.store import chargeback as queries


def rates_of(settings: Settings, topology: Topology) -> Rates:
    """The site's GPU-hour rates: per model from the settings, else the topology's price."""
    return Rates(
        default_gpu_hour=topology.gpu_hour_price,
        currency=topology.currency,
        per_model=dict(settings.chargeback_gpu_hour_rates),
    )


def node_models(topology: Topology) -> dict[str, str]:
    """Node name -> the model name of its GPUs (nodes without GPUs are absent)."""
    return {node.name: node.gpus[0].model.name for node in topology.nodes if node.gpus}


def scope_text(principal: Principal) -> str:
    """Whose jobs a principal's figures cover, in words."""
    if principal.is_admin:
        return "all jobs"
    accounts = sorted(principal.job_scope().accounts)
    if accounts:
        return f"jobs of {principal.name} and of accounts {', '.join(accounts)}"
    return f"jobs of {principal.name}"


def charged_jobs(
    store: Store,
    principal: Principal,
    topology: Topology,
    *,
    start: datetime,
    end: datetime,
    account: str | None = None,
) -> list[ChargedJob]:
    """The kept summaries ``principal`` may see of jobs overlapping ``[start, end)``, each with
    its charge (attributed over the GPU rows at once: :func:`~hpcscope.analysis.chargeback.
    frames.job_charges`; the jobs carry no GPU rows of their own)."""
    scope = principal.job_scope()
    summaries = queries.summaries_overlapping(store, scope, start=start, end=end, account=account)
    gpu_rows = queries.gpu_rows_overlapping(store, scope, start=start, end=end, account=account)
    charges = job_charges(_frame(summaries), _frame(gpu_rows))
    job_models = _job_models(_frame(gpu_rows.select(["job_id", "node"])), topology)
    charged: list[ChargedJob] = []
    c = summaries.to_pydict()
    for i, job_id in enumerate(c["job_id"]):
        use = JobUse(
            job_id=job_id,
            user=c["user"][i],
            account=c["account"][i],
            partition=c["partition"][i],
            gpu_model=job_models.get(job_id),
            start_time=c["start_time"][i],
            end_time=c["end_time"][i],
            gpus_allocated=c["gpus_allocated"][i],
            allocated_gpu_seconds=c["allocated_gpu_seconds"][i],
            observed_gpu_seconds=c["observed_gpu_seconds"][i] or 0.0,
            useful_gpu_seconds=c["useful_gpu_seconds"][i] or 0.0,
            exit_cause=c["exit_cause"][i],
        )
        charged.append(ChargedJob(use, charges[job_id]))
    return charged


def _job_models(gpu_nodes: pl.DataFrame, topology: Topology) -> dict[str, str]:
    """Job id -> the most common GPU model of its GPU rows' nodes (by name on a tie)."""
    models = node_models(topology)
    counted = (
        gpu_nodes.with_columns(
            pl.col("node").replace_strict(models, default=None, return_dtype=pl.String).alias("m")
        )
        .drop_nulls("m")
        .group_by("job_id", "m")
        .agg(pl.len().alias("n"))
        .sort(["job_id", "n", "m"], descending=[False, True, False])
        .unique("job_id", keep="first", maintain_order=True)
    )
    return dict(zip(counted["job_id"].to_list(), counted["m"].to_list(), strict=True))


def _frame(table: pa.Table) -> pl.DataFrame:
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def row_document(row: ChargeRow) -> ChargeRowDocument:
    """A charge row in GPU-hours."""
    return ChargeRowDocument(
        key=row.key,
        jobs=row.jobs,
        allocated_gpu_hours=row.allocated_gpu_seconds / 3600.0,
        useful_gpu_hours=row.useful_gpu_seconds / 3600.0,
        useful_ratio=row.useful_ratio,
        lost_gpu_hours=row.lost_gpu_seconds / 3600.0,
        waste_gpu_hours={c.value: v / 3600.0 for c, v in row.waste_gpu_seconds.items()},
        cost=row.cost,
        lost_cost=row.waste_cost,
    )


def _rates_documents(rates: Rates, topology: Topology) -> list[RateDocument]:
    models = sorted({*node_models(topology).values(), *rates.per_model})
    return [RateDocument(gpu_model=m, gpu_hour_rate=rates.for_model(m)) for m in models]


def causes() -> list[WasteCauseDocument]:
    """Every waste cause with its meaning, in display order."""
    return [WasteCauseDocument(cause=c.value, meaning=CAUSE_LABELS[c]) for c in WasteCause]


def report(
    store: Store,
    principal: Principal,
    topology: Topology,
    settings: Settings,
    *,
    period: Period,
    by: GroupBy,
    account: str | None = None,
) -> ChargebackReport:
    """Chargeback of ``period`` grouped ``by``, over the jobs ``principal`` may see."""
    rates = rates_of(settings, topology)
    charged = charged_jobs(
        store, principal, topology, start=period.start, end=period.end, account=account
    )
    rows = chargeback(charged, period, by=by, rates=rates)
    return ChargebackReport(
        by=by.value,
        period=period.label,
        start=iso_z(period.start),
        end=iso_z(period.end),
        account=account,
        scope=scope_text(principal),
        currency=rates.currency,
        default_gpu_hour_rate=rates.default_gpu_hour,
        rates=_rates_documents(rates, topology),
        causes=causes(),
        rows=[row_document(r) for r in rows],
        total=row_document(totals(rows)),
        top_jobs=[
            JobLossDocument(
                job_id=j.job_id,
                user=j.user,
                account=j.account,
                lost_gpu_hours=j.lost_gpu_seconds / 3600.0,
                main_cause=j.main_cause.value,
                lost_cost=j.lost_cost,
            )
            for j in top_losses(charged, period, rates=rates)
        ],
    )


def _series(key: str, rows: list[ChargeRow]) -> TrendSeriesDocument:
    return TrendSeriesDocument(
        key=key,
        allocated_gpu_hours=[r.allocated_gpu_seconds / 3600.0 for r in rows],
        useful_gpu_hours=[r.useful_gpu_seconds / 3600.0 for r in rows],
        lost_gpu_hours=[r.lost_gpu_seconds / 3600.0 for r in rows],
        lost_cost=[r.waste_cost for r in rows],
    )


def trend(
    store: Store,
    principal: Principal,
    topology: Topology,
    settings: Settings,
    *,
    period: Period,
    months: int,
    by: GroupBy,
) -> ChargebackTrend:
    """Lost GPU-hours and cost per group over the ``months`` months up to ``period``'s last."""
    rates = rates_of(settings, topology)
    spans = months_ending(period, months)
    charged = charged_jobs(store, principal, topology, start=spans[0].start, end=spans[-1].end)
    per_group: Mapping[str, list[ChargeRow]] = monthly_trend(charged, spans, by=by, rates=rates)
    ordered = sorted(per_group.items(), key=lambda kv: -sum(r.lost_gpu_seconds for r in kv[1]))
    total = [totals(rows[i] for rows in per_group.values()) for i in range(len(spans))]
    return ChargebackTrend(
        by=by.value,
        months=[m.label for m in spans],
        scope=scope_text(principal),
        currency=rates.currency,
        series=[_series(key, rows) for key, rows in ordered],
        total=_series(TOTAL, total),
    )


def account_seconds(store: Store) -> list[tuple[str, float, float]]:
    """``(account, allocated, useful)`` GPU-seconds of every finished job per account (``""``
    for jobs without one), unscoped: for ``/metrics``, which requires an admin."""
    return [
        (
            str(row["account"] or ""),
            float(row["allocated_gpu_seconds"] or 0.0),
            float(row["useful_gpu_seconds"] or 0.0),
        )
        for row in queries.seconds_by_account(store)
    ]
