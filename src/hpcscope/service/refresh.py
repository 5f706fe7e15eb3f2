"""Where the snapshots' background refreshes run (``service/snapshots.py``)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

#: Threads that refresh entries: one. Refreshes are Python work under the interpreter lock,
#: which the event loop that answers every request needs between each of its reads and
#: writes; the lock is handed round the threads that want it, so each more refreshing thread
#: cuts the loop's share. Three threads, against one: 128 nodes, 50 clients with tokens, the
#: mix 169.6 and 126.8 ms p99 at 1,728-1,959 req/s, against 105.2 and 98.0 at 2,241-2,415, the
#: same views computed as often. The reports over hours or months that used to hold the other
#: refreshes back (a month's SLOs) are kept ahead on a thread of their own (``serve/kept.py``).
REFRESH_THREADS = 1


def background_runner() -> Callable[[Callable[[], None]], None]:
    """Run refreshes on :data:`REFRESH_THREADS` daemon-like worker threads."""
    pool = ThreadPoolExecutor(max_workers=REFRESH_THREADS, thread_name_prefix="hpcscope-snapshots")

    def submit(job: Callable[[], None]) -> None:
        try:
            pool.submit(job)
        except RuntimeError:  # the interpreter is shutting down: nothing to refresh for
            pass

    return submit
