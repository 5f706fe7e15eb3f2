"""What the Falco and Tetragon sources share: a tailed file parsed into the security events
buffer, one ``scrapes`` row per poll (exporter ``falco`` or ``tetragon``, target the file,
rows parsed, lines rejected; not ok while the file does not exist), so the diagram's
collectors show the tails' health like the exporters'."""

from __future__ import annotations

import time
from datetime import datetime

import pyarrow as pa

from hpcscope.model.schemas import SCRAPE_SCHEMA
from hpcscope.service.collect.source import Batch, Health, Poll, ThreadedSource
from hpcscope.service.security.sources import FalcoSource, TetragonSource


class TailedEvents(ThreadedSource):
    """A Falco or Tetragon file, tailed into the buffer the alert engine drains."""

    def __init__(self, name: str, tail: FalcoSource | TetragonSource) -> None:
        self.name = name
        self.tail = tail

    def read(self, now: datetime) -> Poll:
        started = time.perf_counter()
        self.tail.poll()
        rows, rejected = self.tail.take_counts()  # this poll's and the engine loop's since
        row = self.tail.scrape_row(now, started=started, rows=rows, rejected=rejected)
        health = Health(
            self.name, now, targets=1, ok=int(bool(row["ok"])), rows=rows
        )  # its lines' errors are reported by the engine that drains them
        return Poll(health, (Batch("scrapes", pa.Table.from_pylist([row], SCRAPE_SCHEMA)),))
