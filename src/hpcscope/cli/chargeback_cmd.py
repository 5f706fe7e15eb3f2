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
    JSON_OPTION,
    PASSWORD_OPTION,
    TOKEN_OPTION,
    URL_OPTION,
    USER_OPTION,
    api_get,
    api_get_text,
)
from hpcscope.cli.output import EXIT_USAGE_ERROR, fail, print_json, print_table

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
) -> None:
    """Chargeback and waste: GPU-hours allocated, useful and lost by cause, and cost."""
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
        data["by"].capitalize(),
        "Jobs",
        "Allocated GPU-h",
        "Useful GPU-h",
        "Useful",
        "Lost GPU-h",
        *(f"{c.replace('_', ' ')} GPU-h" for c in causes),
        f"Cost {currency}",
        f"Lost {currency}",
    ]
    title = f"Chargeback {data['period']} by {data['by']} ({data['scope']})"
    print_table(title, columns, rows, numeric=columns[1:])
