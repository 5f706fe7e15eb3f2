"""Answering from the read snapshots on the event loop, computing in a worker thread.

A sync route or dependency costs a thread-pool hop per request (FastAPI runs it in anyio's
worker threads), and under load the hops, not the work, set the latency: 50 clients of
cached reads queued for 100-400 ms behind two hops each. :func:`answer` runs the same sync
function on the event loop first inside :func:`~hpcscope.service.snapshots.cache_only`, where
every snapshot read is served from memory or raises
:class:`~hpcscope.service.snapshots.SnapshotMiss`; on a miss it runs the function again in a
worker thread, where it computes (and may block on the store). The function is the same
either way, its access checks included, so the answer is too.

Only functions whose reads all go through the snapshots (or that raise ``SnapshotMiss``
themselves before anything else that blocks) may be answered so.

A request the read lane (``serve/read_lane.py``) already tried from the snapshots and missed
(:func:`note_lane_miss`) goes to the worker thread at once: the same reads would miss again.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import ParamSpec, TypeVar

from starlette.concurrency import run_in_threadpool

from hpcscope.service.snapshots import SnapshotMiss, cache_only

P = ParamSpec("P")
T = TypeVar("T")

_LANE_MISSED: ContextVar[bool] = ContextVar("hpcscope_lane_missed", default=False)


def note_lane_miss() -> None:
    """The read lane tried this request from the snapshots and missed (the app's task runs in
    the lane's context: :func:`answer` sees it)."""
    _LANE_MISSED.set(True)


async def answer(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``function(*args, **kwargs)`` from the snapshots on the loop, else in a worker thread
    (at once after a miss of the read lane)."""
    if not _LANE_MISSED.get():
        try:
            return cache_only(function, *args, **kwargs)
        except SnapshotMiss:
            pass
    return await run_in_threadpool(function, *args, **kwargs)


async def resolve(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """:func:`answer` for who is asking (the principal's rule), which the lane's miss (of the
    route's data) says nothing about."""
    try:
        return cache_only(function, *args, **kwargs)
    except SnapshotMiss:
        return await run_in_threadpool(function, *args, **kwargs)
