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
from starlette.responses import Response

from hpcscope.model.access import Principal
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.auth import check_principal, require_principal, service_of
from hpcscope.serve.kept import (
    REPORT_EVERY_SECONDS,
    Document,
    cached_json,
    kept_page,
    page_key,
    query_of,
    reader_key,
    serialise,
)
from hpcscope.serve.offload import answer
from hpcscope.serve.read_lane import LaneRoute
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
) -> tuple[ChargebackReport, Document]:
    """The report and its document (kept). Raises ValueError (a bad parameter)."""
    service = service_of(request)
    grouping, span = _by(by), _period(period)

    def compute() -> tuple[ChargebackReport, Document]:
        found = reads.report(
            service.store,
            principal,
            service.topology,
            service.settings,
            period=span,
            by=grouping,
            account=account or None,
        )
        return found, serialise(found)

    key = ("serve.chargeback", reader_key(principal), grouping, span, account or None)
    kept: tuple[ChargebackReport, Document] = service.snapshots.get(
        key, compute, every_seconds=REPORT_EVERY_SECONDS, size=lambda value: len(value[1][0])
    )
    return kept


def _trend(
    request: Request, principal: Principal, by: str, period: str | None, months: int
) -> tuple[ChargebackTrend, Document]:
    """The trend and its document (kept). Raises ValueError (a bad parameter)."""
    service = service_of(request)
    grouping, span = _by(by), _period(period)

    def compute() -> tuple[ChargebackTrend, Document]:
        found = reads.trend(
            service.store,
            principal,
            service.topology,
            service.settings,
            period=span,
            months=months,
            by=grouping,
        )
        return found, serialise(found)

    key = ("serve.chargeback_trend", reader_key(principal), grouping, span, months)
    kept: tuple[ChargebackTrend, Document] = service.snapshots.get(
        key, compute, every_seconds=REPORT_EVERY_SECONDS, size=lambda value: len(value[1][0])
    )
    return kept


def _report_json(
    request: Request, principal: Principal, by: str, period: str | None, account: str | None
) -> Response:
    return cached_json(request, *_report(request, principal, by, period, account)[1])


def _lane_report_json(request: Request) -> Response:
    """``GET /api/chargeback`` for the read lane: its query parsed as the route does (a bad
    value raises, and the app answers it)."""
    principal = check_principal(request)
    query = query_of(request, ("by", "period", "account"))
    return _report_json(
        request, principal, query.get("by", "account"), query.get("period"), query.get("account")
    )


@router.get("/api/chargeback", response_model=ChargebackReport)
async def chargeback_json(
    request: Request,
    principal: PrincipalDep,
    by: ByQuery = "account",
    period: PeriodQuery = None,
    account: AccountQuery = None,
) -> Response:
    """Allocated, useful and lost GPU-hours by cause, and cost, per group; 400 on a bad
    parameter."""
    try:
        return await answer(_report_json, request, principal, by, period, account)
    except ValueError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None


@router.get("/api/chargeback/trend", response_model=ChargebackTrend)
async def chargeback_trend_json(
    request: Request,
    principal: PrincipalDep,
    by: ByQuery = "account",
    period: PeriodQuery = None,
    months: MonthsQuery = TREND_MONTHS,
) -> Response:
    """Lost GPU-hours and their cost per group, month by month up to ``period``."""
    try:
        found = await answer(_trend, request, principal, by, period, months)
    except ValueError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None
    return cached_json(request, *found[1])


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
        report, _ = await answer(_report, request, principal, by, period, account)
    except ValueError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None
    name = f"chargeback-{report.by}-{report.period}" + (f"-{account}" if account else "")
    safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in name)
    return Response(
        report_csv(report),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{safe}.csv"'},
    )


def _page(
    request: Request, principal: Principal, by: str, period: str | None, view: str
) -> Response:
    """The page (kept); raises ValueError on a bad parameter."""
    _by(by), _period(period)  # a bad parameter raises here, before anything is kept
    shown = "decision" if view == "decision" else "lead"

    def page() -> Response:
        report, _ = _report(request, principal, by, period, None)
        trend, _ = _trend(request, principal, by, period, TREND_MONTHS)
        return _render_page(request, principal, report, trend, None, shown, by, period)

    return kept_page(
        request,
        ("serve.chargeback_page", page_key(principal), by, period, shown),
        page,
        every_seconds=REPORT_EVERY_SECONDS,
    )


def _render_page(
    request: Request,
    principal: Principal,
    report: ChargebackReport | None,
    trend: ChargebackTrend | None,
    error: str | None,
    view: str,
    by: str,
    period: str | None,
) -> Response:
    return render(
        request,
        "chargeback.html",
        {
            "report": report,
            "trend": trend,
            "error": error,
            "view": view,
            "by": by,
            "period": period or (report.period if report else ""),
            "groupings": [g.value for g in GroupBy],
        },
        principal=principal,
        status_code=200 if error is None else 400,
    )


def _lane_page(request: Request) -> Response:
    principal = check_principal(request)
    query = query_of(request, ("by", "period", "view"))
    return _page(
        request,
        principal,
        query.get("by", "account"),
        query.get("period"),
        query.get("view", "lead"),
    )


@router.get("/chargeback")
async def chargeback_page(
    request: Request,
    principal: PrincipalDep,
    by: ByQuery = "account",
    period: PeriodQuery = None,
    view: Annotated[str, Query(description="lead or decision")] = "lead",
) -> Response:
    try:
        return await answer(_page, request, principal, by, period, view)
    except ValueError as exc:
        shown = "decision" if view == "decision" else "lead"
        return _render_page(request, principal, None, None, str(exc), shown, by, period)


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
        report, _ = await answer(_report, request, principal, "user", period, account)
    except ValueError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None
    return render(request, "chargeback_report.html", {"report": report}, principal=principal)


#: What the read lane answers past the framework (``serve/read_lane.py``), query strings
#: included (parsed as the routes do; anything else is the app's).
LANE_ROUTES = (
    LaneRoute("/api/chargeback", lambda request, _: _lane_report_json(request), query=True),
    LaneRoute("/chargeback", lambda request, _: _lane_page(request), query=True),
)
