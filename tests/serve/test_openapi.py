"""``/api/openapi.json`` lists the schema of every emitted document (issue 11, part 3)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from hpcscope.serve import schemas

#: Contracts served by a route (the others are emitted by the CLI only).
SERVED = sorted(name for name in schemas.CONTRACTS if name not in schemas.CLI_ONLY)


@pytest.mark.parametrize("name", SERVED)
def test_openapi_lists_every_served_contract(client: TestClient, name: str) -> None:
    components = client.get("/api/openapi.json").json()["components"]["schemas"]
    contract = schemas.CONTRACTS[name]
    assert contract.__name__ in components, f"{contract.__name__} is not a response model"
    served = components[contract.__name__]
    committed = schemas.schema_of(contract)
    assert sorted(served["properties"]) == sorted(committed["properties"])
    assert served.get("required") == committed.get("required")
