from __future__ import annotations

from collections.abc import Callable

from fastapi.testclient import TestClient

from tests.conftest import basic_auth


def test_healthz_needs_no_login_and_says_nothing_about_jobs(client: TestClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert "jobs" not in body


def test_api_without_credentials_is_401_without_a_challenge(client: TestClient) -> None:
    # no Basic challenge unless the client sent Basic: a browser would pop its own dialog
    response = client.get("/api/whoami")
    assert response.status_code == 401
    assert "www-authenticate" not in response.headers
    assert response.json() == {"detail": "authentication required"}


def test_wrong_password_is_401_with_a_basic_challenge(client: TestClient) -> None:
    response = client.get("/api/whoami", headers=basic_auth("alice", "wrong"))
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Basic")


def test_whoami_reports_scope(client_as: Callable[[str], TestClient]) -> None:
    assert client_as("alice").get("/api/whoami").json()["scope"] == {
        "all_jobs": False,
        "users": ["alice"],
        "accounts": [],
    }
    carol = client_as("carol").get("/api/whoami").json()
    assert carol["role"] == "team_lead"
    assert carol["scope"]["accounts"] == ["nlp", "vision"]
    assert client_as("admin").get("/api/whoami").json()["scope"]["all_jobs"] is True


def test_login_form_sets_a_session(client: TestClient) -> None:
    page = client.get("/login")
    assert page.status_code == 200 and 'name="password"' in page.text
    bad = client.post("/login", data={"username": "bob", "password": "nope", "next": "/"})
    assert bad.status_code == 401
    response = client.post(
        "/login",
        data={"username": "bob", "password": "bob-demo", "next": "/api/whoami"},
        follow_redirects=False,
    )
    assert response.status_code == 303
    assert response.headers["location"] == "/api/whoami"
    assert client.get("/api/whoami").json()["user"] == "bob"
    client.post("/logout", headers={"Origin": "http://testserver"})
    assert client.get("/api/whoami").status_code == 401


def test_login_never_redirects_off_site(client: TestClient) -> None:
    response = client.post(
        "/login",
        data={"username": "bob", "password": "bob-demo", "next": "//evil.example/"},
        follow_redirects=False,
    )
    assert response.headers["location"] == "/"
