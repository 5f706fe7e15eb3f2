"""Who read my weights, as a matrix: /access and /api/access for alice, bob, dave
(researchers), carol (team lead of vision and nlp), admin and an anonymous visitor.

alice's job created a checkpoint; bob's job (another account) and a process outside every job
read it; dave's job read a dataset nobody created. Owners see every access to their paths
(others' command lines redacted), everyone sees their own jobs' accesses, admins everything
(``Principal.sees_all_access_records``), nobody sees another tenant's command line.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from hpcscope.model.access import ACCESS_RECORD_ROLES, Principal, Role
from hpcscope.model.file_access import FILE_ACCESS_SCHEMA
from hpcscope.model.timeutil import utcnow
from hpcscope.service.core import Service
from hpcscope.store.file_access import append_file_access
from tests.serve.test_diagram_access import logged_in
from tests.support.fleet import write_fleet

NOW = utcnow().replace(microsecond=0)
SHARD = "/lustre/checkpoints/run-a/step-1/model.pt"
DATA = "/lustre/datasets/speech/shard-0.tar"


def _record(
    n: int, path: str, access: str, job: str | None, size: int | None, args: str
) -> dict[str, object]:
    return {
        "ts": NOW - timedelta(seconds=60 - n), "path": path, "access": access, "bytes": size,
        "node": "gpu01", "job_id": job, "pid": 1000 + n, "uid": 1000, "binary": "/usr/bin/python3",
        "arguments": args, "exec_id": f"e{n}", "function": "security_file_permission",
        "source_kind": "tetragon", "source_name": "tetragon.log", "source_line": n,
    }  # fmt: skip


RECORDS = {
    "alice-write": _record(1, SHARD, "write", "4410001", 4096, "train.py --alice-args"),
    "alice-read": _record(2, SHARD, "read", "4410001", 4096, "train.py --alice-args"),
    "bob-read": _record(3, SHARD, "read", "4410002", 8192, "steal.py --bob-args"),
    "nojob-read": _record(4, SHARD, "read", None, 100, "cp --root-args"),
    "dave-read": _record(5, DATA, "read", "4410003", 1 << 20, "load.py --dave-args"),
}
#: viewer -> (path asked, records seen, records whose command line is redacted)
SEES = {
    "admin": ({"alice-write", "alice-read", "bob-read", "nojob-read"}, set()),
    "alice": ({"alice-write", "alice-read", "bob-read", "nojob-read"}, {"bob-read", "nojob-read"}),
    "bob": ({"bob-read"}, set()),
    "carol": ({"alice-write", "alice-read", "bob-read", "nojob-read"}, {"nojob-read"}),
    "dave": (set(), set()),
}


@pytest.fixture
def clients(service: Service) -> Iterator[dict[str | None, TestClient]]:
    write_fleet(service.store, now=NOW)
    table = pa.Table.from_pylist(list(RECORDS.values()), schema=FILE_ACCESS_SCHEMA)
    assert append_file_access(service.store, table).result() == len(RECORDS)
    assert append_file_access(service.store, table).result() == 0  # a source read twice
    made = {user: logged_in(service, user) for user in (*SEES, None)}
    yield made
    for client in made.values():
        client.__exit__(None, None, None)


def _key(record: dict[str, object]) -> str:
    line = int(str(record["position"]).removeprefix("line "))
    return next(k for k, v in RECORDS.items() if v["source_line"] == line)


def test_the_matrix_of_who_sees_which_access(clients: dict[str | None, TestClient]) -> None:
    leaks = checked = 0
    for user, (sees, redacted) in SEES.items():
        client = clients[user]
        for url in ("/api/access?path=/lustre/checkpoints/run-a", f"/api/access?path={SHARD}",
                    "/api/access?path=/lustre/checkpoints/"):  # fmt: skip
            body = client.get(url).json()
            seen = {_key(r) for r in body["records"]}
            assert seen == sees, (user, url)
            for record in body["records"]:
                key = _key(record)
                assert record["arguments_redacted"] is (key in redacted), (user, key)
            hidden_args = {str(RECORDS[k]["arguments"]).split()[-1] for k in RECORDS} - {
                str(RECORDS[k]["arguments"]).split()[-1] for k in sees - redacted
            }
            page = client.get(url.replace("/api/access", "/access"))
            assert page.status_code == 200
            for text in (page.text, str(body)):
                leaks += sum(arg in text for arg in hidden_args)
                checked += 1
        assert body["sees_all"] is (user == "admin")
    assert checked == 30 and leaks == 0


def test_accessors_sum_bytes_per_job_and_process(clients: dict[str | None, TestClient]) -> None:
    body = clients["alice"].get("/api/access?path=/lustre/checkpoints/run-a").json()
    by_job = {(a["job_id"], a["pid"]): a for a in body["accessors"]}
    bob = by_job[("4410002", 1003)]
    assert (bob["user"], bob["account"], bob["read_bytes"], bob["accesses"]) == (
        "bob", "nlp", 8192, ["read"])  # fmt: skip
    assert by_job[("4410001", 1001)]["written_bytes"] == 4096
    assert by_job[(None, 1004)]["user"] is None
    owner = body["records"][0]
    assert (owner["owner_job_id"], owner["owner_user"]) == ("4410001", "alice")
    dave = clients["dave"].get(f"/api/access?path={DATA}").json()
    assert [(a["job_id"], a["read_bytes"]) for a in dave["accessors"]] == [("4410003", 1 << 20)]
    assert clients["alice"].get(f"/api/access?path={DATA}").json()["records"] == []


def test_bad_paths_and_anonymous_visitors(clients: dict[str | None, TestClient]) -> None:
    response = clients["admin"].get("/api/access?path=relative/model.pt")
    assert response.status_code == 400 and "not absolute" in response.json()["detail"]
    assert clients["admin"].get("/access?path=relative").status_code == 400
    assert clients[None].get(f"/api/access?path={SHARD}").status_code == 401
    page = clients[None].get(f"/access?path={SHARD}", follow_redirects=False)
    assert page.status_code in (302, 303, 307)
    like = clients["admin"].get("/api/access?path=/lustre/checkpoints/run_a").json()
    assert like["records"] == []  # "_" is not a LIKE wildcard here


def test_one_predicate_decides_who_sees_all_records() -> None:
    assert {Role.ADMIN, Role.SECURITY} == ACCESS_RECORD_ROLES
    for role in Role:
        principal = Principal("x", role, frozenset({"vision"}))
        assert principal.sees_all_access_records is (role in ACCESS_RECORD_ROLES)
        assert principal.access_record_scope().all_jobs is (role in ACCESS_RECORD_ROLES)
    auditor = Principal("audrey", Role.AUDITOR).access_record_scope()  # weight paths: never
    assert not auditor.all_jobs and not auditor.users and not auditor.accounts
