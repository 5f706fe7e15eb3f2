"""``hpcscope access PATH``: who read my weights, from a running server (``GET /api/access``).

Lists the jobs, users and processes that opened, read, mapped or wrote a protected path (a
checkpoint directory, a weight file, a dataset root) and what is under it, with bytes and
time. The server applies access control: accesses by your jobs, and every access to the paths
your jobs created (a team lead: their accounts'); an admin sees all. Credentials as for
``hpcscope jobs``.
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
from hpcscope.cli.output import print_json, print_table
from hpcscope.cli.tables import Column, table_format

PATH_ARGUMENT = typer.Argument(..., help="An absolute path: a file or a directory.")
SINCE_OPTION = typer.Option(
    None, "--since", help="Only accesses at or after this time (ISO 8601, UTC)."
)
RECORDS_OPTION = typer.Option(
    False, "--records", help="List every access record, not one line per accessor."
)


def register(app: typer.Typer) -> None:
    app.command("access")(access)


def access(
    path: str = PATH_ARGUMENT,
    url: str = URL_OPTION,
    user: str | None = USER_OPTION,
    password: str | None = PASSWORD_OPTION,
    since: str | None = SINCE_OPTION,
    records: bool = RECORDS_OPTION,
    token: str | None = TOKEN_OPTION,
    json_output: bool = JSON_OPTION,
    output_format: str = FORMAT_OPTION,
) -> None:
    """Who opened, read, mapped or wrote a protected path: jobs, users, processes, bytes."""
    fmt = table_format(output_format)
    query = {"path": path, **({"since": since} if since else {})}
    data = api_get(url, f"/api/access?{urlencode(query)}", user, password, json_output, token=token)
    if json_output:
        print_json(data)
        return
    if records:
        rows = [
            [r["ts"], r["access"], r["bytes"], r["path"], r["job_id"], r["user"], r["node"],
             r["binary"], r["pid"], r["source_kind"]]
            for r in data["records"]
        ]  # fmt: skip
        columns = [
            Column("time (UTC)", priority=1),
            Column("access", priority=1),
            Column("bytes", priority=2, numeric=True),
            Column("path", priority=1, wrap=True),
            Column("job id", priority=0),
            Column("user", priority=0),
            Column("node", priority=0),
            Column("process", priority=2, wrap=True),
            Column("PID", priority=3, numeric=True),
            Column("source", priority=3),
        ]
        print_table(f"Access records of {path}", columns, rows, fmt=fmt)
        return
    rows = [
        [a["job_id"], a["user"], a["account"], a["node"], a["binary"], a["pid"],
         ", ".join(a["accesses"]), a["read_bytes"], a["written_bytes"], a["mapped_bytes"],
         a["first_seen"], a["last_seen"]]
        for a in data["accessors"]
    ]  # fmt: skip
    columns = [
        Column("job id", priority=0),
        Column("user", priority=0),
        Column("account", priority=3),
        Column("node", priority=0),
        Column("process", priority=1, wrap=True),
        Column("PID", priority=3, numeric=True),
        Column("accesses", priority=1),
        Column("read (bytes)", priority=2, numeric=True),
        Column("written (bytes)", priority=2, numeric=True),
        Column("mapped (bytes)", priority=3, numeric=True),
        Column("first seen (UTC)", priority=3),
        Column("last seen (UTC)", priority=2),
    ]
    print_table(f"Who accessed {path}", columns, rows, fmt=fmt)
