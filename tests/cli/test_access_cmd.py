"""``hpcscope access PATH``: who read my weights from a running server, table and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
from typer.testing import CliRunner

from hpcscope.cli.main import app
from hpcscope.model.file_access import FILE_ACCESS_SCHEMA
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.service.identity.users import UserDirectory
from hpcscope.service.settings import Settings
from hpcscope.store.file_access import append_file_access
from tests.support.data import populate
from tests.support.servers import live_server

runner = CliRunner()
SHARD = "/lustre/checkpoints/run-a/step-1/model.pt"


def _invoke(url: str, user: str, *args: str) -> object:
    return runner.invoke(
        app,
        ["access", *args, "--url", url, "--user", user, "--password", f"{user}-demo"],
        env={"COLUMNS": "250"},
    )


def test_access_through_a_server_is_scoped(tmp_path: Path) -> None:
    service = Service.open(
        Settings(store_path=tmp_path / "s.duckdb", secret_key="k"), users=UserDirectory.demo()
    )
    now = utcnow()
    populate(service.store, now=now)
    rows = [
        {"ts": now, "path": SHARD, "access": access, "bytes": size, "node": "gpu01",
         "job_id": job, "pid": pid, "uid": 1000, "binary": "/usr/bin/python3",
         "arguments": "x.py", "exec_id": None, "function": "security_file_permission",
         "source_kind": "tetragon", "source_name": "t.log", "source_line": pid}
        for access, size, job, pid in (("write", 10, "101", 1), ("read", 4096, "102", 2))
    ]  # fmt: skip
    append_file_access(
        service.store, pa.Table.from_pylist(rows, schema=FILE_ACCESS_SCHEMA)
    ).result()
    try:
        with live_server(create_app(service)) as url:
            admin = _invoke(url, "admin", "/lustre/checkpoints/run-a", "--json")
            assert admin.exit_code == 0, admin.output  # type: ignore[attr-defined]
            document = json.loads(admin.stdout)  # type: ignore[attr-defined]
            assert document["sees_all"] is True
            assert {(a["job_id"], a["read_bytes"]) for a in document["accessors"]} == {
                ("101", 0), ("102", 4096)}  # fmt: skip
            table = _invoke(url, "admin", "/lustre/checkpoints/run-a")
            assert "4096" in table.stdout and "Who accessed" in table.stdout  # type: ignore[attr-defined]
            records = _invoke(url, "admin", SHARD, "--records")
            assert "read" in records.stdout and "write" in records.stdout  # type: ignore[attr-defined]
            relative = _invoke(url, "admin", "relative/path", "--json")
            assert relative.exit_code != 0  # type: ignore[attr-defined]
    finally:
        service.close()
