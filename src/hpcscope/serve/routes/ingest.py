"""``POST /api/ingest/falco``: Falco's ``http_output`` target (token-authenticated, no login).

The parsed alerts wait in the app's security event buffer (``app.state.security_events``)
for the alert engine; see ``docs/security.md``.
"""

from __future__ import annotations

import threading

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from hpcscope.serve.auth import service_of
from hpcscope.service.security.buffer import SecurityEventBuffer
from hpcscope.service.security.http_ingest import (
    MAX_BODY_BYTES,
    bearer_token,
    ingest_falco_post,
)

router = APIRouter()
_LOCK = threading.Lock()


def security_events(request: Request) -> SecurityEventBuffer:
    """The app's security event buffer, created on first use."""
    state = request.app.state
    with _LOCK:
        buffer = getattr(state, "security_events", None)
        if not isinstance(buffer, SecurityEventBuffer):
            rows = service_of(request).settings.security_events.buffer_rows
            buffer = SecurityEventBuffer(max_rows=rows)
            state.security_events = buffer
    return buffer


@router.post("/api/ingest/falco", include_in_schema=True)
async def ingest_falco(request: Request) -> JSONResponse:
    """One Falco alert (or JSON lines) from ``http_output``; 202 when accepted."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return JSONResponse({"detail": f"body over {MAX_BODY_BYTES} bytes"}, status_code=413)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:  # a chunked body declares no length: count it
            return JSONResponse({"detail": f"body over {MAX_BODY_BYTES} bytes"}, status_code=413)
    token = bearer_token(request.headers.get("authorization")) or request.query_params.get("token")
    reply = ingest_falco_post(
        bytes(body),
        presented_token=token,
        expected_token=service_of(request).settings.falco.ingest_token,
        buffer=security_events(request),
        client=request.client.host if request.client else "unknown",
    )
    return JSONResponse(reply.body, status_code=reply.status)
