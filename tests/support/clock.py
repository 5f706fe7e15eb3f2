"""A simulated clock for the collector (``hpcscope.service.collect.collector.Clock``).

Sleeping moves the clock forward at once, so a test runs cycles 15 s apart in milliseconds;
``advance`` lets a fake exporter take simulated time to answer.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

#: Where simulated time starts (naive UTC, as the store keeps it).
EPOCH = datetime(2026, 1, 1, 12, 0, 0)


class FakeClock:
    """Simulated wall and monotonic time; :meth:`sleep` advances it without waiting."""

    def __init__(self, start: datetime = EPOCH) -> None:
        self.start = start
        self.elapsed_seconds = 0.0
        self.sleeps: list[float] = []

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.elapsed_seconds)

    def monotonic(self) -> float:
        return self.elapsed_seconds

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of simulated time pass (a slow exporter, a slow cycle)."""
        self.elapsed_seconds += seconds

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(seconds)
        await asyncio.sleep(0)  # still yield to the loop, as a real sleep does
