"""CSV export of a chargeback report: one line per group and a last ``(total)`` line, GPU-hours
to the second (6 decimals), money to the cent. Columns are fixed (:data:`CSV_COLUMNS`): a
spreadsheet or a billing script can rely on them."""

from __future__ import annotations

import csv
import io

from hpcscope.analysis.chargeback.waste import WasteCause
from hpcscope.service.chargeback.contracts import ChargebackReport, ChargeRowDocument

CSV_COLUMNS = (
    "period",
    "by",
    "key",
    "jobs",
    "allocated_gpu_hours",
    "useful_gpu_hours",
    "useful_ratio",
    "lost_gpu_hours",
    *(f"{cause.value}_gpu_hours" for cause in WasteCause),
    "cost",
    "lost_cost",
    "currency",
)


def _line(report: ChargebackReport, row: ChargeRowDocument) -> list[str]:
    ratio = "" if row.useful_ratio is None else f"{row.useful_ratio:.6f}"
    return [
        report.period,
        report.by,
        row.key,
        str(row.jobs),
        f"{row.allocated_gpu_hours:.6f}",
        f"{row.useful_gpu_hours:.6f}",
        ratio,
        f"{row.lost_gpu_hours:.6f}",
        *(f"{row.waste_gpu_hours[cause.value]:.6f}" for cause in WasteCause),
        f"{row.cost:.2f}",
        f"{row.lost_cost:.2f}",
        report.currency,
    ]


def report_csv(report: ChargebackReport) -> str:
    """The report as CSV text (RFC 4180, CRLF line ends, a header line)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for row in report.rows:
        writer.writerow(_line(report, row))
    writer.writerow(_line(report, report.total))
    return out.getvalue()
