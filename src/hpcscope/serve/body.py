"""The fields of a small POST body, JSON or a form, read within the bounds of outside input.

``request.json()`` meets 100,000 nested brackets with ``RecursionError`` and bytes that are not
JSON with ``JSONDecodeError``: both escaped the routes as a 500. Here a body past a bound
(:func:`hpcscope.model.bounds.loads_json`) is :class:`BodyRefused` with 422, and one that is
not JSON with 400 naming the line and column; the app answers either as ``{"detail": ...}``.
The edge already refuses bodies over its byte limit with 413.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request

from hpcscope.model.bounds import BoundExceeded, loads_json
from hpcscope.model.errors import InputError

SOURCE = "the request body"


class BodyRefused(InputError):
    """A body that cannot be read; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def is_json(request: Request) -> bool:
    return request.headers.get("content-type", "").startswith("application/json")


async def json_body(request: Request) -> Any:
    """The body as JSON.

    Raises:
        BodyRefused: 422 past a bound (nesting), 400 not JSON or not UTF-8.
    """
    raw = await request.body()
    try:
        return loads_json(raw, source=SOURCE)
    except BoundExceeded as exc:
        raise BodyRefused(exc.describe(), 422) from None
    except json.JSONDecodeError as exc:
        raise BodyRefused(f"{SOURCE}:{exc.lineno}:{exc.colno}: not JSON: {exc.msg}", 400) from None
    except UnicodeDecodeError as exc:
        raise BodyRefused(f"{SOURCE}: not UTF-8 (byte {exc.start}: {exc.reason})", 400) from None


async def body_fields(request: Request) -> dict[str, Any]:
    """A JSON object's members (another JSON value gives none), or a form's text fields.

    Raises:
        BodyRefused: see :func:`json_body`.
    """
    if is_json(request):
        body = await json_body(request)
        return body if isinstance(body, dict) else {}
    form = await request.form()
    return {k: v for k, v in form.items() if isinstance(v, str)}
