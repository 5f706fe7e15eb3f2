"""Falco's ``http_output``: one JSON alert per POST, authenticated with a shared token.

Falco posts each alert to the configured URL (``deploy/falco/falco-hpcscope.yaml``). The
token is the ``falco_ingest_token`` setting, presented as ``Authorization: Bearer <token>``
or as ``?token=<token>`` in the URL (Falco's ``http_output.url`` can carry it). Without the
setting the endpoint is off. Parsed alerts go to the security event buffer; nothing is stored.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from typing import Any

from hpcscope.ingest.security.falco import parse_falco_lines
from hpcscope.service.security.buffer import SecurityEventBuffer

MAX_BODY_BYTES = 1 * 2**20
SOURCE = "http_output"


@dataclass(frozen=True, slots=True)
class IngestReply:
    """HTTP status and JSON body for one POST."""

    status: int
    body: dict[str, Any] = field(default_factory=dict)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def ingest_falco_post(
    body: bytes,
    *,
    presented_token: str | None,
    expected_token: str | None,
    buffer: SecurityEventBuffer,
    client: str = "unknown",
) -> IngestReply:
    """Authenticate, parse and queue one ``http_output`` POST (one alert, or JSON lines).

    Returns:
        404 when ingest is off (no token configured), 401 for a missing or wrong token, 413
        for a body over 1 MiB, 400 when no line parsed (errors listed), else 202 with the
        number of alerts accepted and any lines rejected.
    """
    if not expected_token:
        return IngestReply(404, {"detail": "Falco ingest is off: set falco_ingest_token"})
    if presented_token is None or not hmac.compare_digest(
        presented_token.encode(), expected_token.encode()
    ):
        return IngestReply(401, {"detail": "missing or wrong ingest token"})
    if len(body) > MAX_BODY_BYTES:
        return IngestReply(413, {"detail": f"body over {MAX_BODY_BYTES} bytes"})
    result = parse_falco_lines(body.splitlines(), source=f"{SOURCE} from {client}")
    errors = [error.to_dict() for error in result.errors]
    if result.table.num_rows == 0:
        return IngestReply(400, {"detail": "no Falco alert in the body", "errors": errors})
    buffer.put("falco", result)
    return IngestReply(202, {"accepted": result.table.num_rows, "errors": errors})
