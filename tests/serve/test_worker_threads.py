"""The web server's worker threads are bounded by ``worker_threads``, not anyio's 40."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import anyio
from fastapi.testclient import TestClient

from hpcscope.serve.app import create_app
from hpcscope.serve.offload import answer
from hpcscope.service.core import Service
from hpcscope.service.settings import Settings
from hpcscope.service.snapshots import SnapshotMiss
from tests.conftest import TEST_PASSWORD_HASH_COST_LOG2, demo_users


def test_offloaded_reads_run_in_at_most_worker_threads_threads_at_once(tmp_path: Path) -> None:
    settings = Settings(
        store_path=tmp_path / "store.duckdb",
        secret_key="test-secret",
        password_hash_cost_log2=TEST_PASSWORD_HASH_COST_LOG2,
        worker_threads=3,
    )
    service = Service.open(settings, users=demo_users())
    lock, running, most, threads = threading.Lock(), [0], [0], set[int]()
    loop_thread: list[int] = []

    def cold_read() -> int:
        # a read the snapshots cannot answer on the loop: it runs in a worker thread
        if threading.get_ident() in loop_thread:
            raise SnapshotMiss("cold")
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            threads.add(threading.get_ident())
        time.sleep(0.02)
        with lock:
            running[0] -= 1
        return 1

    async def twenty_at_once() -> int:
        loop_thread.append(threading.get_ident())
        done: list[int] = []

        async def one() -> None:
            done.append(await answer(cold_read))

        async with anyio.create_task_group() as group:
            for _ in range(20):
                group.start_soon(one)
        return len(done)

    try:
        with TestClient(create_app(service)) as client:
            assert client.portal is not None
            assert client.portal.call(twenty_at_once) == 20
    finally:
        service.close()
    assert most[0] == 3  # the limit was reached and never passed
    assert len(threads) <= 3
