"""``hpcscope chargeback``: allocated, useful and lost GPU-hours and their cost per account,
user or partition over a period, from a running server (``GET /api/chargeback``; ``--csv``:
``GET /api/chargeback.csv``).

The server scopes the figures (a researcher's own jobs, a team lead's accounts, an admin all);
credentials as for ``hpcscope jobs``. Definitions: ``docs/chargeback.md``.
"""

from __future__ import annotations

import sys
from urllib.parse import urlencode

import typer

from hpcscope.cli.client import (
    FORMAT_OPTION,
    JSON_OPTION,
    PASSWORD_OPTION,
    TOKEN_OPTION,
    URL_OPTION,
    USER_OPTION,
    api_get,
    api_get_text,
)
from hpcscope.cli.output import EXIT_USAGE_ERROR, fail, print_json, print_table
from hpcscope.cli.tables import Column, table_format

BY_OPTION = typer.Option("account", "--by", help="Group by account, user or partition.")
PERIOD_OPTION = typer.Option(
    None,
    "--period",
    help="YYYY-MM (default: this month, UTC), YYYY, YYYY-MM-DD or YYYY-MM-DD..YYYY-MM-DD.",
)
ACCOUNT_OPTION = typer.Option(None, "--account", help="Only this account's jobs.")
CSV_OPTION = typer.Option(False, "--csv", help="Print CSV (the server's export).")


def register(app: typer.Typer) -> None:
    app.command("chargeback")(chargeback)


def chargeback(
    url: str = URL_OPTION,
    user: str | None = USER_OPTION,
    password: str | None = PASSWORD_OPTION,
    token: str | None = TOKEN_OPTION,
    by: str = BY_OPTION,
    period: str | None = PERIOD_OPTION,
    account: str | None = ACCOUNT_OPTION,
    json_output: bool = JSON_OPTION,
    csv_output: bool = CSV_OPTION,
    output_format: str = FORMAT_OPTION,
) -> None:
    """Chargeback and waste: GPU-hours allocated, useful and lost by cause, and cost."""
    fmt = table_format(output_format)
    if json_output and csv_output:
        fail("--json and --csv exclude each other", code=EXIT_USAGE_ERROR, as_json=True)
    query = {k: v for k, v in (("by", by), ("period", period), ("account", account)) if v}
    if csv_output:
        sys.stdout.write(
            api_get_text(
                url, f"/api/chargeback.csv?{urlencode(query)}", user, password, token=token
            )
        )
        return
    data = api_get(
        url, f"/api/chargeback?{urlencode(query)}", user, password, json_output, token=token
    )
    if json_output:
        print_json(data)
        return
    currency = data["currency"]
    causes = [c["cause"] for c in data["causes"]]
    rows = [
        [
            r["key"],
            r["jobs"],
            f"{r['allocated_gpu_hours']:,.1f}",
            f"{r['useful_gpu_hours']:,.1f}",
            "—" if r["useful_ratio"] is None else f"{r['useful_ratio'] * 100:.0f} %",
            f"{r['lost_gpu_hours']:,.1f}",
            *(f"{r['waste_gpu_hours'][c]:,.1f}" for c in causes),
            f"{r['cost']:,.2f}",
            f"{r['lost_cost']:,.2f}",
        ]
        for r in [*data["rows"], data["total"]]
    ]
    columns = [
        Column(data["by"], priority=0),
        Column("jobs", priority=2, numeric=True),
        Column("allocated GPU-h", priority=1, numeric=True),
        Column("useful GPU-h", priority=1, numeric=True),
        Column("useful share", priority=2, numeric=True),
        Column("lost GPU-h", priority=1, numeric=True),
        *(Column(f"lost {c.replace('_', ' ')} GPU-h", priority=3, numeric=True) for c in causes),
        Column(f"cost {currency}", priority=2, numeric=True),
        Column(f"cost of lost {currency}", priority=2, numeric=True),
    ]
    title = f"Chargeback {data['period']} by {data['by']} ({data['scope']})"
    print_table(title, columns, rows, fmt=fmt)
