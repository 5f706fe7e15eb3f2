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

from hpcscope.cli.client import JSON_OPTION, PASSWORD_OPTION, URL_OPTION, USER_OPTION, api_get
from hpcscope.cli.output import print_json, print_table

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
    json_output: bool = JSON_OPTION,
) -> None:
    """Who opened, read, mapped or wrote a protected path: jobs, users, processes, bytes."""
    query = {"path": path, **({"since": since} if since else {})}
    data = api_get(url, f"/api/access?{urlencode(query)}", user, password, json_output)
    if json_output:
        print_json(data)
        return
    if records:
        rows = [
            [r["ts"], r["access"], r["bytes"], r["path"], r["job_id"], r["user"], r["node"],
             r["binary"], r["pid"], r["source_kind"]]
            for r in data["records"]
        ]  # fmt: skip
        columns = ["Time (UTC)", "Access", "Bytes", "Path", "Job", "User", "Node", "Process",
                   "PID", "Source"]  # fmt: skip
        print_table(f"Access records of {path}", columns, rows, numeric=["Bytes", "PID"])
        return
    rows = [
        [a["job_id"], a["user"], a["account"], a["node"], a["binary"], a["pid"],
         ", ".join(a["accesses"]), a["read_bytes"], a["written_bytes"], a["mapped_bytes"],
         a["first_seen"], a["last_seen"]]
        for a in data["accessors"]
    ]  # fmt: skip
    columns = ["Job", "User", "Account", "Node", "Process", "PID", "Accesses",
               "Read (bytes)", "Written (bytes)", "Mapped (bytes)", "First seen (UTC)",
               "Last seen (UTC)"]  # fmt: skip
    print_table(
        f"Who accessed {path}",
        columns,
        rows,
        numeric=["PID", "Read (bytes)", "Written (bytes)", "Mapped (bytes)"],
    )
