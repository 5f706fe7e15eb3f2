"""The simulator's expert all-to-all and pipeline bubble on the default cluster: the terms are
the formulas' values, they land on the critical path, and a bad value names its field."""

from __future__ import annotations

from typing import Any

import pytest

from hpcscope.analysis.simulate.collectives import Fabric
from hpcscope.analysis.simulate.parallelism import alltoall_cost
from hpcscope.model.nccl_latency import default_nccl_latencies
from hpcscope.model.topology import Topology, load_topology
from hpcscope.service.simulate.inputs import (
    DEEPEP_LAYER_ALLTOALL_BYTES,
    SimulationInputError,
    SimulationRequest,
    parse_request,
)
from hpcscope.service.simulate.simulation import curve_json, run_simulation
from tests.support.paths import REPO_ROOT

QUIET = {"jitter_cv": 0.0, "hiccup_probability": 0.0, "steps": 20}


@pytest.fixture(scope="module")
def cluster() -> Topology:
    return load_topology(REPO_ROOT / "topologies/2x8-h100.yaml")


def curve(cluster: Topology, **values: Any) -> dict[int, dict[str, Any]]:
    request = parse_request(SimulationRequest, {**QUIET, **values})
    points = curve_json(run_simulation(request, cluster)).model_dump(mode="json")
    return {p["gpus"]: p for p in points}


def test_the_pipeline_bubble_is_on_the_critical_path(cluster: Topology) -> None:
    base = curve(cluster, gpus="8,64")
    piped = curve(cluster, gpus="8,64", pipeline_stages=4, microbatches=8)
    for n in (8, 64):
        bubble = 3 / 8 * 0.030  # (p-1)/m of forward + backward (10 + 20 ms)
        assert piped[n]["pipeline_bubble_seconds"] == pytest.approx(bubble)
        assert piped[n]["pipeline_bubble_ratio"] == pytest.approx(3 / 11)
        assert piped[n]["step_seconds"] == pytest.approx(base[n]["step_seconds"] + bubble)
        assert piped[n]["ideal_step_seconds"] == pytest.approx(
            base[n]["ideal_step_seconds"] + bubble
        )
        assert piped[n]["efficiency"] == pytest.approx(1.0)  # no variability: nothing lost
        assert piped[n]["scaling_efficiency"] < base[n]["scaling_efficiency"]
    many = curve(cluster, gpus="8", pipeline_stages=4, microbatches=512)
    assert many[8]["pipeline_bubble_seconds"] < piped[8]["pipeline_bubble_seconds"] / 50


def test_the_expert_all_to_all_hides_inside_a_node_and_not_across_nodes(
    cluster: Topology,
) -> None:
    fabric = Fabric.from_topology(cluster)
    latencies = default_nccl_latencies()
    moe = {"alltoall_bytes": DEEPEP_LAYER_ALLTOALL_BYTES, "moe_layers": 4}
    base = curve(cluster, gpus="8,16")
    inside = curve(cluster, gpus="8,16", expert_parallel_ranks=8, **moe)
    across = curve(cluster, gpus="16", expert_parallel_ranks=16, **moe)
    layer8 = alltoall_cost(DEEPEP_LAYER_ALLTOALL_BYTES, 8, fabric, latencies).seconds
    layer16 = alltoall_cost(DEEPEP_LAYER_ALLTOALL_BYTES, 16, fabric, latencies).seconds
    # NVLink: 1.7 ms per layer, under the 2.5 ms forward and 5 ms backward GEMMs of a layer
    assert layer8 < 0.0025 < 0.005 < layer16
    point = inside[16]
    assert point["expert_parallel_ranks"] == 8
    assert point["alltoall_seconds"] == pytest.approx(8 * layer8)
    assert point["alltoall_hidden_seconds"] == pytest.approx(8 * layer8)
    assert point["alltoall_exposed_seconds"] == 0
    assert point["step_seconds"] == pytest.approx(base[16]["step_seconds"])
    # InfiniBand: half the buffer leaves the node at 50 GB/s
    point = across[16]
    exposed = 4 * ((layer16 - 0.0025) + (layer16 - 0.005))
    assert point["alltoall_exposed_seconds"] == pytest.approx(exposed)
    assert point["step_seconds"] == pytest.approx(base[16]["step_seconds"] + exposed)
    off = curve(cluster, gpus="16", expert_parallel_ranks=16, alltoall_overlap=False, **moe)
    assert off[16]["alltoall_exposed_seconds"] == pytest.approx(8 * layer16)
    assert off[16]["alltoall_hidden_seconds"] == 0


def test_the_expert_group_never_exceeds_the_gpu_count(cluster: Topology) -> None:
    points = curve(cluster, gpus="8,64", expert_parallel_ranks=32, alltoall_bytes=1e8)
    assert [points[n]["expert_parallel_ranks"] for n in (8, 64)] == [8, 32]


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"pipeline_stages": 0}, "pipeline_stages"),
        ({"microbatches": 0}, "microbatches"),
        ({"virtual_stages": 0}, "virtual_stages"),
        ({"alltoall_bytes": -1}, "alltoall_bytes"),
        ({"expert_parallel_ranks": 0}, "expert_parallel_ranks"),
        ({"moe_layers": 0}, "moe_layers"),
    ],
)
def test_bad_values_name_their_field(values: dict[str, Any], field: str) -> None:
    with pytest.raises(SimulationInputError) as info:
        parse_request(SimulationRequest, values)
    assert info.value.field == field
