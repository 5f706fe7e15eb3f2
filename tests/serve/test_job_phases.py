"""The phase answer on the job page, in ``GET /api/jobs/{id}`` and ``hpcscope job --json``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from hpcscope.cli.main import app
from hpcscope.model.access import Principal
from hpcscope.model.timeutil import utcnow
from hpcscope.service.core import SeenJob, Service
from hpcscope.service.snapshots import caching_only
from hpcscope.service.traces.capture_contracts import JobPhases
from hpcscope.service.traces.captures import CaptureSpool
from hpcscope.twin.scheduler import JobState, SimJob
from hpcscope.twin.traces import TraceSpool
from hpcscope.twin.workloads import Profile
from tests.support.data import JOBS, populate


def capture_job_101(service: Service, spool: Path) -> None:
    """Alice's job 101 (gpu01 GPUs 0-3) captured, its rank 2 slow in its backward."""
    job = SimJob(101, "vit", "alice", "vision", Profile.STRAGGLER, 4, 3600.0, 0.0,
                 straggler_gpu=2)  # fmt: skip
    job.state, job.start_time = JobState.RUNNING, 0.0
    _, _, node, gpus, _, _ = JOBS["101"]
    job.allocation = [(node, g) for g in gpus]
    at = utcnow().timestamp() - 30  # inside the samples populate() wrote
    TraceSpool(spool).write_window(job, 0, at=at)
    CaptureSpool(service.store, spool, grace_seconds=0).collect_once()


def test_the_page_and_the_json_name_the_straggler_rank_gpu_and_phase(
    service: Service, client_as: Callable[[str], TestClient], tmp_path: Path
) -> None:
    populate(service.store, now=utcnow())
    capture_job_101(service, tmp_path / "spool")
    body = client_as("alice").get("/api/jobs/101").json()
    phases = JobPhases.model_validate(body["phases"])
    assert phases.captured and len(phases.windows) == 1
    window = phases.windows[0]
    assert window.attribution == "verified"  # the store's allocations hold gpu01 GPU 2
    straggler = window.straggler
    assert straggler is not None
    assert (straggler.rank, straggler.node, straggler.gpu, straggler.phase) == (
        2, "gpu01", 2, "backward"
    )  # fmt: skip
    assert set(window.phases_per_node) == {"gpu01"} and len(window.phases_per_rank) == 4
    assert window.what_if_gain_seconds_per_step is not None
    assert window.what_if_gain_seconds_per_step > 0.01
    assert window.evidence_notes  # the job's telemetry was looked at, and it says what it found
    comm = window.comm_classes
    assert comm is not None and comm.unclassified == []
    assert [c.class_ for c in comm.classes] == ["dp_all_reduce"]  # the twin's DDP AllReduce
    page = client_as("alice").get("/jobs/101").text
    assert 'id="job-phases"' in page and "rank 2" in page and "backward" in page
    assert "What-if gain" in page and "gpu01 GPU 2" in page
    assert 'id="job-comm-classes"' in page and "data-parallel all-reduce" in page
    assert client_as("bob").get("/api/jobs/101/phases").status_code == 404


def test_a_job_without_capture_says_why_and_how_to_enable(
    service: Service, client_as: Callable[[str], TestClient]
) -> None:
    populate(service.store, now=utcnow())
    phases = client_as("bob").get("/api/jobs/102/phases").json()
    assert phases["captured"] is False and phases["windows"] == []
    assert "not switched on" in phases["reason"]
    assert "capture_dir=" in phases["how_to_enable"]
    page = client_as("bob").get("/jobs/102").text
    assert 'id="job-phases-none"' in page and "How to enable" in page


def test_hpcscope_job_json_has_the_phases(service: Service, tmp_path: Path) -> None:
    populate(service.store, now=utcnow())
    capture_job_101(service, tmp_path / "spool")
    path = Path(service.settings.store_path)
    service.close()
    result = CliRunner().invoke(app, ["job", "101", "--store", str(path), "--json"])
    assert result.exit_code == 0, result.output
    straggler = json.loads(result.stdout)["phases"]["windows"][0]["straggler"]
    assert (straggler["rank"], straggler["phase"]) == (2, "backward")
    text = CliRunner().invoke(app, ["job", "101", "--store", str(path)])
    assert text.exit_code == 0, text.output
    assert "straggler" in text.stdout and "rank 2" in text.stdout and "backward" in text.stdout


def test_the_job_page_and_document_check_visibility_once(
    service: Service,
    client_as: Callable[[str], TestClient],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The report, the alerts and the phases of one page read the job its one check found.

    The read lane (``serve/read_lane.py``) and ``serve/offload.py`` run a route on the event
    loop from the snapshots first and, on a miss, once more in a worker thread: each pass
    checks once (before: three checks a pass), and a lane miss is not tried again on the loop."""
    populate(service.store, now=utcnow())
    checks: list[bool] = []  # per check: made in the cache-only pass
    check = service.visible_job

    def counted(principal: Principal, job_id: str) -> SeenJob | None:
        checks.append(caching_only())
        return check(principal, job_id)

    monkeypatch.setattr(service, "visible_job", counted)
    for user, status in (("alice", 200), ("bob", 404)):
        for path in ("/jobs/101", "/api/jobs/101"):
            checks.clear()
            assert client_as(user).get(path).status_code == status
            # passes: the read lane's on the loop, the app's on the loop (skipped after the
            # lane missed the snapshots), the worker thread's: one check each at most
            assert checks.count(True) <= 2 and checks.count(False) <= 1, (user, path, checks)
            if user == "alice":  # cold: the worker computed it, the loop tried at most once
                assert checks.count(False) == 1 and checks.count(True) <= 1, (path, checks)
