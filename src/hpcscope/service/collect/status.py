"""The collector's status line: one INFO line per minute, not one per scrape.

The collector counts what each cycle did (:meth:`StatusLog.observe`); once per period (60 s by
default) the counters become a :class:`CollectorStatus` (targets up and down in the last cycle,
GPU samples stored per second over the period, store size) and the collector logs it, formatted
by :func:`format_status`. Per-scrape and per-cycle detail is logged at DEBUG.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

#: Seconds between two status lines.
STATUS_PERIOD_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class CollectorStatus:
    """What the collector did over one status period.

    Attributes:
        targets_up: targets whose last scrape succeeded.
        targets_down: targets whose last scrape failed.
        samples_per_second: GPU samples stored per second, averaged over the period.
        store_bytes: size of the store on disk (database file and write-ahead log).
        period_seconds: length of the period the rate is averaged over.
        cycles: collection cycles in the period.
    """

    targets_up: int
    targets_down: int
    samples_per_second: float
    store_bytes: int
    period_seconds: float
    cycles: int


def format_status(status: CollectorStatus) -> str:
    """The one status line, e.g. ``collector: 4 targets up, 0 down, 1,280 samples/s, ...``."""
    return (
        f"collector: {status.targets_up} targets up, {status.targets_down} down, "
        f"{status.samples_per_second:,.0f} samples/s, store {status.store_bytes / 2**20:,.1f} MiB "
        f"({status.cycles} cycles in {status.period_seconds:.0f} s)"
    )


class StatusLog:
    """Accumulates cycle counters and says when a status line is due.

    Args:
        store_bytes: reads the store's size when a status is due.
        period_seconds: seconds between two statuses.
        clock: a monotonic clock in seconds (tests pass a fake).
    """

    def __init__(
        self,
        store_bytes: Callable[[], int],
        *,
        period_seconds: float = STATUS_PERIOD_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if period_seconds <= 0:
            raise ValueError("period_seconds must be positive")
        self._store_bytes = store_bytes
        self._period_seconds = period_seconds
        self._clock = clock
        self._since = clock()
        self._samples = 0
        self._cycles = 0

    def observe(self, *, targets: int, ok: int, samples: int) -> CollectorStatus | None:
        """Count one cycle; return the status when a period has passed since the last one.

        Args:
            targets: targets scraped in this cycle.
            ok: of which succeeded.
            samples: GPU samples stored by this cycle.

        Returns:
            The status of the period that just ended, or None before the period is over.
        """
        self._samples += samples
        self._cycles += 1
        now = self._clock()
        elapsed = now - self._since
        if elapsed < self._period_seconds:
            return None
        status = CollectorStatus(
            targets_up=ok,
            targets_down=targets - ok,
            samples_per_second=self._samples / elapsed,
            store_bytes=self._store_bytes(),
            period_seconds=elapsed,
            cycles=self._cycles,
        )
        self._since, self._samples, self._cycles = now, 0, 0
        return status
