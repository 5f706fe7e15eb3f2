"""A real dcgm-exporter stand-in that misbehaves on purpose, as its own process.

``python -m tests.faults.misbehaving_exporter PORT MODE_FILE NODE``: serves ``/metrics`` on
loopback; each request reads ``MODE_FILE`` and answers accordingly:

- ``ok``: a fresh dcgm-exporter page of ``NODE`` (8 H100s);
- ``slow``: the page, after sleeping ``SLOW_SECONDS`` (past the collector's timeout);
- ``garbage``: ``text/plain`` that is not the exposition format;
- ``error``: HTTP 500;
- ``flap``: ``ok`` and ``garbage`` in turn, request by request.

"Down" is the test killing this process (and starting it again on the same port).
"""

from __future__ import annotations

import itertools
import random
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.support.dcgm_pages import render_dcgm_page

SLOW_SECONDS = 4.0
GARBAGE = "<html><body>upgrade in progress</body></html>\n\x00\x01 not { a metric\n"


def main(argv: list[str]) -> None:
    port, mode_file, node = int(argv[0]), Path(argv[1]), argv[2]
    rng = random.Random(7)
    turns = itertools.cycle(("ok", "garbage"))

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def _send(self, code: int, body: str) -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            mode = mode_file.read_text().strip()
            if mode == "flap":
                mode = next(turns)
            if mode == "slow":
                time.sleep(SLOW_SECONDS)
                mode = "ok"
            if mode == "garbage":
                self._send(200, GARBAGE)
            elif mode == "error":
                self._send(500, "exporter broke")
            else:
                self._send(200, render_dcgm_page(node, rng=rng))

    ThreadingHTTPServer.allow_reuse_address = True
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
