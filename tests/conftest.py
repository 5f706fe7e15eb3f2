"""Shared fixtures: a demo service on a temporary store, logged-in HTTP clients, a browser."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import settings as hypothesis_settings

from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.service.identity.users import DEMO_LOGINS, UserDirectory
from hpcscope.service.settings import Settings

# the xdist groups of `make test` (machine-wide resources, shared module fixtures): a hook
from tests.support.xdist_groups import pytest_collection_modifyitems  # noqa: F401

pytest_plugins = ["tests.support.browser"]

# No per-example deadline: it is a timing assertion, and speed belongs in bench/ (a loaded CI
# machine made Hypothesis report correct examples as failures).
hypothesis_settings.register_profile("hpcscope", deadline=None)
hypothesis_settings.load_profile("hpcscope")

DEMO_PASSWORDS = {login.name: login.password for login in DEMO_LOGINS}

#: scrypt cost for tests, n = 2**4 instead of production's 2**14 (~40 ms a hash, paid per demo
#: user and per login); tests/service/identity/test_users.py checks the production default.
TEST_PASSWORD_HASH_COST_LOG2 = 4


def basic_auth(user: str, password: str | None = None) -> dict[str, str]:
    """An Authorization header for a demo user."""
    secret = password if password is not None else DEMO_PASSWORDS[user]
    token = base64.b64encode(f"{user}:{secret}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def demo_users() -> UserDirectory:
    """The demo users, hashed at the tests' low cost."""
    return UserDirectory.demo(hash_cost_log2=TEST_PASSWORD_HASH_COST_LOG2)


def open_service(directory: Path) -> Service:
    """A service on the bundled 2x8 topology, demo users, an empty store in ``directory``."""
    settings = Settings(
        store_path=directory / "store.duckdb",
        secret_key="test-secret",
        password_hash_cost_log2=TEST_PASSWORD_HASH_COST_LOG2,
    )
    return Service.open(settings, users=demo_users())


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    """A service on the bundled 2x8 topology, demo users, an empty store in tmp_path."""
    opened = open_service(tmp_path)
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def module_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """:func:`service` shared by a module's tests that only read it (a matrix of requests):
    one store and one set of users instead of one per parameter."""
    opened = open_service(tmp_path_factory.mktemp("module-service"))
    yield opened
    opened.close()


@pytest.fixture
def client(service: Service) -> Iterator[TestClient]:
    """An anonymous in-process client of the web app."""
    with TestClient(create_app(service)) as test_client:
        yield test_client


@pytest.fixture
def client_as(service: Service) -> Iterator[Callable[[str], TestClient]]:
    """``client_as("alice")``: an in-process client that sends alice's credentials."""
    clients: list[TestClient] = []

    def make(user: str) -> TestClient:
        test_client = TestClient(create_app(service), headers=basic_auth(user))
        test_client.__enter__()
        clients.append(test_client)
        return test_client

    yield make
    for test_client in clients:
        test_client.__exit__(None, None, None)
