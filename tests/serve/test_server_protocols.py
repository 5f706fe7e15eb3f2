"""The server runs on uvicorn's C HTTP parser (httptools) and event loop (uvloop): with h11
and asyncio's loop the API load bench answered half the requests per second
(docs/benchmarks.md, "API load"). A lock or an install that loses them fails here."""

from __future__ import annotations

import uvloop
from fastapi import FastAPI
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from hpcscope.serve.server import uvicorn_config
from hpcscope.service.settings import Settings


def test_the_server_uses_httptools_and_uvloop() -> None:
    config = uvicorn_config(FastAPI(), Settings())
    config.load()
    assert issubclass(config.http_protocol_class, HttpToolsProtocol)
    factory = config.get_loop_factory()
    assert factory is not None
    loop = factory()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
