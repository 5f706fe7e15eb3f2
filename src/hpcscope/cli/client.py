"""The client commands' one way to talk to a running server: HTTP with a token or Basic.

``hpcscope jobs``, ``job``, ``alerts`` and ``token`` talk to the server (which applies access
control) rather than opening the store, which one server process holds. Credentials: an API
token (``--token`` or ``HPCSCOPE_TOKEN``, sent as ``Authorization: Bearer``) when given, else
``--user``/``--password`` (``HPCSCOPE_USER``/``HPCSCOPE_PASSWORD``, HTTP Basic). Errors become
one line and an exit code: missing credentials and a rejected request (400) are usage errors
(2); an unreachable server, a refused login or token (401), a denial (403), an id not visible
(404), a login throttled after failures (429) and any other status are runtime errors (1).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import typer

from hpcscope.cli.output import EXIT_USAGE_ERROR, fail

URL_OPTION = typer.Option(
    "http://127.0.0.1:8080", "--url", envvar="HPCSCOPE_URL", help="hpcscope server URL."
)
USER_OPTION = typer.Option(None, "--user", envvar="HPCSCOPE_USER", help="User name.")
PASSWORD_OPTION = typer.Option(
    None,
    "--password",
    envvar="HPCSCOPE_PASSWORD",
    help="Password (prefer the environment variable).",
)
TOKEN_OPTION = typer.Option(
    None,
    "--token",
    envvar="HPCSCOPE_TOKEN",
    help="API token hps_... (prefer the environment variable); used instead of a password.",
)
JSON_OPTION = typer.Option(False, "--json", help="Print JSON (the API's schema).")
FORMAT_OPTION = typer.Option(
    "table",
    "--format",
    help="table (fitted to the terminal, whole rows in a pipe) or tsv (a header line, then "
    "one tab-separated line per row).",
)


def api_request(
    method: str,
    url: str,
    path: str,
    *,
    user: str | None,
    password: str | None,
    token: str | None,
    as_json: bool,
    body: Mapping[str, object] | None = None,
    expect: tuple[int, ...] = (200,),
    text: bool = False,
) -> Any:
    """The JSON answer of ``method url+path``; exits with one clear line on any failure.

    Args:
        token: sent as ``Authorization: Bearer``; when None, ``user`` and ``password`` as
            HTTP Basic (both needed).
        body: a JSON body (POST).
        expect: the statuses that are success.
        text: return the body as text (a CSV export) instead of its JSON.
    """
    import httpx2  # only when a command talks to a server (hpcscope --help stays light)

    headers: dict[str, str] = {}
    auth: tuple[str, str] | None = None
    if token:
        headers["Authorization"] = f"Bearer {token.strip()}"
    elif user is not None and password is not None:
        auth = (user, password)
    else:
        fail(
            "credentials needed: --token (HPCSCOPE_TOKEN), or --user and --password "
            "(HPCSCOPE_USER/HPCSCOPE_PASSWORD)",
            code=EXIT_USAGE_ERROR,
            as_json=as_json,
        )
    try:
        response = httpx2.request(
            method, url.rstrip("/") + path, auth=auth, headers=headers, json=body, timeout=30
        )
    except httpx2.HTTPError as exc:
        fail(f"cannot reach {url}: {exc}", as_json=as_json)
    if response.status_code in expect:
        return str(response.text) if text else response.json()
    if response.status_code == 401:
        fail("authentication failed" + (" (token)" if token else ""), as_json=as_json)
    detail = _detail(response)
    if response.status_code == 400:
        fail(detail or "bad request", code=EXIT_USAGE_ERROR, as_json=as_json)
    if response.status_code in (403, 404, 429):  # 429: too many failed logins, for a while
        fail(detail or f"HTTP {response.status_code}", as_json=as_json)
    fail(f"{url}{path}: HTTP {response.status_code}", as_json=as_json)


def _detail(response: Any) -> str | None:
    try:
        body = response.json()
    except ValueError:
        return None
    detail = body.get("detail") if isinstance(body, dict) else None
    return str(detail) if detail is not None else None


def api_get(
    url: str,
    path: str,
    user: str | None,
    password: str | None,
    as_json: bool,
    *,
    token: str | None = None,
) -> Any:
    """The JSON of ``GET url+path`` as ``user`` or with ``token``; exits with one clear line on
    any failure."""
    return api_request("GET", url, path, user=user, password=password, token=token, as_json=as_json)


def api_get_text(
    url: str, path: str, user: str | None, password: str | None, *, token: str | None = None
) -> str:
    """The body of ``GET url+path`` as text (a CSV export); fails as :func:`api_get`."""
    return str(
        api_request(
            "GET", url, path, user=user, password=password, token=token, as_json=False, text=True
        )
    )
