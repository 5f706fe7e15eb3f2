"""``hpcscope alerts``: the alerts you may see, from a running server (``GET /api/alerts``).

The server applies access control (a researcher sees the alerts of their own jobs, a team
lead those of the accounts they coordinate, an admin all); credentials as for ``hpcscope
jobs`` (``--token``/``HPCSCOPE_TOKEN``, or ``--user``/``--password``).
"""

from __future__ import annotations

from urllib.parse import urlencode

import typer

from hpcscope.cli.client import (
    JSON_OPTION,
    PASSWORD_OPTION,
    TOKEN_OPTION,
    URL_OPTION,
    USER_OPTION,
    api_get,
)
from hpcscope.cli.output import print_json, print_table

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
) -> None:
    """List the alerts you may see, most severe and most recent first."""
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
            a["gpu"],
            a["subject"],
            a["count"],
            a["last_seen"],
            a["state"],
            a["key"],
        ]
        for a in data["alerts"]
    ]
    title = f"Alerts ({data['count']})"
    columns = ["Severity", "Rule", "Job", "User", "Node", "GPU", "Subject", "Count",
               "Last seen (UTC)", "State", "Key"]  # fmt: skip
    print_table(title, columns, rows, numeric=["GPU", "Count"])
