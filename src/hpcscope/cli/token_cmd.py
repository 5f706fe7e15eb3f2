"""``hpcscope token create|list|revoke``: your API tokens, on a running server.

A client command over ``/api/tokens`` (``docs/identity.md``). Create with your password (or an
admin-scope token: a read token creates none), then give scripts the printed token through
``HPCSCOPE_TOKEN``. The secret is printed once, on stdout; the server keeps only its SHA-256.
"""

from __future__ import annotations

from urllib.parse import quote

import typer

from hpcscope.cli.client import (
    FORMAT_OPTION,
    JSON_OPTION,
    PASSWORD_OPTION,
    TOKEN_OPTION,
    URL_OPTION,
    USER_OPTION,
    api_request,
)
from hpcscope.cli.output import print_json, print_table
from hpcscope.cli.tables import Column, table_format

#: The token id (the 8 characters after ``hps_``) and its user always (``cli/tables.py``).
LIST_COLUMNS = (
    Column("token id", priority=0),
    Column("user", priority=0),
    Column("label", priority=1, wrap=True),
    Column("scope", priority=2),
    Column("status", priority=1),
    Column("created (UTC)", priority=3),
    Column("expires (UTC)", priority=2),
    Column("last used (UTC)", priority=3),
    Column("last used from", priority=4),
)

app = typer.Typer(
    help="Create, list and revoke API tokens for scripts (Authorization: Bearer hps_...).",
    no_args_is_help=True,
)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="token")


@app.command("create")
def create(
    label: str = typer.Option(..., "--label", help="What the token is for (shown in lists)."),
    scope: str = typer.Option("read", "--scope", help="read, or admin (admins only)."),
    expires_days: float = typer.Option(
        90.0, "--expires-days", help="Days until it expires (api_token_max_days at most)."
    ),
    for_user: str | None = typer.Option(
        None, "--for-user", help="Admins: create a read token for this user."
    ),
    url: str = URL_OPTION,
    user: str | None = USER_OPTION,
    password: str | None = PASSWORD_OPTION,
    token: str | None = TOKEN_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """Create a token and print it once (``--json``: the token-created document)."""
    body: dict[str, object] = {"label": label, "scope": scope, "expires_days": expires_days}
    if for_user:
        body["user"] = for_user
    data = api_request(
        "POST",
        url,
        "/api/tokens",
        user=user,
        password=password,
        token=token,
        as_json=json_output,
        body=body,
        expect=(201,),
    )
    if json_output:
        print_json(data)
        return
    made = data["token"]
    typer.echo(data["secret"])  # stdout, alone on its line: HPCSCOPE_TOKEN=$(hpcscope token ...)
    typer.echo(
        f"token {made['token_id']} for {made['user']}: scope {made['scope']}, expires "
        f"{made['expires_at']}; shown once: store it now (e.g. HPCSCOPE_TOKEN)",
        err=True,
    )


@app.command("list")
def list_tokens(
    url: str = URL_OPTION,
    user: str | None = USER_OPTION,
    password: str | None = PASSWORD_OPTION,
    token: str | None = TOKEN_OPTION,
    json_output: bool = JSON_OPTION,
    output_format: str = FORMAT_OPTION,
) -> None:
    """List your tokens (admins and auditors: everyone's); never a secret."""
    fmt = table_format(output_format)
    data = api_request(
        "GET", url, "/api/tokens", user=user, password=password, token=token, as_json=json_output
    )
    if json_output:
        print_json(data)
        return
    rows = [
        [
            f"hps_{t['token_id']}",  # what revoke takes, without the ellipsis of the hint
            t["user"],
            t["label"],
            t["scope"],
            t["status"],
            t["created_at"],
            t["expires_at"],
            t["last_used_at"],
            t["last_used_address"],
        ]
        for t in data["tokens"]
    ]
    print_table(f"API tokens ({data['count']})", LIST_COLUMNS, rows, fmt=fmt)


@app.command("revoke")
def revoke(
    token_id: str = typer.Argument(..., help="The token's id (the 8 characters after hps_)."),
    url: str = URL_OPTION,
    user: str | None = USER_OPTION,
    password: str | None = PASSWORD_OPTION,
    token: str | None = TOKEN_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """Revoke a token of yours (admins: anyone's); it is refused from then on."""
    if token_id.startswith("hps_"):
        token_id = token_id[4:12]  # a whole token pasted: its id
    data = api_request(
        "POST",
        url,
        f"/api/tokens/{quote(token_id, safe='')}/revoke",
        user=user,
        password=password,
        token=token,
        as_json=json_output,
    )
    if json_output:
        print_json(data)
        return
    typer.echo(f"token {data['token_id']} of {data['user']}: {data['status']}")
