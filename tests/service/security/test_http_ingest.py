"""Falco http_output bodies: token check, parsing, replies."""

from __future__ import annotations

import orjson

from hpcscope.service.security.buffer import SecurityEventBuffer
from hpcscope.service.security.http_ingest import MAX_BODY_BYTES, bearer_token, ingest_falco_post

ALERT = orjson.dumps({"rule": "r", "priority": "Critical", "output_fields": {"evt.time": 9}})


def test_bearer_token() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer  abc ") == "abc"
    assert bearer_token("Basic abc") is None
    assert bearer_token(None) is None and bearer_token("Bearer ") is None


def test_replies() -> None:
    buffer = SecurityEventBuffer()
    post = ingest_falco_post
    assert post(ALERT, presented_token="t", expected_token=None, buffer=buffer).status == 404
    assert post(ALERT, presented_token=None, expected_token="t", buffer=buffer).status == 401
    assert post(ALERT, presented_token="u", expected_token="t", buffer=buffer).status == 401
    big = b"x" * (MAX_BODY_BYTES + 1)
    assert post(big, presented_token="t", expected_token="t", buffer=buffer).status == 413
    bad = post(b"{nope", presented_token="t", expected_token="t", buffer=buffer, client="10.0.0.9")
    assert bad.status == 400 and bad.body["errors"][0]["source"] == "http_output from 10.0.0.9"
    assert len(buffer) == 0
    ok = post(ALERT + b"\n" + ALERT, presented_token="t", expected_token="t", buffer=buffer)
    assert (ok.status, ok.body["accepted"]) == (202, 2)
    assert buffer.drain().falco.column("priority").to_pylist() == ["critical", "critical"]
