"""``hpcscope notify audit`` and ``hpcscope notify preferences``, from a running server.

``audit`` lists the audited notifications and actions (``GET /api/notify/audit``: admins
only, the server answers 403 to anyone else); ``preferences`` shows your own notification
choices (``GET /api/notify/preferences``; change them on the ``/notify`` page or with ``PUT``).
Credentials as for ``hpcscope jobs`` (``--token``/``HPCSCOPE_TOKEN``, or ``--user``/``--password``).
"""

from __future__ import annotations

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
from hpcscope.cli.output import print_json, print_table, stdout_console
from hpcscope.cli.tables import Column, table_format

#: Rule, job and user always; the detail wraps (``cli/tables.py``).
AUDIT_COLUMNS = (
    Column("when (UTC)", priority=1),
    Column("kind", priority=2),
    Column("rule", priority=0),
    Column("job id", priority=0),
    Column("user", priority=0),
    Column("channel", priority=2),
    Column("recipient", priority=3),
    Column("outcome", priority=1),
    Column("detail", priority=2, wrap=True),
)

app = typer.Typer(
    help="Notifications: the audit log (admins) and your own preferences.", no_args_is_help=True
)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="notify")


@app.command("audit")
def audit(
    url: str = URL_OPTION,
    user: str | None = USER_OPTION,
    password: str | None = PASSWORD_OPTION,
    token: str | None = TOKEN_OPTION,
    job: str | None = typer.Option(None, "--job", help="Only this job's entries."),
    kind: str | None = typer.Option(None, "--kind", help="Only notification or action."),
    limit: int = typer.Option(500, "--limit", min=1, max=5000, help="At most this many."),
    json_output: bool = JSON_OPTION,
    output_format: str = FORMAT_OPTION,
) -> None:
    """Every notification sent or withheld and every action taken, newest first (admins)."""
    fmt = table_format(output_format)
    query = {k: v for k, v in (("job", job), ("kind", kind)) if v} | {"limit": str(limit)}
    data = api_get(
        url, f"/api/notify/audit?{urlencode(query)}", user, password, json_output, token=token
    )
    if json_output:
        print_json(data)
        return
    rows = [
        [e["at"], e["kind"], e["rule_id"], e["job_id"] or "", e["user"] or "", e["channel"],
         e["recipient"] or "", e["outcome"], e["detail"]]
        for e in data["entries"]
    ]  # fmt: skip
    print_table(f"Notification audit ({len(rows)})", AUDIT_COLUMNS, rows, fmt=fmt)


@app.command("preferences")
def preferences(
    url: str = URL_OPTION,
    user: str | None = USER_OPTION,
    password: str | None = PASSWORD_OPTION,
    token: str | None = TOKEN_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """Your own notification preferences: channels on or off, muted rules."""
    data = api_get(url, "/api/notify/preferences", user, password, json_output, token=token)
    if json_output:
        print_json(data)
        return
    on = {True: "on", False: "off"}
    muted = ", ".join(data["muted_rules"]) or "none"
    stdout_console().print(
        f"{data['user']}: e-mail {on[data['email_enabled']]}, webhook "
        f"{on[data['webhook_enabled']]}; muted rules: {muted} (of {', '.join(data['rules'])})",
        highlight=False,
    )
