"""How long the collector's cycles and their parts take: what ``/metrics`` shows of them.

Every cycle is timed whole (``cycle``), and so is each source's poll (``poll:<source>``,
sources of one stage concurrently, each its own) and each after-cycle hook
(``hook:<class>.<method>``). Per part it keeps the count, the sum and the longest since the server
started: ``hpcscope_collector_phase_seconds`` (a summary: ``_count`` and ``_sum``) and
``hpcscope_collector_phase_max_seconds``. A cycle longer than the scrape interval delays the
next one; one longer than a target's silence (twice the interval plus the timeout) leaves a
gap (``service/collect/health.py``). These say which part held it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

#: The whole cycle's part name.
CYCLE = "cycle"


@dataclass(frozen=True, slots=True)
class PhaseTotal:
    """One part's timings since the collector started."""

    count: int
    sum_seconds: float
    max_seconds: float


class CycleTimings:
    """The collector's timings per part (written by its thread, read by ``/metrics``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._phases: dict[str, PhaseTotal] = {}

    def observe(self, phase: str, seconds: float) -> None:
        """One run of ``phase`` took ``seconds``."""
        with self._lock:
            kept = self._phases.get(phase)
            self._phases[phase] = (
                PhaseTotal(1, seconds, seconds)
                if kept is None
                else PhaseTotal(
                    kept.count + 1, kept.sum_seconds + seconds, max(kept.max_seconds, seconds)
                )
            )

    def snapshot(self) -> dict[str, PhaseTotal]:
        """Every part's timings so far, by name."""
        with self._lock:
            return dict(self._phases)


def hook_phase(hook: Callable[[], object]) -> str:
    """The part name of an after-cycle hook: ``hook:`` and, for a bound method, its object's
    class and the method (``hook:SloUpkeep.after_cycle``), else the function's name."""
    owner = getattr(hook, "__self__", None)
    name = getattr(hook, "__name__", "hook")
    return f"hook:{type(owner).__name__}.{name}" if owner is not None else f"hook:{name}"
