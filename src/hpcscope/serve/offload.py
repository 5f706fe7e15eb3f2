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

When the read lane (``serve/read_lane.py``) already ran the same function on the loop and
missed, it marks the request (:func:`mark_missed`): :func:`answer` then goes straight to the
worker thread, so a cold read is tried from the snapshots once, not twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from hpcscope.service.snapshots import SnapshotMiss, cache_only

P = ParamSpec("P")
T = TypeVar("T")


#: The request-state key the read lane sets when its loop pass missed the snapshots.
_MISSED = "hpcscope_snapshot_missed"


def mark_missed(request: Request) -> None:
    """Record that ``request``'s answer missed the snapshots on the loop already."""
    setattr(request.state, _MISSED, True)


def _missed(args: tuple[object, ...]) -> bool:
    return any(isinstance(a, Request) and getattr(a.state, _MISSED, False) for a in args)


async def answer(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``function(*args, **kwargs)`` from the snapshots on the loop, else in a worker thread
    (at once when the read lane missed on this request already)."""
    if not _missed(args):
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
