"""answer: a snapshot hit on the event loop, a miss computed in a worker thread, same result."""

from __future__ import annotations

import asyncio
import threading

import pytest

from hpcscope.serve.offload import answer
from hpcscope.service.snapshots import Snapshots


def test_a_miss_computes_in_a_worker_thread_and_a_hit_is_answered_on_the_loop() -> None:
    snapshots = Snapshots(lambda: 0)
    computed_in: list[str] = []
    answered_in: list[str] = []

    def compute() -> int:
        computed_in.append(threading.current_thread().name)
        return 42

    def read(offset: int) -> int:
        answered_in.append(threading.current_thread().name)
        return snapshots.get("key", compute) + offset

    async def twice() -> tuple[int, int]:
        return await answer(read, 1), await answer(read, offset=2)

    loop_thread = threading.current_thread().name
    assert asyncio.run(twice()) == (43, 44)
    assert len(computed_in) == 1
    assert computed_in[0] != loop_thread
    # the miss: tried on the loop, then again in the worker; the hit: on the loop alone
    assert answered_in == [loop_thread, computed_in[0], loop_thread]


def test_an_error_of_the_function_is_raised_not_retried() -> None:
    tried: list[int] = []

    def refuses() -> int:
        tried.append(1)
        raise PermissionError("not yours")

    with pytest.raises(PermissionError, match="not yours"):
        asyncio.run(answer(refuses))
    assert tried == [1]
