"""``hpcscope alerts``: the alerts you may see, from a running server (``GET /api/alerts``).

The server applies access control (a researcher sees the alerts of their own jobs, a team
lead those of the accounts they coordinate, an admin all); credentials as for ``hpcscope
jobs`` (``--token``/``HPCSCOPE_TOKEN``, or ``--user``/``--password``).
"""

from __future__ import annotations

from typing import Any
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
)
from hpcscope.cli.output import print_json, print_table
from hpcscope.cli.tables import Column, table_format

STATE_OPTION = typer.Option(
    None, "--state", help="Only alerts in this state: open, acknowledged or resolved."
)
SEVERITY_OPTION = typer.Option(
    None, "--severity", help="Only alerts at least this severe: LOW, MEDIUM, HIGH, CRITICAL."
)
VECTOR_OPTION = typer.Option(
    None, "--vector", help="Only this threat vector: 1-6 or a name (supply-chain, ...)."
)
JOB_OPTION = typer.Option(None, "--job", help="Only this job's alerts.")

#: Rule, job, user and node always; the key (to acknowledge or resolve) is whole or left out
#: on a narrow terminal, named in the footer (``cli/tables.py``).
COLUMNS = (
    Column("severity", priority=1),
    Column("rule", priority=0),
    Column("job id", priority=0),
    Column("user", priority=0),
    Column("node", priority=0),
    Column("container / pod", priority=2),
    Column("GPU", priority=3, numeric=True),
    Column("subject (rank, path, ...)", priority=1, wrap=True),
    Column("count", priority=3, numeric=True),
    Column("last seen (UTC)", priority=2),
    Column("state", priority=1),
    Column("alert key", priority=2),
)


def _place(alert: dict[str, Any]) -> str | None:
    """``container`` / ``pod``, whichever the alert names (a server before them: neither)."""
    parts = [alert.get("container"), alert.get("pod")]
    return " / ".join(p for p in parts if p) or None


def register(app: typer.Typer) -> None:
    app.command("alerts")(alerts)


def alerts(
    url: str = URL_OPTION,
    user: str | None = USER_OPTION,
    password: str | None = PASSWORD_OPTION,
    token: str | None = TOKEN_OPTION,
    state: str | None = STATE_OPTION,
    severity: str | None = SEVERITY_OPTION,
    vector: str | None = VECTOR_OPTION,
    job: str | None = JOB_OPTION,
    json_output: bool = JSON_OPTION,
    output_format: str = FORMAT_OPTION,
) -> None:
    """List the alerts you may see, most severe and most recent first."""
    fmt = table_format(output_format)
    query = {
        k: v
        for k, v in (("state", state), ("severity", severity), ("vector", vector), ("job", job))
        if v
    }
    path = "/api/alerts" + (f"?{urlencode(query)}" if query else "")
    data = api_get(url, path, user, password, json_output, token=token)
    if json_output:
        print_json(data)
        return
    rows = [
        [
            a["severity"],
            a["rule_id"],
            a["job_id"],
            a["user"],
            a["node"],
            _place(a),
            a["gpu"],
            a["subject"],
            a["count"],
            a["last_seen"],
            a["state"],
            a["key"],
        ]
        for a in data["alerts"]
    ]
    print_table(f"Alerts ({data['count']})", COLUMNS, rows, fmt=fmt)
