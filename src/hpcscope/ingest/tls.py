"""One TLS context for every httpx2 client hpcscope makes.

httpx builds a fresh default context (and loads the CA bundle into it) for every client it
creates, even one that only ever speaks plain HTTP: ~40-60 ms of CPU, holding the GIL. The
scheduler poll, the Prometheus backend's reads and the notification deliveries each made a
client per request, so every collector cycle paid it, and the web server's requests waited
behind it. The context is built once, as httpx builds it (``httpx2.create_ssl_context()``:
the same CA bundle and ``SSL_CERT_FILE``/``SSL_CERT_DIR`` handling), and passed as
``verify=``; a context is safe to share between clients and threads.
"""

from __future__ import annotations

import functools
import ssl

import httpx2


@functools.lru_cache(maxsize=1)
def default_tls_context() -> ssl.SSLContext:
    """httpx's default verifying context, made on first use and shared."""
    return httpx2.create_ssl_context()


__all__ = ["default_tls_context"]
