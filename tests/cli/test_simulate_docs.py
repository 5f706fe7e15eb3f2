"""docs/simulate.md documents every option, request field and JSON key of the simulator."""

from __future__ import annotations

from hpcscope.cli.simulate_cmd import OPTION_OF
from hpcscope.service.simulate.inputs import SimulationRequest, StepRequest
from tests.cli.test_simulate_cmd import WHAT_IF_KEYS
from tests.support.paths import REPO_ROOT

DOC = (REPO_ROOT / "docs/simulate.md").read_text()


def test_every_json_key_is_documented() -> None:
    missing = sorted(key for key in WHAT_IF_KEYS if key not in DOC)
    assert not missing, f"docs/simulate.md lacks: {missing}"


def test_every_request_field_and_option_is_documented() -> None:
    fields = set(SimulationRequest.model_fields) | set(StepRequest.model_fields)
    missing = sorted(field for field in fields if field not in DOC)
    assert not missing, f"docs/simulate.md lacks request fields: {missing}"
    options = {option for value in OPTION_OF.values() for option in value.split("/")}
    missing = sorted(option for option in options if option not in DOC)
    assert not missing, f"docs/simulate.md lacks options: {missing}"
