"""The step player's expert mode on the default cluster: the all-to-all modelled on the fabric,
hidden and exposed per GPU, both scenarios, and the parameters it refuses."""

from __future__ import annotations

import pytest

from hpcscope.analysis.simulate.collectives import Fabric
from hpcscope.analysis.simulate.parallelism import alltoall_cost
from hpcscope.model.nccl_latency import default_nccl_latencies
from hpcscope.model.topology import Topology, load_topology
from hpcscope.service.simulate.expert_player import expert_player
from hpcscope.service.simulate.inputs import (
    DEEPEP_LAYER_ALLTOALL_BYTES,
    ExpertStepRequest,
    SimulationInputError,
)
from tests.support.paths import REPO_ROOT


@pytest.fixture(scope="module")
def cluster() -> Topology:
    return load_topology(REPO_ROOT / "topologies/2x8-h100.yaml")


def test_expert_player_data(cluster: Topology) -> None:
    body = expert_player(ExpertStepRequest(jitter_cv=0.0), cluster).model_dump(mode="json")
    a2a = body["alltoall"]
    layer = alltoall_cost(
        DEEPEP_LAYER_ALLTOALL_BYTES, 16, Fabric.from_topology(cluster), default_nccl_latencies()
    ).seconds
    assert a2a["ranks"] == 16 and a2a["nodes"] == 2 and a2a["layers"] == 4
    assert a2a["seconds_per_layer"] == pytest.approx(layer)
    assert a2a["message_bytes"] == DEEPEP_LAYER_ALLTOALL_BYTES and a2a["overlapped"]
    healthy, slow = body["healthy"], body["straggler"]
    ar = body["allreduce"]["seconds"]
    # per layer the longer of GEMM and all-to-all: forward 2.5 ms GEMMs, backward 5 ms
    assert healthy["step_seconds"] == pytest.approx(
        0.002 + 4 * max(0.0025, layer) + 4 * max(0.005, layer) + ar + 0.004
    )
    exposed = 4 * (max(0.0, layer - 0.0025) + max(0.0, layer - 0.005))
    assert healthy["alltoall_exposed_seconds"] == pytest.approx(exposed)
    assert healthy["alltoall_seconds"] == pytest.approx(8 * layer)
    assert healthy["alltoall_hidden_ratio"] == pytest.approx(1 - exposed / (8 * layer))
    assert slow["step_seconds"] > healthy["step_seconds"]
    lanes = slow["lanes"]
    assert lanes[2]["slowdown_phases"] == ["backward"]
    assert all(len(lane["comm_segments"]) == 8 for lane in lanes)
    assert {lane["group"] for lane in lanes} == {0}
    assert len(body["ring"]["transfers"]) == 30 * 16


def test_inside_a_node_the_all_to_all_hides(cluster: Topology) -> None:
    request = ExpertStepRequest(jitter_cv=0.0, expert_parallel_ranks=8)
    body = expert_player(request, cluster).model_dump(mode="json")
    healthy = body["healthy"]
    assert body["alltoall"]["nodes"] == 1
    assert healthy["alltoall_exposed_seconds"] == pytest.approx(0.0, abs=1e-12)
    assert healthy["alltoall_hidden_ratio"] == pytest.approx(1.0)
    assert {lane["group"] for lane in healthy["lanes"]} == {0, 1}


def test_without_overlap_it_is_all_exposed(cluster: Topology) -> None:
    body = expert_player(
        ExpertStepRequest(jitter_cv=0.0, alltoall_overlap=False), cluster
    ).model_dump(mode="json")
    healthy = body["healthy"]
    assert healthy["alltoall_hidden_seconds"] == 0
    assert healthy["alltoall_exposed_seconds"] == pytest.approx(healthy["alltoall_seconds"])
    assert not body["alltoall"]["overlapped"]


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (ExpertStepRequest(straggler_gpu=16), "straggler_gpu"),
        (ExpertStepRequest(expert_parallel_ranks=5), "expert_parallel_ranks"),
        (ExpertStepRequest(expert_parallel_ranks=32), "expert_parallel_ranks"),
    ],
)
def test_refuses_what_the_cluster_lacks(
    cluster: Topology, request_: ExpertStepRequest, field: str
) -> None:
    with pytest.raises(SimulationInputError) as info:
        expert_player(request_, cluster)
    assert info.value.field == field
