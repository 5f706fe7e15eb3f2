"""``/api/openapi.json`` lists the schema of every emitted document (issue 11, part 3)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from hpcscope.serve import schemas
from hpcscope.serve.app import create_app
from hpcscope.service.core import Service

#: Contracts served by a route (the others are emitted by the CLI only).
SERVED = sorted(name for name in schemas.CONTRACTS if name not in schemas.CLI_ONLY)


@pytest.fixture(scope="module")
def components(module_service: Service) -> dict[str, Any]:
    """The schemas of the served ``/api/openapi.json``, fetched once for the module (the app
    builds the document in ~0.6 s)."""
    with TestClient(create_app(module_service)) as client:
        response = client.get("/api/openapi.json")
    assert response.status_code == 200
    schemas_served: dict[str, Any] = response.json()["components"]["schemas"]
    return schemas_served


@pytest.mark.parametrize("name", SERVED)
def test_openapi_lists_every_served_contract(components: dict[str, Any], name: str) -> None:
    contract = schemas.CONTRACTS[name]
    assert contract.__name__ in components, f"{contract.__name__} is not a response model"
    served = components[contract.__name__]
    committed = schemas.schema_of(contract)
    assert sorted(served["properties"]) == sorted(committed["properties"])
    assert served.get("required") == committed.get("required")
