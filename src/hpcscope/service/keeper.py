"""One pass at a time after the collector's cycles, on a thread of its own.

The kept state that is costly to build (finished jobs' time series and page parts, the reports
read ahead of their expiry) is built by a keeper: an after-cycle hook that starts a pass on a
thread unless the previous one is still running, so the cycle never waits for it. A failed
pass is logged and keeps nothing; the next cycle tries again. A subclass says what a pass does
(:meth:`PassKeeper.work`) and when one is due (:meth:`PassKeeper.due`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class PassKeeper:
    """After a collector cycle, a pass of :meth:`work` on a thread named ``name``, unless one is
    running or :meth:`stop` was called. ``start``: how a pass runs (tests run it at once)."""

    def __init__(
        self, *, name: str, start: Callable[[Callable[[], None]], None] | None = None
    ) -> None:
        self.name = name
        self._start = start or self._on_thread
        self._running = threading.Lock()
        self.stopping = threading.Event()
        """Set by :meth:`stop`: a pass checks it between its items."""
        self.done = 0
        """What the passes kept so far (each pass's :meth:`work`)."""

    def work(self) -> int:
        """One pass; how many things it kept."""
        raise NotImplementedError

    def due(self) -> bool:
        """Whether a pass has anything to do at all (checked before starting one)."""
        return True

    def after_cycle(self) -> None:
        if self.stopping.is_set() or not self.due():
            return
        if self._running.acquire(blocking=False):
            self._start(self._pass)

    def stop(self) -> None:
        """Start no pass any more, and wait for the one in flight."""
        self.stopping.set()
        with self._running:
            pass

    def _pass(self) -> None:
        try:
            self.done += self.work()
        except Exception:  # a failed pass keeps nothing; the next cycle tries again
            log.exception("%s: a pass failed", self.name)
        finally:
            self._running.release()

    def _on_thread(self, work: Callable[[], None]) -> None:
        threading.Thread(target=work, name=self.name, daemon=True).start()
