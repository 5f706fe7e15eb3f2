"""The step player's data: one step of the default cluster, healthy and with a straggler."""

from __future__ import annotations

import pytest

from hpcscope.model.topology import Topology, load_topology
from hpcscope.service.simulate.inputs import SimulationInputError, StepRequest
from hpcscope.service.simulate.step_player import step_player
from tests.support.paths import REPO_ROOT


@pytest.fixture(scope="module")
def cluster() -> Topology:
    return load_topology(REPO_ROOT / "topologies/2x8-h100.yaml")


def test_step_player_data(cluster: Topology) -> None:
    body = step_player(StepRequest(jitter_cv=0.0), cluster).model_dump(mode="json")
    assert body["cluster"]["gpus"] == 16 and body["cluster"]["labels"][10] == "gpu02 · GPU 2"
    healthy, slow = body["healthy"], body["straggler"]
    ar = body["allreduce"]["seconds"]
    assert body["allreduce"]["algorithm"] == "ring" and body["allreduce"]["ring_steps"] == 30
    assert healthy["step_seconds"] == pytest.approx(0.036 + ar)  # ~42.6 ms
    assert slow["step_seconds"] == pytest.approx(0.056 + ar)  # ~62.6 ms
    assert slow["efficiency"] == pytest.approx((0.036 + ar) / (0.056 + ar))
    assert [lane["slowdown_phases"] for lane in slow["lanes"]][2] == ["backward"]
    assert sum(1 for hop in body["ring"]["hops"] if hop["link"] == "network") == 2
    assert len(body["ring"]["transfers"]) == 30 * 16


def test_step_player_rejects_a_gpu_the_cluster_lacks(cluster: Topology) -> None:
    with pytest.raises(SimulationInputError) as info:
        step_player(StepRequest(straggler_gpu=16), cluster)
    assert info.value.field == "straggler_gpu"
