"""A bounded in-memory buffer of parsed security events, drained by the alert engine.

Nothing is stored yet: the alert engine owns storage. Sources (file tails, pipes, Falco's
``http_output``) put parsed tables here; the engine calls :meth:`SecurityEventBuffer.drain`.
When more than ``max_rows`` rows wait, the oldest are dropped and counted, so a stalled
engine costs memory up to the bound and never more.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from hpcscope.ingest.security.lines import ParseResult, SecurityEventError
from hpcscope.model.security_events import FALCO_ALERT_SCHEMA, TETRAGON_EVENT_SCHEMA

KINDS = {"falco": FALCO_ALERT_SCHEMA, "tetragon": TETRAGON_EVENT_SCHEMA}


class Pollable(Protocol):
    """A tail that parses what was appended into the buffer (``service/security/sources``)."""

    def poll(self) -> ParseResult: ...


@dataclass(frozen=True, slots=True)
class DrainedEvents:
    """Everything that waited, oldest first.

    Attributes:
        falco: rows of :data:`~hpcscope.model.security_events.FALCO_ALERT_SCHEMA`.
        tetragon: rows of :data:`~hpcscope.model.security_events.TETRAGON_EVENT_SCHEMA`.
        errors: the lines that did not parse (the newest ``max_errors``).
        dropped_rows: rows dropped since the last drain because the buffer was full.
    """

    falco: pa.Table
    tetragon: pa.Table
    errors: tuple[SecurityEventError, ...]
    dropped_rows: int


class SecurityEventBuffer:
    """Thread-safe, bounded by rows (events) and by errors kept."""

    def __init__(self, *, max_rows: int = 100_000, max_errors: int = 1_000) -> None:
        if max_rows < 1 or max_errors < 0:
            raise ValueError("max_rows must be at least 1 and max_errors at least 0")
        self.max_rows = max_rows
        self._lock = threading.Lock()
        self._tables: deque[tuple[str, pa.Table]] = deque()
        self._rows = 0
        self._dropped = 0
        self._errors: deque[SecurityEventError] = deque(maxlen=max_errors)
        #: the tails that fill this buffer (they register themselves): the alert engine's
        #: own loop polls them before it drains (service/alerts/engine.py, SecurityLoop)
        self.tails: list[Pollable] = []

    def __len__(self) -> int:
        with self._lock:
            return self._rows

    def put(self, kind: str, result: ParseResult) -> None:
        """Queue the rows and errors of one parse (``kind``: ``falco`` or ``tetragon``)."""
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}: one of {sorted(KINDS)}")
        if result.table.schema != KINDS[kind]:
            raise ValueError(f"a {kind} table must have the {kind} schema")
        with self._lock:
            self._errors.extend(result.errors)
            table = result.table
            if table.num_rows > self.max_rows:  # keep the newest rows of an oversized batch
                self._dropped += table.num_rows - self.max_rows
                table = table.slice(table.num_rows - self.max_rows)
            if table.num_rows:
                self._tables.append((kind, table))
                self._rows += table.num_rows
            while self._rows > self.max_rows:
                old_kind, oldest = self._tables[0]
                excess = self._rows - self.max_rows
                if oldest.num_rows <= excess:
                    self._tables.popleft()
                    self._rows -= oldest.num_rows
                    self._dropped += oldest.num_rows
                else:
                    self._tables[0] = (old_kind, oldest.slice(excess))
                    self._rows -= excess
                    self._dropped += excess

    def drain(self) -> DrainedEvents:
        """Take everything that waits; the buffer is empty afterwards."""
        with self._lock:
            tables, self._tables = list(self._tables), deque()
            errors = tuple(self._errors)
            self._errors.clear()
            dropped, self._dropped, self._rows = self._dropped, 0, 0
        by_kind = {
            kind: pa.concat_tables([t for k, t in tables if k == kind] or [schema.empty_table()])
            for kind, schema in KINDS.items()
        }
        return DrainedEvents(by_kind["falco"], by_kind["tetragon"], errors, dropped)
