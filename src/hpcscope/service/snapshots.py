"""Read views computed once per data generation and served from memory (issue 17 part 4).

Every page and API read of live data (the job list, a job's report, the diagram's live state)
used to recompute from raw samples on each request: about 140 ms of CPU per request at 128
nodes, so 50 clients queued for seconds. A :class:`Snapshots` holds what those reads derive,
keyed by what the answer depends on, and computes each key once per **generation**:

* the generation is the store's committed-write count as of the collector's last finished
  cycle (:meth:`Snapshots.publish`, an after-cycle hook of the server): one cycle's many writes
  (samples, scrapes, the scheduler poll, summaries, rule alerts) make one new generation, not
  ten. Without a collector (tests, the offline CLI) every committed write is a new generation.
* an entry is *current* while the generation is unchanged and it is younger than
  ``max_age_seconds`` (time alone changes some answers: a GPU turning stale, a running job's
  elapsed time); a key read with ``every_seconds`` (a report over hours or months: the SLOs,
  chargeback; a finished job's page) is also current, whatever the generation, while younger
  than that: a 2-second cycle does not recompute a month's figures every 2 seconds. Once a
  collector publishes its cycles, no entry is recomputed more often than every
  ``min_refresh_seconds`` (the pages poll every 5 to 7 s: a cycle shorter than that would
  recompute every view of every viewer for nobody to see);
* once a collector publishes its cycles, a request that finds an entry that is no longer
  current but younger than ``stale_seconds`` (past its ``every_seconds``: a month's report is
  refreshed behind its readers as long as a generation's figure) gets it at once, and one
  background refresh per key recomputes it (a dashboard figure at most one cycle behind,
  instead of every client waiting for the recomputation), on one thread
  (:data:`~hpcscope.service.refresh.REFRESH_THREADS`); an older entry, or none, is computed
  in the request, once:
  concurrent requests for the same key wait for that one computation. A computation that
  reads other entries (a page reads its document) reads them current: computed now if they are
  not, so a refreshed page never shows the data of the generation before. Without a collector a
  write is seen by the very next read (no stale answer: tests and one-shot reads write, then
  read).

**Memory.** At most ``max_entries`` entries, and values whose size is known (the serialised
pages and documents: ``size`` of :meth:`Snapshots.get`, or the bytes a value is or holds,
:func:`bytes_in`) at most ``max_bytes`` together, least
recently used out first: what is kept follows the principals, scopes and parameters that are
read, never the number of requests (a key built from a request parameter, such as an access
report's path, is bounded by the same budget). A value that shows the writes made between
cycles (alert changes) is read with their count as its ``version``, not in its key: one
entry per key, not one per write.

**Scopes.** The key must hold everything the value depends on, the viewer's scope included:
callers key per-principal answers by :meth:`~hpcscope.model.access.Principal.job_scope` (the
same scope is, by construction, the same answer), and check visibility with the principal
*before* they read a per-job entry (:meth:`hpcscope.service.core.Service.can_see_job`). A key
never names a principal's answer under another principal's scope.

**Cache-only reads** (:func:`cache_only`). The web server answers a read on its event loop,
without a thread-pool hop, when every snapshot it needs can be served: inside
:func:`cache_only`, a :meth:`Snapshots.get` that would compute (or wait for another
request's computation) raises :class:`SnapshotMiss` instead, and the caller runs the same
function again in a worker thread, where it computes. The code path, access checks included,
is the same either way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from hpcscope.model.errors import HpcscopeError
from hpcscope.service.refresh import background_runner
from hpcscope.service.view_costs import ViewCosts

log = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")

_CACHE_ONLY: ContextVar[bool] = ContextVar("hpcscope_snapshots_cache_only", default=False)
#: Set while a value is computed: what it reads of other entries must be current, not stale.
_COMPUTING: ContextVar[bool] = ContextVar("hpcscope_snapshots_computing", default=False)
#: The generation and start of the value being computed: what it offers is as old as it.
_COMPUTED_AS: ContextVar[tuple[int, float] | None] = ContextVar(
    "hpcscope_snapshots_computed_as", default=None
)


class SnapshotMiss(HpcscopeError):
    """Raised inside :func:`cache_only` by a read that would compute or wait: run the same
    function where it may block (a worker thread). An internal signal: never reaches a user.

    Args:
        key: what missed.
        pending: the computation another caller runs of the value that missed, when one
            does: the read lane waits for it on the event loop (a worker thread would only
            block on it) and answers again.
    """

    def __init__(self, key: object, *, pending: Future[Any] | None = None) -> None:
        super().__init__(key)
        self.pending = pending


def cache_only(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``function(*args, **kwargs)`` with every :meth:`Snapshots.get` served from memory or
    raising :class:`SnapshotMiss` (module docstring). Refreshes of stale entries still start
    in the background."""
    token = _CACHE_ONLY.set(True)
    try:
        return function(*args, **kwargs)
    finally:
        _CACHE_ONLY.reset(token)


def caching_only() -> bool:
    """Whether the caller runs inside :func:`cache_only` (code that would block on something
    other than a snapshot raises :class:`SnapshotMiss` itself)."""
    return _CACHE_ONLY.get()


#: An entry of an unchanged generation is recomputed after this many seconds all the same.
MAX_AGE_SECONDS = 10.0
#: An entry no longer current is still served (and refreshed behind) up to this age.
STALE_SECONDS = 30.0
#: Once cycles are published, an entry younger than this is current whatever the generation.
MIN_REFRESH_SECONDS = 5.0
#: Entries kept (least recently used out first): per scope, per job, per zoom node.
MAX_ENTRIES = 4096
#: Bytes of sized values kept (serialised pages and documents), least recently used out first.
MAX_BYTES = 128 << 20


def bytes_in(value: object) -> int:
    """The size of a value read without ``size``: its bytes when it is a serialised answer
    (``bytes``, or a tuple holding some: a page, a document and its ETag), else 0."""
    if isinstance(value, bytes | bytearray):
        return len(value)
    if isinstance(value, tuple):
        return sum(len(item) for item in value if isinstance(item, bytes | bytearray))
    return 0


#: Keys kept ahead of their readers at most (:meth:`Snapshots.keep_ahead`), least recently
#: read out first: the reports over hours or months, per scope read.
MAX_AHEAD = 256
#: A key read with ``ahead`` is kept ahead for this long after its last read.
AHEAD_IDLE_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class _Ahead:
    """How to recompute a key kept ahead, and when it was last read."""

    compute: Callable[[], Any]
    every_seconds: float
    size: Callable[[Any], int] | None
    read_at: float


@dataclass(frozen=True, slots=True)
class _Versioned:
    """The key of a value read with a ``version`` (:meth:`Snapshots.get`): one entry per
    family, the latest version kept."""

    family: Hashable
    version: Hashable


def _family(key: Hashable) -> Hashable:
    """The key a value's costs count under: a versioned key's family, not its version."""
    return key.family if isinstance(key, _Versioned) else key


@dataclass(frozen=True, slots=True)
class _Entry:
    generation: int
    computed_at: float
    value: Any
    every_seconds: float = 0.0
    size: int = 0


#: How often at least an entry is recomputed: seconds, or a function of the value (a finished
#: job's page less often than a running one's).
Every = float | Callable[[Any], float]


class Snapshots:
    """Values derived from the store, computed once per generation and key.

    Args:
        writes_committed: the store's committed-write counter
            (:attr:`hpcscope.store.duck.Store.writes_committed`).
        max_age_seconds: see :data:`MAX_AGE_SECONDS`.
        stale_seconds: see :data:`STALE_SECONDS`; 0 never serves a value that is not current
            (nor does a store whose cycles nobody publishes).
        clock: monotonic seconds (a seam for tests).
        refresh: how a background refresh runs (default: :func:`background_runner`; tests pass
            a runner that runs it at once, or keeps it for later).
    """

    def __init__(
        self,
        writes_committed: Callable[[], int],
        *,
        max_age_seconds: float = MAX_AGE_SECONDS,
        stale_seconds: float = STALE_SECONDS,
        max_entries: int = MAX_ENTRIES,
        max_bytes: int = MAX_BYTES,
        min_refresh_seconds: float = MIN_REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        refresh: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        self._writes = writes_committed
        self.max_age_seconds = max_age_seconds
        self.stale_seconds = stale_seconds
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self.min_refresh_seconds = min_refresh_seconds
        self._bytes = 0
        self._clock = clock
        self._refresh = refresh
        self._published: int | None = None
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._families: dict[Hashable, _Versioned] = {}
        self._computing: dict[Hashable, Future[Any]] = {}
        self._refreshing: set[Hashable] = set()
        self._ahead: OrderedDict[Hashable, _Ahead] = OrderedDict()
        self._lock = threading.Lock()
        self.computations = 0
        """How many values were computed (in requests and refreshes), for tests and benches."""
        self.costs = ViewCosts()
        """Computations, seconds and misses by kind of view (``/metrics``)."""

    def publish(self) -> None:
        """Make everything committed so far one new generation (the collector's after-cycle
        hook: a cycle's writes are seen together, once the cycle is over)."""
        with self._lock:
            self._published = self._writes()

    @property
    def published(self) -> bool:
        """Whether a collector publishes its cycles (:meth:`publish`): a read may then be a
        cycle behind the writes, never more."""
        return self._published is not None

    def generation(self) -> int:
        """The current generation (see the module docstring)."""
        published = self._published
        return published if published is not None else self._writes()

    def clear(self) -> None:
        """Forget every entry (a running computation still returns to its callers)."""
        with self._lock:
            self._entries.clear()
            self._families.clear()
            self._bytes = 0

    @property
    def kept_bytes(self) -> int:
        """Bytes of the sized values kept (see the module docstring)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def _current(self, entry: _Entry, generation: int, now: float) -> bool:
        age = now - entry.computed_at
        floor = self.min_refresh_seconds if self._published is not None else 0.0
        return age < max(entry.every_seconds, floor) or (
            entry.generation == generation and age < self.max_age_seconds
        )

    def get(
        self,
        key: Hashable,
        compute: Callable[[], T],
        *,
        every_seconds: Every = 0.0,
        size: Callable[[T], int] | None = None,
        ahead: bool = False,
        version: Hashable = None,
        inline: bool = False,
    ) -> T:
        """The value of ``key``: current, or stale and being refreshed, or computed now.

        Args:
            key: everything the value depends on (module docstring, "Scopes").
            compute: computes the value.
            every_seconds: the entry stays current this long whatever the generation (or a
                function of the value that says how long).
            size: the value's size in bytes, counted against ``max_bytes``.
            ahead: recompute it before it is due while it is read (:meth:`keep_ahead`): a
                report over hours or months, which the refresh threads' queue may hold back
                past the stale window under load.
            version: a count of the writes between cycles the value shows (alert changes):
                a value of another version is never served, and the latest one computed
                replaces the others of ``key`` (a count in the key left one entry behind per
                write, until the budgets pushed them out).
            inline: ``compute`` reads memory only (and costs about a millisecond): inside
                :func:`cache_only` it is computed there, unless another caller computes it.

        Raises:
            SnapshotMiss: inside :func:`cache_only`, instead of computing or waiting.
        """
        if version is not None:
            key = _Versioned(key, version)
        generation = self.generation()
        now = self._clock()
        if ahead and not callable(every_seconds):
            self._read_ahead(key, _Ahead(compute, every_seconds, size, now))
        refresh = False
        stale_seconds = (
            self.stale_seconds if self._published is not None and not _COMPUTING.get() else 0.0
        )
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                # stale for as long past current as any entry: an entry current for minutes
                # (a month's report, a finished job's) is served while it refreshes just as long
                age = now - entry.computed_at - (entry.every_seconds if stale_seconds else 0.0)
                current = self._current(entry, generation, now)
                if not current and age < stale_seconds:
                    refresh = key not in self._refreshing and key not in self._computing
                    if refresh:
                        self._refreshing.add(key)
                if current or age < stale_seconds:
                    served: T = entry.value
                    if not refresh:
                        return served
            running = self._computing.get(key) if not refresh else None
            if not refresh and _CACHE_ONLY.get() and not (inline and running is None):
                self.costs.missed(_family(key))
                raise SnapshotMiss(key, pending=running)
            mine = running is None and not refresh
            if mine:
                running = self._computing[key] = Future()
        if refresh:
            self._start_refresh(key, compute, every_seconds, size)
            return served
        assert running is not None
        if not mine:
            return running.result()  # type: ignore[no-any-return]
        return self._compute(key, compute, running, generation, every_seconds, size)

    def _compute(
        self,
        key: Hashable,
        compute: Callable[[], T],
        future: Future[Any],
        generation: int,
        every_seconds: Every,
        size: Callable[[T], int] | None,
    ) -> T:
        started = self._clock()
        token = _COMPUTING.set(True)
        computed_as = _COMPUTED_AS.set((generation, started))
        try:
            with self.costs.timing(_family(key), self._clock):
                value = compute()
        except BaseException as exc:
            with self._lock:
                self._computing.pop(key, None)
            future.set_exception(exc)
            raise
        finally:
            _COMPUTED_AS.reset(computed_as)
            _COMPUTING.reset(token)
        weight = size(value) if size is not None else bytes_in(value)
        every = every_seconds(value) if callable(every_seconds) else every_seconds
        with self._lock:
            self.computations += 1
            self._computing.pop(key, None)
            # the generation read before computing: a write that landed meanwhile makes the
            # entry old at once rather than hiding under a newer number
            self._keep(key, _Entry(generation, started, value, every, weight))
        future.set_result(value)
        return value

    def _keep(self, key: Hashable, entry: _Entry) -> None:
        """Store ``entry`` as ``key``'s, newest used, within the budgets (lock held)."""
        old = self._entries.pop(key, None)
        self._bytes += entry.size - (old.size if old is not None else 0)
        if isinstance(key, _Versioned):  # the family's other version goes
            other = self._families.get(key.family)
            dropped = self._entries.pop(other, None) if other is not None else None
            if dropped is not None:
                self._bytes -= dropped.size
            self._families[key.family] = key
        self._entries[key] = entry
        while len(self._entries) > self._max_entries or (
            self._bytes > self._max_bytes and len(self._entries) > 1
        ):
            evicted, out = self._entries.popitem(last=False)
            self._bytes -= out.size
            if isinstance(evicted, _Versioned) and self._families.get(evicted.family) == evicted:
                del self._families[evicted.family]

    def _read_ahead(self, key: Hashable, ahead: _Ahead) -> None:
        with self._lock:
            self._ahead[key] = ahead
            self._ahead.move_to_end(key)
            while len(self._ahead) > MAX_AHEAD:
                self._ahead.popitem(last=False)

    def keep_ahead(self, *, lead_seconds: float, idle_seconds: float = AHEAD_IDLE_SECONDS) -> int:
        """Recompute now, in the caller's thread, every entry read with ``ahead`` in the last
        ``idle_seconds`` that is due (its ``every_seconds`` over) within ``lead_seconds``, so
        that its readers find it current; returns how many were computed. A keeper runs it
        after the collector's cycles on a thread of its own (``serve/kept.py``)."""
        now, done = self._clock(), 0
        with self._lock:
            for key in [k for k, a in self._ahead.items() if now - a.read_at > idle_seconds]:
                del self._ahead[key]
            due = []
            for key, ahead in self._ahead.items():
                entry = self._entries.get(key)
                due_at = ahead.every_seconds - lead_seconds
                if entry is not None and now - entry.computed_at >= due_at:
                    due.append((key, ahead))
        for key, ahead in due:
            future: Future[Any] = Future()
            with self._lock:
                if key in self._computing:
                    continue
                self._computing[key] = future
            try:
                generation = self.generation()
                self._compute(
                    key, ahead.compute, future, generation, ahead.every_seconds, ahead.size
                )
                done += 1
            except Exception:  # the readers compute it as before; the next pass retries
                log.exception("keeping the snapshot %r ahead failed", key)
        return done

    def offer(self, key: Hashable, value: Any, *, every_seconds: Every = 0.0) -> None:
        """Keep ``value`` as ``key``'s, unless that key has a current entry in the first half of
        its ``every_seconds`` (or one as new) or is being computed: a computation that derives
        other keys' values on its way (the job list: each listed job's report) hands them over,
        so that reading one of them computes nothing. An entry past half its time is renewed:
        the values one computation offers then never expire together between two of its runs
        (the job list's 200 finished jobs' reports, current a minute, did, and every one a page
        then read was recomputed on its own). Offered inside a computation, the value is as old
        as that computation (its generation and start); it is counted in entries, not bytes."""
        generation, started = _COMPUTED_AS.get() or (self.generation(), self._clock())
        every = every_seconds(value) if callable(every_seconds) else every_seconds
        with self._lock:
            entry = self._entries.get(key)
            now = self._clock()
            if key in self._computing or (
                entry is not None
                and (
                    entry.computed_at >= started
                    or (
                        self._current(entry, self.generation(), now)
                        and (
                            entry.every_seconds <= 0.0
                            or now - entry.computed_at < entry.every_seconds / 2
                        )
                    )
                )
            ):
                return
            self._keep(key, _Entry(generation, started, value, every))

    def _start_refresh(
        self,
        key: Hashable,
        compute: Callable[[], Any],
        every_seconds: Every,
        size: Callable[[Any], int] | None,
    ) -> None:
        """One background recomputation of ``key`` (the caller marked it refreshing)."""

        def job() -> None:
            try:
                # the generation when the refresh starts, not when it was asked for: under
                # load the queue may be a cycle long, and an answer computed now is that new
                generation = self.generation()
                future: Future[Any] = Future()
                with self._lock:
                    entry = self._entries.get(key)
                    done = entry is not None and self._current(entry, generation, self._clock())
                    busy = key in self._computing
                    if not (busy or done):
                        self._computing[key] = future
                if not (busy or done):
                    self._compute(key, compute, future, generation, every_seconds, size)
            except Exception:  # a failed refresh keeps the old value; the next read retries
                log.exception("refreshing the snapshot %r failed", key)
            finally:
                with self._lock:
                    self._refreshing.discard(key)

        if self._refresh is None:
            self._refresh = background_runner()
        self._refresh(job)
