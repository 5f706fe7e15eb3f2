"""The client commands' one way to read a running server: ``GET`` with HTTP Basic.

``hpcscope jobs``, ``job`` and ``alerts`` talk to the server (which applies access control)
rather than opening the store, which one server process holds. Errors become one line and an
exit code: missing credentials and a rejected filter (400) are usage errors (2); an unreachable
server, a refused login, an id not visible (404) and any other status are runtime errors (1).
"""

from __future__ import annotations

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
JSON_OPTION = typer.Option(False, "--json", help="Print JSON (the API's schema).")


def api_get(url: str, path: str, user: str | None, password: str | None, as_json: bool) -> Any:
    """The JSON of ``GET url+path`` as ``user``; exits with one clear line on any failure."""
    return _get(url, path, user, password, as_json).json()


def api_get_text(url: str, path: str, user: str | None, password: str | None) -> str:
    """The body of ``GET url+path`` as text (a CSV export); fails as :func:`api_get`."""
    return str(_get(url, path, user, password, False).text)


def _get(url: str, path: str, user: str | None, password: str | None, as_json: bool) -> Any:
    import httpx2  # only when a command talks to a server (hpcscope --help stays light)

    if user is None or password is None:
        fail(
            "credentials needed: --user and --password (or HPCSCOPE_USER/HPCSCOPE_PASSWORD)",
            code=EXIT_USAGE_ERROR,
            as_json=as_json,
        )
    try:
        response = httpx2.get(url.rstrip("/") + path, auth=(user, password), timeout=30)
    except httpx2.HTTPError as exc:
        fail(f"cannot reach {url}: {exc}", as_json=as_json)
    if response.status_code == 401:
        fail("authentication failed", as_json=as_json)
    if response.status_code == 400:
        fail(response.json().get("detail", "bad request"), code=EXIT_USAGE_ERROR, as_json=as_json)
    if response.status_code == 404:
        fail(response.json().get("detail", "not found"), as_json=as_json)
    if response.status_code != 200:
        fail(f"{url}{path}: HTTP {response.status_code}", as_json=as_json)
    return response
