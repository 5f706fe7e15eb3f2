"""The chargeback page, its JSON twins, the CSV export and the printable monthly report of an
account (``docs/chargeback.md``).

``GET /chargeback`` (``by``: account, user or partition; ``period``: ``2026-11``, ``2026``,
``2026-11-03`` or ``2026-11-01..2026-11-15``; ``view``: ``lead`` for the table by cause or
``decision`` for lost GPU-hours and cost per team with the trend), ``GET /api/chargeback``,
``GET /api/chargeback/trend`` (``months``), ``GET /api/chargeback.csv`` and ``GET
/chargeback/report`` (``account``, ``period``: the monthly report of an account lead, by
user). Every read is scoped server-side: a researcher's own jobs, a team lead's accounts, an
admin all; a figure never includes a job the viewer may not see.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from hpcscope.model.access import Principal
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.auth import require_principal, service_of
from hpcscope.serve.templating import render
from hpcscope.service.chargeback import reads
from hpcscope.service.chargeback.contracts import ChargebackReport, ChargebackTrend
from hpcscope.service.chargeback.export import report_csv
from hpcscope.service.chargeback.reads import GroupBy, Period, month_of, parse_period

router = APIRouter()

PrincipalDep = Annotated[Principal, Depends(require_principal)]
ByQuery = Annotated[str, Query(description="account, user or partition")]
PeriodQuery = Annotated[
    str | None,
    Query(description="YYYY-MM (default: this month, UTC), YYYY, YYYY-MM-DD or a day range"),
]
AccountQuery = Annotated[str | None, Query(description="only this account's jobs")]
MonthsQuery = Annotated[int, Query(ge=1, le=36, description="months of the trend")]

#: Months of the trend shown on the page.
TREND_MONTHS = 6


def _by(value: str) -> GroupBy:
    try:
        return GroupBy(value.strip().lower())
    except ValueError:
        raise ValueError(f"by {value!r}: one of {', '.join(g.value for g in GroupBy)}") from None


def _period(value: str | None) -> Period:
    return month_of(utcnow()) if not value else parse_period(value)


def _report(
    request: Request, principal: Principal, by: str, period: str | None, account: str | None
) -> ChargebackReport:
    """Raises ValueError (a bad parameter)."""
    service = service_of(request)
    return reads.report(
        service.store,
        principal,
        service.topology,
        service.settings,
        period=_period(period),
        by=_by(by),
        account=account or None,
    )


def _trend(
    request: Request, principal: Principal, by: str, period: str | None, months: int
) -> ChargebackTrend:
    service = service_of(request)
    return reads.trend(
        service.store,
        principal,
        service.topology,
        service.settings,
        period=_period(period),
        months=months,
        by=_by(by),
    )


@router.get("/api/chargeback")
async def chargeback_json(
    request: Request,
    principal: PrincipalDep,
    by: ByQuery = "account",
    period: PeriodQuery = None,
    account: AccountQuery = None,
) -> ChargebackReport:
    """Allocated, useful and lost GPU-hours by cause, and cost, per group; 400 on a bad
    parameter."""
    try:
        return await run_in_threadpool(_report, request, principal, by, period, account)
    except ValueError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None


@router.get("/api/chargeback/trend")
async def chargeback_trend_json(
    request: Request,
    principal: PrincipalDep,
    by: ByQuery = "account",
    period: PeriodQuery = None,
    months: MonthsQuery = TREND_MONTHS,
) -> ChargebackTrend:
    """Lost GPU-hours and their cost per group, month by month up to ``period``."""
    try:
        return await run_in_threadpool(_trend, request, principal, by, period, months)
    except ValueError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None


@router.get("/api/chargeback.csv", response_class=Response)
async def chargeback_csv(
    request: Request,
    principal: PrincipalDep,
    by: ByQuery = "account",
    period: PeriodQuery = None,
    account: AccountQuery = None,
) -> Response:
    """The report as CSV (one line per group and a ``total`` line)."""
    try:
        report = await run_in_threadpool(_report, request, principal, by, period, account)
    except ValueError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None
    name = f"chargeback-{report.by}-{report.period}" + (f"-{account}" if account else "")
    safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in name)
    return Response(
        report_csv(report),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{safe}.csv"'},
    )


@router.get("/chargeback")
async def chargeback_page(
    request: Request,
    principal: PrincipalDep,
    by: ByQuery = "account",
    period: PeriodQuery = None,
    view: Annotated[str, Query(description="lead or decision")] = "lead",
) -> Response:
    status, error = 200, None
    report = trend = None
    try:
        report = await run_in_threadpool(_report, request, principal, by, period, None)
        trend = await run_in_threadpool(_trend, request, principal, by, period, TREND_MONTHS)
    except ValueError as exc:
        status, error = 400, str(exc)
    return render(
        request,
        "chargeback.html",
        {
            "report": report,
            "trend": trend,
            "error": error,
            "view": "decision" if view == "decision" else "lead",
            "by": by,
            "period": period or (report.period if report else ""),
            "groupings": [g.value for g in GroupBy],
        },
        principal=principal,
        status_code=status,
    )


@router.get("/chargeback/report")
async def chargeback_account_report(
    request: Request,
    principal: PrincipalDep,
    account: Annotated[str, Query(description="the account")],
    period: PeriodQuery = None,
) -> Response:
    """The printable monthly report of one account, by user (only the jobs in the viewer's
    scope: a team lead's account in full, a researcher's own jobs in it)."""
    try:
        report = await run_in_threadpool(_report, request, principal, "user", period, account)
    except ValueError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None
    return render(request, "chargeback_report.html", {"report": report}, principal=principal)
