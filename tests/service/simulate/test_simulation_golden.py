"""Pure data-parallel inputs give the simulator's outputs of before the expert and pipeline
terms, to the last bit, and the new terms are 0 for them.

The golden file was written by the simulator as it was before those terms (commit f23b41e),
with this module's own :func:`documents`::

    git archive f23b41e src | tar -x -C /tmp/base
    PYTHONPATH=/tmp/base/src:$PWD python -c "import json; \\
      from tests.service.simulate.test_simulation_golden import documents, GOLDEN; \\
      GOLDEN.write_text(json.dumps(documents(), indent=1, sort_keys=True) + '\\n')"
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from hpcscope.model.topology import load_topology
from hpcscope.service.simulate.inputs import SimulationRequest, parse_request
from hpcscope.service.simulate.measured_job import load_measured_job
from hpcscope.service.simulate.simulation import (
    curve_json,
    run_simulation,
    run_what_if,
    what_if_json,
)
from tests.support.paths import FIXTURES, REPO_ROOT

GOLDEN = FIXTURES / "simulate" / "golden-data-parallel.json"

#: Data-parallel requests: defaults, a straggler without noise, a ring over 25 MiB buckets.
REQUESTS: dict[str, dict[str, Any]] = {
    "defaults": {"gpus": "8,64,1024", "steps": 300},
    "straggler": {
        "gpus": "8,16",
        "steps": 50,
        "straggler_gpus": "2",
        "straggler_factor": 2.0,
        "jitter_cv": 0.0,
        "hiccup_probability": 0.0,
    },
    "ring-buckets": {
        "gpus": "8,512",
        "steps": 200,
        "model_parameters": 7e9,
        "allreduce_algorithm": "ring",
        "bucket_bytes": 25 * 2**20,
        "gc_interval_steps": 50,
        "gc_pause_seconds": 0.1,
    },
}


def documents() -> dict[str, Any]:
    """Every golden document: the ``simulate --json`` curves and one what-if curve."""
    cluster = load_topology(REPO_ROOT / "topologies/2x8-h100.yaml")
    out: dict[str, Any] = {}
    for name, values in REQUESTS.items():
        request = parse_request(SimulationRequest, values)
        out[name] = curve_json(run_simulation(request, cluster)).model_dump(mode="json")
    job = load_measured_job(FIXTURES / "simulate" / "traces_analyze_straggler.json")
    request = parse_request(SimulationRequest, {"gpus": "8,64", "steps": 200})
    report = run_what_if(job, request, cluster, jitter_cv=None)
    out["what-if"] = what_if_json(report).model_dump(mode="json")
    return out


NEW_KEYS = {
    "expert_parallel_ranks": 1,
    "alltoall_seconds": 0.0,
    "alltoall_hidden_seconds": 0.0,
    "alltoall_exposed_seconds": 0.0,
    "pipeline_bubble_seconds": 0.0,
    "pipeline_bubble_ratio": 0.0,
}


@pytest.fixture(scope="module")
def now() -> dict[str, Any]:
    return documents()


@pytest.mark.parametrize("name", [*REQUESTS, "what-if"])
def test_data_parallel_outputs_are_unchanged(now: dict[str, Any], name: str) -> None:
    golden = json.loads(GOLDEN.read_text())[name]
    assert len(now[name]) == len(golden)
    for point, before in zip(now[name], golden, strict=True):
        assert {key: point[key] for key in before} == before  # exact, every value
        assert set(point) - set(before) == set(NEW_KEYS)
        assert {key: point[key] for key in NEW_KEYS} == NEW_KEYS
