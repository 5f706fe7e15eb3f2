"""Trace analyses on the web: upload, JSON twin, who sees what, who may link what.

Visibility matrix (the store filters in SQL): a researcher sees their own analyses, a team lead
also those of members of the accounts they coordinate (and those linked to their accounts'
jobs), an admin all. Linking: only the owner or an admin, and only to a job they may see.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.service.settings import Settings
from tests.conftest import basic_auth, demo_users
from tests.support.paths import FIXTURES

HTA_2RANK = FIXTURES / "traces" / "hta_trace_filter_2rank"
USERS = ("alice", "bob", "dave", "carol", "admin")


def _files(directory: Path = HTA_2RANK) -> list[tuple[str, tuple[str, bytes, str]]]:
    return [
        ("files", (p.name, p.read_bytes(), "application/gzip")) for p in sorted(directory.iterdir())
    ]


@pytest.fixture(scope="module")
def app_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    path = tmp_path_factory.mktemp("traces-web") / "s.duckdb"
    service = Service.open(Settings(store_path=path, secret_key="t"), users=demo_users())
    jobs = pa.table(
        {
            "job_id": ["1", "2", "3"],
            "user": ["alice", "bob", "dave"],
            "account": ["vision", "nlp", "speech"],
            "source": ["test"] * 3,
        }
    )
    service.store.upsert_jobs(jobs).result()
    yield service
    service.close()


@pytest.fixture(scope="module")
def as_user(app_service: Service) -> Iterator[Callable[[str], TestClient]]:
    clients: dict[str, TestClient] = {}
    app = create_app(app_service)
    for user in USERS:
        clients[user] = TestClient(app, headers=basic_auth(user))
        clients[user].__enter__()
    yield clients.__getitem__
    for client in clients.values():
        client.__exit__(None, None, None)


@pytest.fixture(scope="module")
def owned(as_user: Callable[[str], TestClient]) -> dict[str, str]:
    """One analysis per researcher and the team lead: owner -> analysis id."""
    ids = {}
    for user in ("alice", "bob", "dave", "carol"):
        response = as_user(user).post("/api/traces", files=_files())
        assert response.status_code == 201, response.text
        ids[user] = response.json()["analysis_id"]
    return ids


VISIBLE = {
    "alice": {"alice"},
    "bob": {"bob"},
    "dave": {"dave"},
    "carol": {"alice", "bob", "carol"},  # coordinates vision and nlp
    "admin": {"alice", "bob", "dave", "carol"},
}


@pytest.mark.parametrize("viewer", USERS)
def test_visibility_matrix(
    as_user: Callable[[str], TestClient], owned: dict[str, str], viewer: str
) -> None:
    client = as_user(viewer)
    listed = {a["owner_user"] for a in client.get("/api/traces").json()["analyses"]}
    assert listed == VISIBLE[viewer]
    page = client.get("/traces")
    assert page.status_code == 200
    for owner, analysis_id in owned.items():
        expected = 200 if owner in VISIBLE[viewer] else 404
        assert client.get(f"/api/traces/{analysis_id}").status_code == expected, (viewer, owner)
        assert client.get(f"/traces/{analysis_id}").status_code == expected
        assert (analysis_id in page.text) == (owner in VISIBLE[viewer])


LINKS = [
    # (actor, owner of the analysis, job, expected status)
    ("alice", "alice", "1", 200),  # her analysis, her job
    ("alice", "alice", "2", 403),  # bob's job
    ("alice", "alice", "404", 403),  # no such job: indistinguishable from someone else's
    ("alice", "bob", "1", 403),  # bob's analysis is not visible to her
    ("carol", "alice", "1", 403),  # visible to the team lead, but not hers to link
    ("carol", "carol", "2", 200),  # her analysis, a job of an account she coordinates
    ("carol", "carol", "3", 403),  # speech is not her account
    ("admin", "dave", "3", 200),
    ("admin", "bob", "1", 200),  # admins may link anything to any job
]


@pytest.mark.parametrize(("actor", "owner", "job", "status"), LINKS)
def test_link_matrix(
    as_user: Callable[[str], TestClient],
    owned: dict[str, str],
    actor: str,
    owner: str,
    job: str,
    status: int,
) -> None:
    response = as_user(actor).post(f"/api/traces/{owned[owner]}/link", json={"job_id": job})
    assert response.status_code == status, response.text
    if status == 200:
        assert response.json()["job_id"] == job
        # unlink again so the other cases start from the same state
        assert (
            as_user(actor)
            .post(f"/api/traces/{owned[owner]}/link", json={"job_id": ""})
            .json()["job_id"]
            is None
        )


def test_a_linked_analysis_is_visible_to_the_lead_of_the_jobs_account(
    as_user: Callable[[str], TestClient],
) -> None:
    # dave (speech) uploads and an admin links it to bob's nlp job: carol, who coordinates nlp,
    # now sees it; alice does not
    analysis_id = as_user("dave").post("/api/traces", files=_files()).json()["analysis_id"]
    assert as_user("carol").get(f"/api/traces/{analysis_id}").status_code == 404
    linked = as_user("admin").post(f"/api/traces/{analysis_id}/link", json={"job_id": "2"})
    assert linked.json()["account"] == "nlp"
    assert as_user("carol").get(f"/api/traces/{analysis_id}").status_code == 200
    assert as_user("alice").get(f"/api/traces/{analysis_id}").status_code == 404


def test_upload_page_redirects_to_the_result(as_user: Callable[[str], TestClient]) -> None:
    client = as_user("alice")
    response = client.post("/traces", files=_files(), data={"job_id": "1"}, follow_redirects=False)
    assert response.status_code == 303
    page = client.get(response.headers["location"])
    assert page.status_code == 200
    assert "Phases per rank" in page.text and 'href="/jobs/1"' in page.text
    assert "Communication by class" in page.text and "expert all-to-all" in page.text
    assert "rank 1 slow in data-parallel all-reduce" in page.text
    twin = client.get("/api" + response.headers["location"]).json()
    assert twin["job_id"] == "1" and twin["analysis"]["schema"] == "hpcscope.traces.analysis/1"
    assert twin["chart"]["steps"] == [551, 552]
    comm = twin["analysis"]["comm_classes"]
    assert [c["class"] for c in comm["classes"]] == ["dp_all_reduce", "dp_shard", "ep_all_to_all"]
    assert set(twin["chart"]["busy_ms"]) == {"0", "1"}
    # the user sees their file names, never the server's temporary directory
    assert [s["file"] for s in twin["analysis"]["sources"]] == [
        "sampled_rank-0.json.gz",
        "sampled_rank-1.json.gz",
    ]


def test_uploads_are_size_limited(
    app_service: Service, as_user: Callable[[str], TestClient]
) -> None:
    client = as_user("alice")
    client.app.state.trace_upload_max_bytes = 10_000  # type: ignore[attr-defined]
    try:
        response = client.post("/api/traces", files=_files())
        assert response.status_code == 413
        assert "larger than 10000 bytes" in response.json()["error"]
        page = client.post("/traces", files=_files())
        assert page.status_code == 413 and "larger than" in page.text
    finally:
        client.app.state.trace_upload_max_bytes = 4 << 30  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("kwargs", "status", "message"),
    [
        (
            {"files": [("files", ("rank-0.json", b'{"traceEvents": [ {"ph": ', "text/plain"))]},
            422,
            "rank-0.json",
        ),
        ({"files": [("files", ("notes.txt", b"hello", "text/plain"))]}, 422, "notes.txt"),
        ({"data": {"job_id": "1"}}, 415, "multipart"),
        ({"files": _files(), "data": {"threshold": "abc"}}, 400, "threshold"),
        ({"files": _files(), "data": {"job_id": "2"}}, 403, "no job 2 visible"),
    ],
)
def test_bad_uploads_get_a_clear_error(
    as_user: Callable[[str], TestClient], kwargs: dict[str, Any], status: int, message: str
) -> None:
    response = as_user("alice").post("/api/traces", **kwargs)
    assert response.status_code == status, response.text
    assert message in response.json()["error"]
    assert "hpcscope-traces-" not in response.json()["error"]


def test_server_directories_are_for_admins(as_user: Callable[[str], TestClient]) -> None:
    refused = as_user("carol").post("/api/traces/directory", json={"path": str(HTA_2RANK)})
    assert refused.status_code == 403
    relative = as_user("admin").post("/api/traces/directory", json={"path": "traces"})
    assert relative.status_code == 422
    missing = as_user("admin").post("/api/traces/directory", json={"path": "/no/such/dir"})
    assert missing.status_code == 422 and "no such" in missing.json()["error"]
    done = as_user("admin").post(
        "/api/traces/directory", json={"path": str(HTA_2RANK.resolve()), "job_id": "3"}
    )
    assert done.status_code == 201, done.text
    assert done.json()["job_id"] == "3" and done.json()["ranks"] == 2
    page = as_user("admin").get("/traces")
    assert 'action="/traces/directory"' in page.text
    assert 'action="/traces/directory"' not in as_user("alice").get("/traces").text


def test_anonymous_requests_are_refused(app_service: Service) -> None:
    with TestClient(create_app(app_service)) as client:
        assert client.get("/api/traces").status_code == 401
        assert client.post("/api/traces", files=_files()).status_code == 401
        page = client.get("/traces", follow_redirects=False)
        assert page.status_code == 303 and page.headers["location"].startswith("/login")


def test_a_document_an_earlier_version_stored_is_served_as_stored(
    app_service: Service, as_user: Callable[[str], TestClient]
) -> None:
    """History is kept: a stored document the current contract no longer describes (here, one
    without the ``software`` section, as if stored before it existed) is served as stored, with
    what differs, instead of failing the request."""
    response = as_user("alice").post("/api/traces", files=_files())
    assert response.status_code == 201, response.text
    analysis_id = response.json()["analysis_id"]

    def drop_software(con: Any) -> None:
        con.execute(
            "UPDATE trace_analyses SET result_json = json_remove(result_json, '$.software') "
            "WHERE analysis_id = ?",
            [analysis_id],
        )

    app_service.store.submit_write(drop_software).result()
    body = as_user("alice").get(f"/api/traces/{analysis_id}").json()
    assert "software" not in body["analysis"]
    assert body["analysis"]["schema"] == "hpcscope.traces.analysis/1"
    assert body["chart"] is None
    assert body["contract_problems"] == ["software: Field required"]
    assert as_user("bob").get(f"/api/traces/{analysis_id}").status_code == 404
