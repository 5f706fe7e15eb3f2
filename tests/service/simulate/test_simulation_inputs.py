"""Simulator requests: every bad parameter names its field."""

from __future__ import annotations

import pytest

from hpcscope.service.simulate.inputs import (
    SimulationInputError,
    SimulationRequest,
    parse_request,
)


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"gpus": "0"}, "gpus"),
        ({"gpus": "8,abc"}, "gpus.1"),
        ({"gpus": "20000"}, "gpus"),
        ({"hiccup_probability": 1.2}, "hiccup_probability"),
        ({"backward_seconds": -0.02}, "backward_seconds"),
        ({"model_parameters": -1}, "model_parameters"),
        ({"model_parameters": 0}, "model_parameters"),
        ({"straggler_gpus": "-1"}, "straggler_gpus"),
        ({"straggler_factor": 0.5}, "straggler_factor"),
        ({"bucket_bytes": -5}, "bucket_bytes"),
        ({"gpu_hour_price": -1}, "gpu_hour_price"),
        ({"allreduce_algorithm": "tree"}, "allreduce_algorithm"),
        ({"steps": 0}, "steps"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_bad_requests_name_the_field(values: dict[str, object], field: str) -> None:
    with pytest.raises(SimulationInputError) as info:
        parse_request(SimulationRequest, values)
    assert info.value.field == field
    assert info.value.message
