"""The trusted reverse-proxy mode over real HTTP: ``X-Remote-User`` believed from the proxy's
address (127.0.0.1) only; the same header from 127.0.0.2 is a 401. Roles of proxied users come
from the users file and from Slurm's associations, parsed from real ``sacctmgr`` output
(``tests/fixtures/slurm/debian-22.05``: hpcs_carol coordinates team-a and team-b)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx2
import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from hpcscope.ingest.slurm import account_memberships, parse_sacctmgr_parsable
from hpcscope.model.schemas import JOB_SCHEMA
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.service.settings import Settings
from hpcscope.store import Store
from tests.conftest import TEST_PASSWORD_HASH_COST_LOG2, basic_auth, demo_users
from tests.support.paths import FIXTURES
from tests.support.servers import live_server

DEB = FIXTURES / "slurm" / "debian-22.05"
HEADER = "X-Remote-User"
#: job id -> (user, account)
JOBS = {
    "5001": ("hpcs_alice", "team-a"),
    "5002": ("hpcs_bob", "team-b"),
    "5003": ("alice", "vision"),
}


def _write_slurm_identity(store: Store) -> None:
    assoc = parse_sacctmgr_parsable(
        (DEB / "sacctmgr_assoc.txt").read_text(),
        source="sacctmgr show assoc",
        fields=["cluster", "account", "user", "partition", "parentname", "defaultqos"],
    )
    users = parse_sacctmgr_parsable(
        (DEB / "sacctmgr_users_withcoord.txt").read_text(), source="sacctmgr show user"
    )
    store.replace_account_memberships(
        account_memberships(assoc.rows, users.rows, cluster="hpcstest")
    ).result()
    now = utcnow()
    rows = [
        {field.name: None for field in JOB_SCHEMA}
        | {
            "job_id": job,
            "name": f"train-{job}",
            "user": user,
            "account": account,
            "state": "COMPLETED",
            "submit_time": now - timedelta(hours=2),
            "start_time": now - timedelta(hours=2),
            "end_time": now - timedelta(hours=1),
            "gpus": 1,
            "source": "test",
        }
        for job, (user, account) in JOBS.items()
    ]
    store.upsert_jobs(pa.Table.from_pylist(rows, schema=JOB_SCHEMA)).result()


def _settings(tmp_path: Path, **extra: object) -> Settings:
    return Settings(
        store_path=tmp_path / "store.duckdb",
        secret_key="test-secret",
        password_hash_cost_log2=TEST_PASSWORD_HASH_COST_LOG2,
        **extra,
    )


@pytest.fixture
def base_url(tmp_path: Path) -> Iterator[str]:
    settings = _settings(tmp_path, proxy_auth_header=HEADER, proxy_auth_addresses=["127.0.0.1/32"])
    service = Service.open(settings, users=demo_users())
    _write_slurm_identity(service.store)
    with live_server(create_app(service)) as url:
        yield url
    service.close()


def _client(source: str) -> httpx2.Client:
    """A client whose connections leave from ``source`` (the whole of 127/8 is loopback)."""
    return httpx2.Client(transport=httpx2.HTTPTransport(local_address=source), timeout=30)


def _jobs(client: httpx2.Client, url: str, user: str) -> set[str]:
    response = client.get(f"{url}/api/jobs", headers={HEADER: user})
    assert response.status_code == 200, (user, response.text)
    return {job["job_id"] for job in response.json()["jobs"]}


def test_the_proxy_vouches_and_slurm_gives_the_roles(base_url: str) -> None:
    with _client("127.0.0.1") as proxy:
        carol = proxy.get(f"{base_url}/api/whoami", headers={HEADER: "hpcs_carol"}).json()
        assert (carol["role"], carol["coordinated_accounts"]) == ("team_lead", ["team-a", "team-b"])
        assert _jobs(proxy, base_url, "hpcs_carol") == {"5001", "5002"}
        alice = proxy.get(f"{base_url}/api/whoami", headers={HEADER: "hpcs_alice"}).json()
        assert (alice["role"], alice["coordinated_accounts"]) == ("researcher", [])
        assert _jobs(proxy, base_url, "hpcs_alice") == {"5001"}
        assert _jobs(proxy, base_url, "alice") == {"5003"}  # the users file's alice
        assert _jobs(proxy, base_url, "admin") == set(JOBS)
        # a name neither the file nor Slurm knows is nobody
        nobody = proxy.get(f"{base_url}/api/jobs", headers={HEADER: "mallory"})
        assert nobody.status_code == 401
        page = proxy.get(f"{base_url}/jobs", headers={HEADER: "hpcs_carol"})
        assert page.status_code == 200 and "5002" in page.text and "5003" not in page.text


def test_the_header_from_any_other_address_is_refused(base_url: str) -> None:
    with _client("127.0.0.2") as outsider:
        for path in ("/api/jobs", "/api/whoami", "/jobs", "/api/alerts", "/api/tokens"):
            response = outsider.get(f"{base_url}{path}", headers={HEADER: "admin"})
            assert response.status_code == 401, (path, response.status_code)
            assert not any(job in response.text for job in JOBS)  # nothing in the refusal
        # not even with valid credentials beside it: the forged header is the answer
        mixed = outsider.get(
            f"{base_url}/api/jobs", headers={HEADER: "admin", **basic_auth("alice")}
        )
        assert mixed.status_code == 401
        # without the header, the same address logs in the ordinary way
        plain = outsider.get(f"{base_url}/api/jobs", headers=basic_auth("alice"))
        assert plain.status_code == 200
        assert {j["job_id"] for j in plain.json()["jobs"]} == {"5003"}


def test_a_header_sent_twice_is_refused_even_from_the_proxy(base_url: str) -> None:
    with _client("127.0.0.1") as proxy:
        response = proxy.get(
            f"{base_url}/api/jobs", headers=[(HEADER, "hpcs_alice"), (HEADER, "admin")]
        )
        assert response.status_code == 401


def test_proxied_state_changes_keep_the_csrf_rule(base_url: str) -> None:
    with _client("127.0.0.1") as proxy:
        bare = proxy.post(
            f"{base_url}/api/tokens", headers={HEADER: "hpcs_carol"}, json={"label": "x"}
        )
        assert bare.status_code == 403 and "cross-site" in bare.text
        foreign = proxy.post(
            f"{base_url}/api/tokens",
            headers={HEADER: "hpcs_carol", "Origin": "https://evil.example"},
            json={"label": "x"},
        )
        assert foreign.status_code == 403
        made = proxy.post(
            f"{base_url}/api/tokens",
            headers={HEADER: "hpcs_carol", "Origin": base_url},
            json={"label": "carol's cron"},
        )
        assert made.status_code == 201, made.text
        secret = made.json()["secret"]
    # the token carries the Slurm-derived role to a script anywhere
    with _client("127.0.0.2") as script:
        whoami = script.get(
            f"{base_url}/api/whoami", headers={"Authorization": f"Bearer {secret}"}
        ).json()
        assert (whoami["user"], whoami["role"]) == ("hpcs_carol", "team_lead")


def test_without_proxy_mode_the_header_means_nothing(tmp_path: Path) -> None:
    service = Service.open(_settings(tmp_path), users=demo_users())
    try:
        with TestClient(create_app(service)) as client:
            assert client.get("/api/whoami", headers={HEADER: "admin"}).status_code == 401
    finally:
        service.close()


def test_the_settings_need_the_proxies_and_a_real_header_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="proxy_auth_addresses"):
        _settings(tmp_path, proxy_auth_header=HEADER)
    for bad in ("Authorization", "X Remote", "Cookie"):
        with pytest.raises(ValueError, match="header"):
            _settings(tmp_path, proxy_auth_header=bad, proxy_auth_addresses=["10.0.0.1"])
    with pytest.raises(ValueError, match=r"10\.0\.0\.300"):
        _settings(tmp_path, proxy_auth_header=HEADER, proxy_auth_addresses=["10.0.0.300"])
    parsed = _settings(tmp_path, proxy_auth_header=HEADER, proxy_auth_addresses="10.0.0.0/24, ::1")
    assert parsed.proxy_auth_addresses == ["10.0.0.0/24", "::1"]
