"""Job pages and APIs: figures, units, and access control as a matrix (user x job x endpoint)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from tests.conftest import basic_auth
from tests.support.data import JOBS, populate

VISIBLE = {
    "alice": {"101"},
    "bob": {"102"},
    "dave": {"103"},
    "carol": {"101", "102"},  # team lead of vision and nlp, not speech
    "admin": {"101", "102", "103"},
}


@pytest.fixture
def stored(service: Service) -> Service:
    populate(service.store, now=utcnow())
    return service


@pytest.fixture(scope="module")
def clients_of(module_service: Service) -> Iterator[dict[str, TestClient]]:
    """Each user's client of one stored service for the module's read-only matrix tests."""
    populate(module_service.store, now=utcnow())
    clients = {
        user: TestClient(create_app(module_service), headers=basic_auth(user)) for user in VISIBLE
    }
    for test_client in clients.values():
        test_client.__enter__()
    yield clients
    for test_client in clients.values():
        test_client.__exit__(None, None, None)


@pytest.mark.parametrize("user", sorted(VISIBLE))
def test_job_list_shows_exactly_the_visible_jobs(
    clients_of: dict[str, TestClient], user: str
) -> None:
    body = clients_of[user].get("/api/jobs").json()
    assert {job["job_id"] for job in body["jobs"]} == VISIBLE[user]


@pytest.mark.parametrize("user", sorted(VISIBLE))
@pytest.mark.parametrize("job_id", sorted(JOBS))
@pytest.mark.parametrize(
    "path", ["/api/jobs/{id}", "/api/jobs/{id}/timeseries", "/api/jobs/{id}/phases", "/jobs/{id}"]
)
def test_every_job_endpoint_enforces_visibility(
    clients_of: dict[str, TestClient], user: str, job_id: str, path: str
) -> None:
    response = clients_of[user].get(path.format(id=job_id))
    if job_id in VISIBLE[user]:
        assert response.status_code == 200
    else:
        assert response.status_code == 404
        assert JOBS[job_id][0] not in response.text  # not even the owner's name


def test_job_report_has_reported_beside_real(
    stored: Service, client_as: Callable[[str], TestClient]
) -> None:
    report = client_as("bob").get("/api/jobs/102").json()
    assert report["reported_util_ratio"] == pytest.approx(0.87)
    assert report["sm_active_ratio"] == pytest.approx(0.19)
    assert report["verdict"] == "busy_not_computing"
    assert report["gpus_observed"] == 4
    assert report["useful_gpu_hours"] == pytest.approx(4 * 120 * 0.19 / 3600, rel=0.05)
    page = client_as("bob").get("/jobs/102").text
    assert "87 % util" in page and "19 % SM active" in page
    assert "GPU-h" in page


def test_timeseries_is_downsampled_per_gpu(
    stored: Service, client_as: Callable[[str], TestClient]
) -> None:
    data = client_as("alice").get("/api/jobs/101/timeseries").json()
    assert [(s["node"], s["gpu"]) for s in data["series"]] == [("gpu01", g) for g in range(4)]
    assert all(len(s["t"]) <= 720 for s in data["series"])
    assert data["series"][0]["sm_active_ratio"][0] == pytest.approx(0.82)
    assert data["source"] == "raw" and data["out_of_retention"] == []  # 2-min job: raw buckets


def _leaves(value: Any) -> Iterator[Any]:
    """Every scalar of a JSON document."""
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


def test_cluster_state_redacts_other_peoples_jobs(
    stored: Service, client_as: Callable[[str], TestClient]
) -> None:
    body = client_as("alice").get("/api/cluster").json()
    gpus = {(g["node"], g["gpu"]): g for g in body["gpus"]}
    mine, theirs = gpus[("gpu01", 0)], gpus[("gpu01", 5)]
    assert mine["state"] == "active" and mine["job_ids"] == ["101"]
    assert mine["sm_active_ratio"] == pytest.approx(0.82)
    assert theirs["state"] == "allocated"
    assert theirs["job_ids"] == [] and theirs["sm_active_ratio"] is None
    # no value names bob's job or bob (a substring test would match "102" inside a time)
    strings = {v for v in _leaves(body) if isinstance(v, str)}
    assert "102" not in strings and not any("bob" in v for v in strings)
    assert gpus[("gpu02", 7)]["state"] == "nodata"  # no sample: unknown, not an idle GPU
    admin = {
        (g["node"], g["gpu"]): g for g in client_as("admin").get("/api/cluster").json()["gpus"]
    }
    assert admin[("gpu01", 5)]["job_ids"] == ["102"]


@pytest.mark.parametrize("path", ["/", "/jobs", "/fragments/overview"])
def test_pages_render_for_every_role(
    stored: Service, client_as: Callable[[str], TestClient], path: str
) -> None:
    for user in VISIBLE:
        response = client_as(user).get(path)
        assert response.status_code == 200
        assert "SM active" in response.text


def test_pages_need_login(stored: Service, client: TestClient) -> None:
    for path in ["/", "/jobs", "/jobs/101", "/fragments/overview"]:
        response = client.get(path, follow_redirects=False)
        assert response.status_code == 303
        assert response.headers["location"].startswith("/login")
    for path in ["/api/jobs", "/api/jobs/101", "/api/cluster"]:
        assert client.get(path).status_code == 401
