"""The simulator wired to a topology: the scaling curve, model-level errors, the what-if curve,
the trace-report reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpcscope.model.errors import SourceError
from hpcscope.model.topology import Topology, load_topology
from hpcscope.service.simulate.inputs import (
    SimulationInputError,
    SimulationRequest,
    parse_request,
)
from hpcscope.service.simulate.measured_job import load_measured_job, parse_measured_job
from hpcscope.service.simulate.simulation import (
    report_json,
    run_simulation,
    run_what_if,
    what_if_json,
)
from tests.support.paths import FIXTURES, REPO_ROOT

HERE = FIXTURES / "simulate"


@pytest.fixture(scope="module")
def cluster() -> Topology:
    return load_topology(REPO_ROOT / "topologies/2x8-h100.yaml")


def test_defaults_give_the_reference_curve(cluster: Topology) -> None:
    request = parse_request(SimulationRequest, {"gpus": "8,64,256,1024", "steps": 3000})
    body = report_json(run_simulation(request, cluster)).model_dump(mode="json")
    results = {r["gpus"]: r for r in body["results"]}
    # defaults: CV 5 % lognormal + 20 ms hiccups at p = 1e-3, the reference's Monte Carlo,
    # plus the cluster's two-level AllReduce (6.05 ms at 8 GPUs, NVLink-bound)
    assert results[8]["allreduce_seconds"] == pytest.approx(6.05e-3, rel=0.01)
    assert results[1024]["efficiency"] < results[256]["efficiency"] < results[8]["efficiency"]
    assert results[1024]["hiccup_step_ratio"] == pytest.approx(0.64, abs=0.03)
    assert body["gpu_hour_price"] == 2.5 and body["currency"] == "USD"
    point = results[1024]
    assert point["lost_cost_per_day"] == pytest.approx(point["lost_gpu_hours_per_day"] * 2.5)
    assert point["lost_gpu_hours_per_day"] == pytest.approx(1024 * 24 * (1 - point["efficiency"]))
    assert body["fabric"]["nic_bytes_per_second"] == 50e9
    json.dumps(body)  # JSON-ready


def test_model_level_errors_name_the_field(cluster: Topology) -> None:
    zero = {"data_load_seconds": 0, "forward_seconds": 0, "backward_seconds": 0}
    with pytest.raises(SimulationInputError) as info:
        run_simulation(parse_request(SimulationRequest, {"gpus": "8", **zero}), cluster)
    assert info.value.field == "compute_seconds"
    with pytest.raises(SimulationInputError) as info:
        run_simulation(parse_request(SimulationRequest, {"gpus": "16384", "steps": 5000}),
                       cluster, max_cells=20_000_000)  # fmt: skip
    assert info.value.field == "steps"


def test_what_if_curve_of_the_straggler_job(cluster: Topology) -> None:
    job = load_measured_job(HERE / "traces_analyze_straggler.json")
    request = parse_request(SimulationRequest, {"gpus": "64,1024", "steps": 500})
    report = run_what_if(job, request, cluster, jitter_cv=0.01)
    items = {item["gpus"]: item for item in what_if_json(report).model_dump(mode="json")}
    assert sorted(items) == [8, 64, 1024]  # the measured scale is always included
    measured = items[8]
    assert measured["measured_scale"]
    assert measured["allreduce_seconds"] == pytest.approx(0.0061, rel=0.01)
    # with its straggler the job runs ~62 ms steps at any scale; fixed, ~42-45 ms
    for item in items.values():
        assert item["step_seconds"] == pytest.approx(0.0628, rel=0.05)
        assert item["fixed_step_seconds"] < item["step_seconds"]
        assert item["speedup_if_fixed"] > 1.3
    assert items[1024]["lost_gpu_hours_per_day_to_stragglers"] > 1024 * 24 * 0.25
    # the AllReduce is anchored on the measured 6.1 ms at 8 ranks, then scaled by the model
    assert report.message_bytes > 0
    assert items[1024]["allreduce_seconds"] > items[8]["allreduce_seconds"]


def test_trace_report_errors_name_file_line_and_field(tmp_path: Path) -> None:
    with pytest.raises(SourceError) as info:
        parse_measured_job('{"ranks": [0, 1],\n "steps": }', source="r.json")
    assert (info.value.source, info.value.line) == ("r.json", 2)
    assert info.value.column is not None
    with pytest.raises(SourceError) as info:
        parse_measured_job('{"ranks": [0], "steps": 3, "phases": {"x": {}}}', source="r.json")
    assert info.value.field == "phases.x"
    with pytest.raises(SourceError) as info:
        parse_measured_job('{"ranks": [], "steps": 3, "phases": {}}', source="r.json")
    assert info.value.field == "ranks"
    with pytest.raises(SourceError) as info:
        parse_measured_job(
            '{"ranks": [0], "steps": 3, "phases": {"0": {"backward": -1}}}', source="r.json"
        )
    assert info.value.field == "phases.0.backward"
    with pytest.raises(SourceError, match="cannot read"):
        load_measured_job(tmp_path / "nope.json")
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(SourceError, match="UTF-8"):
        load_measured_job(binary)


def test_trace_report_extra_fields_are_ignored() -> None:
    text = json.dumps(
        {
            "ranks": [0, 1],
            "steps": 2,
            "phases": {"0": {"backward": 0.02, "gpu_util": 0.9}, "1": {"backward": 0.02}},
            "per_step": [{"step": 0, "excess_seconds": 0.001}, "odd", {"step": 1}],
            "stragglers": [],
            "what_if": {"actual_step_seconds": 0.021, "slowdown": 1.0},
            "schema_version": 2,
        }
    )
    job = parse_measured_job(text, source="r.json")
    assert job.step_excess_seconds == (0.001,)
    assert job.actual_step_seconds == 0.021


def test_the_seeds_step_on_the_default_clusters_allreduce(cluster: Topology) -> None:
    """The 42 ms example with the AllReduce modelled on 2 x 8 H100 (two-level, 6.08 ms)."""
    request = parse_request(
        SimulationRequest,
        {"gpus": "16", "steps": 20, "straggler_gpus": "2", "jitter_cv": 0,
         "hiccup_probability": 0},
    )  # fmt: skip
    [point] = report_json(run_simulation(request, cluster)).model_dump(mode="json")["results"]
    assert point["allreduce_seconds"] == pytest.approx(6.08e-3, rel=0.005)
    assert point["step_seconds"] == pytest.approx(0.062 + 0.00008, rel=0.002)
    assert point["efficiency"] == pytest.approx(0.678, abs=0.001)
