"""Who sees what on the diagram: every page, fragment and JSON route, for every kind of viewer.

The matrix: alice and dave (researchers), bob (researcher), carol (team lead of vision and
nlp), admin, and an anonymous visitor with the site setting on and off. For each viewer, the
job ids, job names, users and accounts of jobs outside their scope must appear nowhere in any
response, while the GPUs those jobs hold still show as allocated; the counters of those GPUs
are null in JSON and absent from HTML. The result is also written to
``test-artifacts/diagram-access-matrix.json`` for the closing note.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from hpcscope.model.catalog import default_catalog
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.serve.diagram.layout import layout_diagram
from hpcscope.service.core import Service
from tests.conftest import DEMO_PASSWORDS
from tests.support.fleet import JOBS, PLACEMENT, write_fleet
from tests.support.paths import ARTIFACTS

#: job id -> the strings that would identify it
JOB_TOKENS = {job[0]: {job[0], job[1], job[2], job[3]} for job in JOBS}
RUNNING = {job[0] for job in JOBS if job[4] == "RUNNING"}
VISIBLE = {
    "admin": set(JOB_TOKENS),
    "alice": {"4410001", "4410004"},
    "bob": {"4410002", "4410005"},
    "dave": {"4410003"},
    "carol": {"4410001", "4410002", "4410004", "4410005"},
    None: set(),
}


@pytest.fixture
def fleet_service(service: Service) -> Service:
    write_fleet(service.store, now=utcnow())
    return service


def logged_in(service: Service, user: str | None) -> TestClient:
    # a browser on the server's own pages sends its Origin with every POST (the CSRF check)
    client = TestClient(create_app(service), headers={"Origin": "http://testserver"})
    client.__enter__()
    if user is not None:
        response = client.post(
            "/login",
            data={"username": user, "password": DEMO_PASSWORDS[user], "next": "/"},
            follow_redirects=False,
        )
        assert response.status_code == 303
    return client


@pytest.fixture
def clients(fleet_service: Service) -> Iterator[dict[str | None, TestClient]]:
    fleet_service.settings.anonymous_diagram = True
    made = {user: logged_in(fleet_service, user) for user in VISIBLE}
    yield made
    for client in made.values():
        client.__exit__(None, None, None)


def _urls(service: Service) -> list[str]:
    """Every page and JSON route, and the card of every element that reads job data.

    GPUs, nodes, NVSwitches and the scheduler read jobs: all of their cards are fetched. HCAs,
    collectors and vectors share one code path per kind that reads no job: two of each.
    """
    layout = layout_diagram(service.topology, default_catalog())
    by_kind: dict[str, list[str]] = {}
    for shape in layout.shapes:
        kind = shape.kind.value if shape.kind is not None else shape.role.value
        by_kind.setdefault(kind, []).append(shape.id)
    cards = [
        element_id
        for kind, ids in by_kind.items()
        for element_id in (ids if kind in {"gpu", "node", "nvswitch", "scheduler"} else ids[:2])
    ]
    return [
        "/diagram",
        "/diagram?reader=decision&mode=threats",
        "/diagram?node=gpu02&element=gpu-gpu02-2",
        "/diagram/decision",
        "/api/diagram",
        "/api/diagram?node=gpu01",
        "/api/diagram/state",
        "/api/diagram/state?node=gpu02",
        *[f"/diagram/card/{element_id}" for element_id in cards],
        *[
            f"/api/diagram/elements/{element_id}"
            for element_id in ("gpu-gpu01-0", "gpu-gpu01-4", "gpu-gpu01-7", "gpu-gpu02-2")
        ],
        "/api/diagram/elements/node-gpu01",
        "/api/diagram/elements/scheduler",
    ]


def _forbidden(user: str | None) -> set[str]:
    hidden = set(JOB_TOKENS) - VISIBLE[user]
    tokens = {token for job in hidden for token in JOB_TOKENS[job]}
    # a token that also belongs to a visible job (a shared account) is not a leak
    return tokens - {token for job in VISIBLE[user] for token in JOB_TOKENS[job]}


def test_access_matrix(clients: dict[str | None, TestClient], fleet_service: Service) -> None:
    urls = _urls(fleet_service)
    matrix: dict[str, Any] = {}
    for user, client in clients.items():
        forbidden = _forbidden(user)
        pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(forbidden))) + r")\b")
        seen_jobs: set[str] = set()
        for url in urls:
            response = client.get(url)
            assert response.status_code == 200, (user, url, response.status_code)
            leak = pattern.search(response.text) if forbidden else None
            assert leak is None, f"{user or 'anonymous'} sees {leak.group(0)!r} on {url}"
            seen_jobs |= {job for job in JOB_TOKENS if re.search(rf"\b{job}\b", response.text)}
        # every running job the viewer may see is shown, and no other
        assert seen_jobs == VISIBLE[user], (user, seen_jobs)
        matrix[user or "anonymous"] = {
            "jobs_shown": sorted(seen_jobs),
            "hidden_tokens_checked": sorted(forbidden),
            "responses_checked": len(urls),
        }
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "diagram-access-matrix.json").write_text(json.dumps(matrix, indent=2) + "\n")


def test_counters_of_hidden_gpus_are_null(clients: dict[str | None, TestClient]) -> None:
    for user, client in clients.items():
        body = client.get("/api/diagram").json()
        gpus = body["live"]["gpus"]
        for (node, index), (job, _) in PLACEMENT.items():
            gpu = gpus[f"gpu-{node}-{index}"]
            if job is not None and job in VISIBLE[user]:
                assert gpu["state"] == "active" and gpu["job_ids"] == [job]
                assert gpu["sm_active_ratio"] is not None
            elif job is not None:
                assert gpu["state"] == "allocated", (user, node, index)
                assert gpu["job_ids"] == [] and gpu["hidden_jobs"] == 1
                counters = {
                    k: v
                    for k, v in gpu.items()
                    if k.endswith(("_ratio", "_watts", "_celsius", "_bytes", "_second", "_hertz"))
                    or k == "xid_last"
                }
                assert all(v is None for v in counters.values()), (user, node, index)
            else:
                assert gpu["state"] == "idle"
                # an idle GPU's counters (memory left behind is a security signal): admins only
                assert (gpu["reported_util_ratio"] is None) == (user != "admin")
        state = client.get("/api/diagram/state").json()["elements"]
        assert ("real 92 %" in state["gpu-gpu02-2"]["lines"]) == ("4410002" in VISIBLE[user])
        page = client.get("/diagram").text
        assert ("real 92 %" in page) == ("4410002" in VISIBLE[user])
        assert ("real 19 %" in page) == ("4410001" in VISIBLE[user])
        assert body["viewer"]["anonymous"] == (user is None)


def test_anonymous_viewer_gets_structure_and_aggregates(
    clients: dict[str | None, TestClient],
) -> None:
    client = clients[None]
    body = client.get("/api/diagram").json()
    assert body["viewer"] == {"anonymous": True, "user": None, "role": None}
    assert body["live"]["cluster"]["gpus_allocated"] == 14
    assert "14 of 16 GPUs allocated" in body["summary"]
    assert {c["id"] for c in body["collectors"]} >= {"dcgm-exporter", "slurm-exporter"}
    assert len(body["threat_vectors"]) == 6 and set(body["cards"]) >= {"gpu", "weights"}
    assert body["decision"]["own"] is None
    card = client.get("/diagram/card/scheduler").text
    assert "Jobs pending (queue)" in card and "log in to see your own" in card
    assert (
        "Log in to see the values of your own jobs" in client.get("/diagram/card/gpu-gpu02-2").text
    )


def test_without_the_setting_anonymous_visitors_must_log_in(fleet_service: Service) -> None:
    assert fleet_service.settings.anonymous_diagram is False
    with TestClient(create_app(fleet_service)) as client:
        for url in ("/diagram", "/diagram/card/gpu-gpu01-0", "/diagram/decision"):
            response = client.get(url, follow_redirects=False)
            assert response.status_code == 303 and response.headers["location"].startswith(
                "/login?next=/diagram"
            ), url
        for url in ("/api/diagram", "/api/diagram/state", "/api/diagram/elements/weights"):
            response = client.get(url)
            assert response.status_code == 401, url
            assert "4410001" not in response.text


def test_state_polling_uses_etags(clients: dict[str | None, TestClient]) -> None:
    client = clients["alice"]
    first = client.get("/api/diagram/state")
    etag = first.headers["etag"]
    # texts such as "last sample 4 s ago" may change between two requests on a loaded
    # machine: then the new tag must be the one that gets the 304
    for _ in range(3):
        again = client.get("/api/diagram/state", headers={"If-None-Match": etag})
        if again.status_code == 304:
            break
        etag = again.headers["etag"]
    assert again.status_code == 304 and again.content == b""
    # another viewer's state differs, and so does its tag: caches must not mix them
    other = clients["bob"].get("/api/diagram/state")
    assert other.headers["etag"] != etag
    assert "Cookie" in first.headers["vary"]


def test_unknown_elements_and_nodes(clients: dict[str | None, TestClient]) -> None:
    client = clients["admin"]
    assert client.get("/diagram/card/gpu-gpu09-0").status_code == 404
    assert client.get("/api/diagram/elements/nope").status_code == 404
    assert client.get("/diagram?node=gpu99").status_code == 404
    assert client.get("/api/diagram?node=gpu99").status_code == 404
    assert client.get("/diagram?mode=sideways").status_code == 422
