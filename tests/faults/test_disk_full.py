"""The disk under the store fills up while the server collects (a 4 MiB tmpfs; needs root,
as in CI's container). Refused writes are logged, the server keeps running, nothing committed
before is lost, and collection resumes when space returns. Real processes: the misbehaving
exporter (in its ``ok`` mode) and ``hpcscope serve``."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hpcscope.store import Store
from tests.faults.test_exporter_faults import NODE, Exporter
from tests.support.processes import api, serve, stop, wait_for
from tests.support.servers import free_port

pytestmark = pytest.mark.e2e


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[Exporter]:
    exporter = Exporter(tmp_path)
    exporter.start()
    try:
        yield exporter
    finally:
        if exporter.process is not None:
            stop(exporter.process)


def _count(store_path: Path, until: Any = None) -> dict[str, Any]:
    with Store(store_path, read_only=True) as store:
        where, params = ("WHERE ts <= ?", [until]) if until is not None else ("", [])
        return dict(
            store.query(
                f"SELECT count(*) AS n, max(ts) AS last FROM gpu_samples {where}", params
            ).to_pylist()[0]
        )


def _fill(directory: Path) -> Path:
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as handle:  # unbuffered: close has nothing to flush
        try:
            while True:
                handle.write(b"\0" * 4096)
        except OSError:
            pass
    return filler


def test_disk_full_is_logged_survived_and_recovered(
    tmp_path: Path, small_disk: Path, exporter: Exporter
) -> None:
    targets = tmp_path / "targets.json"
    targets.write_text(
        json.dumps(
            [
                {
                    "targets": [f"127.0.0.1:{exporter.port}"],
                    "labels": {"exporter": "dcgm", "node": NODE},
                }
            ]
        )
    )
    config = tmp_path / "hpcscope.yaml"
    config.write_text(f"targets_path: {targets}\nscrape_interval_seconds: 1\n")
    store_path = small_disk / "store.duckdb"
    log = tmp_path / "server.log"
    args = ("--config", str(config))
    server, base = serve(store_path, free_port(), log, *args)
    wait_for(  # a scrape's samples committed (the API reads the store's scrapes)
        lambda: [t for t in api(base, "/api/cluster")["targets"] if t["last_samples"]],
        "scraped samples",
    )
    stop(server)
    before = _count(store_path)
    assert before["n"] > 0

    server, _ = serve(store_path, free_port(), log, *args)
    try:
        filler = _fill(small_disk)
        wait_for(lambda: "write refused" in log.read_text(), "the refused write logged", 60)
        time.sleep(3.0)
        assert server.poll() is None, "the server died on a full disk"
        filler.unlink()
        wait_for(lambda: "writes succeed again" in log.read_text(), "writes resuming", 60)
        time.sleep(2.0)
    finally:
        stop(server)
    after = _count(store_path, before["last"])
    print(f"committed before the disk filled: {before['n']}; after: {after['n']}")
    assert after["n"] == before["n"]  # nothing committed before is lost
    assert _count(store_path)["n"] > before["n"]  # and collection resumed
    assert "No space left on device" in log.read_text()
