"""What the kept read views cost the server: computations, seconds, misses, per kind of view.

A server that answers from kept views (``service/snapshots.py``) is fast while they are kept
and slow when they are recomputed too often or missed on the event loop. These counters say
which view did what since the process started, for ``/metrics`` (``hpcscope_view_*``,
``docs/metrics.md``) and the load bench: a p99 that moves between two runs of the same code
moves with them.

The view's name is the family of its snapshot key: the first item of a tuple key (every key of
hpcscope is a tuple that starts with a literal such as ``"serve.slo"``), the key when it is a
string, else the key's type name. The names are fixed in the code, never taken from a request:
the label's cardinality is the number of kinds of view, whatever is read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

#: The seconds of the computations nested in the one running (a page computing the document
#: it shows), added up as they end.
_NESTED: ContextVar[list[float] | None] = ContextVar("hpcscope_view_nested", default=None)


@dataclass(frozen=True, slots=True)
class ViewCost:
    """One kind of view's counts since the process started.

    Attributes:
        computations: values computed (in a request, a background refresh or ahead).
        compute_seconds: wall seconds those computations took, less the computations of other
            views nested in them (under load, mostly waiting for the interpreter lock: several
            times their CPU time). Summed over every view: the wall time spent computing.
        misses: reads on the event loop (:func:`~hpcscope.service.snapshots.cache_only`) that
            found nothing to serve, answered from a worker thread instead.
    """

    computations: int = 0
    compute_seconds: float = 0.0
    misses: int = 0


def view_name(key: Hashable) -> str:
    """The kind of view a snapshot key belongs to (module docstring)."""
    if isinstance(key, str):
        return key
    if isinstance(key, tuple) and key and isinstance(key[0], str):
        return key[0]
    return type(key).__name__


class ViewCosts:
    """Thread-safe counters of :class:`ViewCost` by view name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._costs: dict[str, ViewCost] = {}

    def _add(self, key: Hashable, computations: int, seconds: float, misses: int) -> None:
        name = view_name(key)
        with self._lock:
            cost = self._costs.get(name, ViewCost())
            self._costs[name] = ViewCost(
                cost.computations + computations,
                cost.compute_seconds + seconds,
                cost.misses + misses,
            )

    def computed(self, key: Hashable, seconds: float) -> None:
        """Count one computation of ``key``'s value that took ``seconds``."""
        self._add(key, 1, max(0.0, seconds), 0)

    @contextmanager
    def timing(self, key: Hashable, clock: Callable[[], float]) -> Iterator[None]:
        """Count the computation of ``key``'s value that the block runs, once it returns, with
        its own seconds: its wall time less the computations nested in it, which count under
        their own views (a computation that raises counts none, but its time still counts
        as nested in the one around it)."""
        started, nested = clock(), [0.0]
        token = _NESTED.set(nested)
        done = False
        try:
            yield
            done = True
        finally:
            _NESTED.reset(token)
            seconds = clock() - started
            outer = _NESTED.get()
            if outer is not None:
                outer[0] += seconds
            if done:
                self.computed(key, seconds - nested[0])

    def missed(self, key: Hashable) -> None:
        """Count one read of ``key`` on the event loop that found nothing to serve."""
        self._add(key, 0, 0.0, 1)

    def snapshot(self) -> dict[str, ViewCost]:
        """The counts so far, by view name (a copy)."""
        with self._lock:
            return dict(self._costs)
