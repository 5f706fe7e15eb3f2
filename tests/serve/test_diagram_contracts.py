"""The diagram's JSON endpoints emit what their contracts describe (field for field)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import TypeAdapter

from hpcscope.model.timeutil import utcnow
from hpcscope.serve.diagram.contracts import DiagramPage, DiagramState
from hpcscope.service.core import Service
from hpcscope.service.diagram.cards import ElementCard
from tests.support.data import populate

ELEMENTS = ["node-gpu01", "gpu-gpu01-0", "scheduler", "software", "nvswitch-gpu01", "weights"]


@pytest.fixture
def admin(service: Service, client_as: Callable[[str], TestClient]) -> TestClient:
    populate(service.store, now=utcnow())
    return client_as("admin")


def _round_trip(adapter: TypeAdapter[Any], body: bytes) -> Any:
    return adapter.dump_python(adapter.validate_json(body), mode="json", by_alias=True)


def test_state_is_a_diagram_state(admin: TestClient) -> None:
    body = admin.get("/api/diagram/state").content
    state = DiagramState.model_validate_json(body)
    assert state.model_dump(mode="json", exclude_unset=True) == json.loads(body)


def test_page_is_a_diagram_page(admin: TestClient) -> None:
    body = admin.get("/api/diagram").content
    assert _round_trip(TypeAdapter(DiagramPage), body) == json.loads(body)


@pytest.mark.parametrize("element_id", ELEMENTS)
def test_every_card_is_an_element_card(admin: TestClient, element_id: str) -> None:
    response = admin.get(f"/api/diagram/elements/{element_id}")
    assert response.status_code == 200
    # an unknown key would be dropped by the round trip, a missing one added: both differ
    assert _round_trip(TypeAdapter(ElementCard), response.content) == response.json()


def test_a_renamed_field_breaks_the_state_contract() -> None:
    good = {"generated_at": "2026-01-01T00:00:00Z", "summary": "", "elements": {}}
    DiagramState.model_validate(good)
    with pytest.raises(ValueError, match="summary"):
        DiagramState.model_validate({**good, "summary_text": good.pop("summary")})
