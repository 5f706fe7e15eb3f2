"""A corrupted store file is detected at start: a clear message naming the file, exit 1, the
file left as it was; the documented recovery (docs/storage.md, "A corrupt store") works."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hpcscope.model.errors import StoreError
from hpcscope.store import Store
from tests.support.processes import serve, stop
from tests.support.servers import free_port

pytestmark = pytest.mark.e2e


def _store(path: Path) -> Path:
    Store(path).close()  # every migration: catalog and tables on disk
    return path


def _corrupt_header(path: Path) -> None:
    with path.open("r+b") as handle:
        handle.write(b"\xff" * 4096)


def _corrupt_middle(path: Path) -> None:
    """Garbage over the first blocks after DuckDB's three 4 KiB headers (the catalog)."""
    with path.open("r+b") as handle:
        handle.seek(3 * 4096)
        handle.write(bytes((i * 131 + 7) % 256 for i in range(256 * 1024)))


def _serve_once(store: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "hpcscope",
            "serve",
            "--store",
            str(store),
            "--port",
            str(free_port()),
            "--for",
            "5s",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HPCSCOPE_LOG_LEVEL": "WARNING"},
    )


@pytest.mark.parametrize("damage", [_corrupt_header, _corrupt_middle], ids=["header", "block"])
def test_serve_refuses_a_corrupt_store_with_a_clear_message(tmp_path: Path, damage: object) -> None:
    path = _store(tmp_path / "store.duckdb")
    assert callable(damage)
    damage(path)
    damaged = path.read_bytes()
    result = _serve_once(path)
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    message = lines[-1]
    assert str(path) in message and "docs/storage.md" in message, result.stderr
    assert "Traceback" not in result.stderr
    assert path.read_bytes() == damaged  # nothing tried to "repair" it in place


def test_the_store_raises_a_store_error_naming_the_file(tmp_path: Path) -> None:
    path = _store(tmp_path / "store.duckdb")
    _corrupt_middle(path)
    with pytest.raises(StoreError, match="corrupt") as caught:
        Store(path)
    assert str(path) in str(caught.value)


def test_documented_recovery_move_aside_and_start_fresh(tmp_path: Path) -> None:
    path = _store(tmp_path / "store.duckdb")
    _corrupt_header(path)
    # docs/storage.md: move the file (and its .wal) aside, then start
    shutil.move(path, path.with_name("store.duckdb.corrupt"))
    server, _base = serve(path, free_port(), tmp_path / "server.log")
    stop(server)
    with Store(path, read_only=True) as store:
        assert store.schema_version() > 0
    assert path.with_name("store.duckdb.corrupt").exists()
