"""Login from outside: no user enumeration by timing, a throttle with Retry-After, and a
Basic challenge only for clients that asked for Basic."""

from __future__ import annotations

import base64
import hashlib
import secrets
import statistics
import time

import httpx2

from hpcscope.model.access import Role
from hpcscope.service.identity.users import UserDirectory, UserRecord
from tests.conftest import basic_auth
from tests.security.conftest import Serve

TRIES = 50


def _login_seconds(client: httpx2.Client, user: str) -> float:
    start = time.perf_counter()
    response = client.post("/login", data={"username": user, "password": "wrong-password"})
    elapsed = time.perf_counter() - start
    assert response.status_code == 401
    return elapsed


def _scrypt_hash(password: str, *, n: int) -> str:
    """A users-file hash (``scrypt$n$r$p$salt$hash``) at a chosen cost."""
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=n, r=8, p=1)
    b64 = base64.b64encode
    return f"scrypt${n}$8$1${b64(salt).decode()}${b64(digest).decode()}"


def test_unknown_and_known_users_take_the_same_time(serve: Serve) -> None:
    # a lowered cost (less noise on a shared machine, still well above 10 ms of work per
    # verification when two are done), the same for both paths: the unknown name's dummy hash
    # follows the users' own; the throttle is raised out of the way
    users = UserDirectory([UserRecord("bob", Role.RESEARCHER, _scrypt_hash("pw", n=2**13), (), ())])
    with (
        serve(users, login_failures_per_minute=10_000) as base,
        httpx2.Client(base_url=base, timeout=30) as client,
    ):
        for _ in range(3):  # warm up: connection, dummy hash, caches
            _login_seconds(client, "bob")
            _login_seconds(client, "no-such-user")
        known: list[float] = []
        unknown: list[float] = []
        for _ in range(TRIES):  # interleaved, so load drift hits both alike
            known.append(_login_seconds(client, "bob"))
            unknown.append(_login_seconds(client, "no-such-user"))
    difference = abs(statistics.median(unknown) - statistics.median(known))
    assert difference < 0.010, (statistics.median(unknown), statistics.median(known))


def test_the_eleventh_failed_login_within_a_minute_gets_429(serve: Serve) -> None:
    with serve() as base, httpx2.Client(base_url=base, timeout=30) as client:
        codes = [
            client.post("/login", data={"username": "carol", "password": f"guess-{i}"}).status_code
            for i in range(10)
        ]
        assert codes == [401] * 10
        eleventh = client.post("/login", data={"username": "carol", "password": "carol-demo"})
        assert eleventh.status_code == 429
        assert 1 <= int(eleventh.headers["retry-after"]) <= 60
        # the address is locked too: another name from here waits as well
        other = client.post("/login", data={"username": "alice", "password": "alice-demo"})
        assert other.status_code == 429
        # and HTTP Basic is the same door
        assert client.get("/api/whoami", headers=basic_auth("alice")).status_code == 429


def test_a_basic_challenge_only_when_basic_was_sent(serve: Serve) -> None:
    with serve() as base, httpx2.Client(base_url=base, timeout=30) as client:
        anonymous = client.get("/api/whoami")
        assert anonymous.status_code == 401
        assert "www-authenticate" not in anonymous.headers
        assert anonymous.json() == {"detail": "authentication required"}
        wrong = client.get("/api/whoami", headers=basic_auth("alice", "wrong"))
        assert wrong.status_code == 401
        assert wrong.headers["www-authenticate"] == 'Basic realm="hpcscope"'
        right = client.get("/api/whoami", headers=basic_auth("alice"))
        assert right.status_code == 200 and right.json()["user"] == "alice"
