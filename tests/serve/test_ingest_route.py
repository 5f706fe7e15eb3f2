"""POST /api/ingest/falco in-process: off without a token, 401, 202, the buffer drained."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from fastapi.testclient import TestClient

from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.service.identity.users import UserDirectory
from hpcscope.service.security.buffer import SecurityEventBuffer
from hpcscope.service.settings import Settings
from hpcscope.service.source_settings import FalcoSection

ALERT = orjson.dumps(
    {
        "rule": "hpcscope Executable run from a temp directory in a Slurm job",
        "priority": "Error",
        "hostname": "gpu01",
        "tags": ["hpcscope", "SC-2"],
        "output_fields": {
            "evt.time": 1_764_000_000_000_000_000,
            "proc.exepath": "/tmp/ultralytics_runner",
            "thread.cgroups": "cpuset=/slurm/uid_1000/job_77/step_0/task_0",
        },
    }
)


@pytest.fixture
def app_client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(store_path=tmp_path / "s.duckdb", falco=FalcoSection(ingest_token="s3cret"))
    service = Service.open(settings, users=UserDirectory.demo())
    with TestClient(create_app(service)) as client:
        yield client
    service.close()


def test_off_without_a_token(client: TestClient) -> None:
    assert client.post("/api/ingest/falco", content=ALERT).status_code == 404


def test_token_header_or_query(app_client: TestClient) -> None:
    assert app_client.post("/api/ingest/falco", content=ALERT).status_code == 401
    wrong = {"Authorization": "Bearer nope"}
    assert app_client.post("/api/ingest/falco", content=ALERT, headers=wrong).status_code == 401
    good = {"Authorization": "Bearer s3cret"}
    reply = app_client.post("/api/ingest/falco", content=ALERT, headers=good)
    assert (reply.status_code, reply.json()["accepted"]) == (202, 1)
    reply = app_client.post("/api/ingest/falco?token=s3cret", content=ALERT)
    assert reply.status_code == 202
    bad = app_client.post("/api/ingest/falco?token=s3cret", content=b"[1, 2")
    assert bad.status_code == 400 and bad.json()["errors"][0]["line"] == 1
    buffer = app_client.app.state.security_events  # type: ignore[attr-defined]
    assert isinstance(buffer, SecurityEventBuffer)
    drained = buffer.drain()
    assert drained.falco.column("job_id").to_pylist() == ["77", "77"]
    assert drained.falco.column("proc_exe").to_pylist() == ["/tmp/ultralytics_runner"] * 2
