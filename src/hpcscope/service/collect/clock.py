"""Where the collector's time comes from: a seam that keeps its tests off the wall clock."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Protocol

from hpcscope.model.timeutil import utcnow

__all__ = ["Clock", "SystemClock"]


class Clock(Protocol):
    """Where the collector's time comes from."""

    def now(self) -> datetime:
        """Wall-clock time, naive UTC (the store's timestamps)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (intervals, scheduler polls)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` between cycles."""
        ...


class SystemClock:
    """The real clock: ``datetime.now``, ``time.monotonic``, ``asyncio.sleep``."""

    def now(self) -> datetime:
        return utcnow()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
