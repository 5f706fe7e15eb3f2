"""Gradient integrity on real DDP: 4 gloo CPU ranks, a small MLP, the hook on every rank.

One launch trains every scenario (benign runs with different seeds, learning rates and data
orders; one rank scaling x10, flipping signs, adding noise, lying about its sketch, perturbing
its replica). The spools are read by the collector's reader into a real store holding the
platform's allocations; the alerts must name the job, rank, node, GPU and step, and show on
the job page, in its JSON twin and in ``hpcscope job --json``, to the job's owner only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from hpcscope.model.alerts import Severity
from hpcscope.model.schemas import JOB_ALLOCATION_SCHEMA, JOB_SCHEMA
from hpcscope.service.core import Service
from hpcscope.service.integrity.spool import IntegritySpool
from hpcscope.store import slurm as slurm_store
from tests.support.integrity_ranks import Attack, Run, Scenario, generate
from tests.support.integrity_scoring import findings, score

pytestmark = pytest.mark.torch

WORLD = 4
STEPS = 12
SCENARIOS = [
    Scenario("benign-a", seed=0, lr=0.01, data_seed=0, steps=STEPS),
    Scenario("benign-b", seed=1, lr=0.02, data_seed=7, steps=STEPS),
    Scenario("scale", seed=2, data_seed=3, steps=STEPS, attack=Attack("scale", 1)),
    Scenario("signflip", seed=3, data_seed=4, steps=STEPS, attack=Attack("signflip", 2)),
    Scenario("noise", seed=4, data_seed=5, steps=STEPS, attack=Attack("noise", 3, factor=3.0)),
    Scenario("liar", seed=5, data_seed=6, steps=STEPS, attack=Attack("liar", 0)),
    Scenario(
        "replica", seed=6, data_seed=8, steps=STEPS, checksum_every=5,
        attack=Attack("replica", 1, start_step=4, factor=1e-3),
    ),
]  # fmt: skip
OWNERS = dict.fromkeys(("scale", "liar", "replica"), ("bob", "nlp"))


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return generate(SCENARIOS, tmp_path_factory.mktemp("ranks"), world_size=WORLD)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_each_attack_is_caught_and_benign_runs_stay_quiet(ranks: Run, scenario: Scenario) -> None:
    from tests.support.integrity_scoring import site_rules

    found, steps = findings(ranks.job_dir(scenario.name), site_rules())
    assert steps == STEPS
    result = score(scenario, found, steps, WORLD)
    attack = scenario.attack
    if attack is None:
        assert found == [], [f.summary for f in found]
    elif attack.kind == "liar":
        assert result.first_detection == 0  # GI-3 at the first lie
        assert {f.rule_id for f in found} == {"GI-3"}
    elif attack.kind == "replica":
        gi4 = [f for f in found if f.rule_id == "GI-4"]
        assert gi4 and {f.rank for f in gi4} == {attack.rank}
        assert min(f.step for f in gi4) == 5  # the first checksum after the perturbation
    else:
        assert result.detected_steps == result.attacked_steps  # every step after 3 attacked
        assert {f.rank for f in found} == {attack.rank}


def _allocate(service: Service) -> None:
    """Jobs and allocations as the prolog's mapping would record them: each scenario's job on
    its two nodes ``<name>-n0``, ``<name>-n1`` (GPUs 0, 1); benign-b's GPUs are mapped to
    another job than the one its processes claim."""
    start = datetime.now(UTC).replace(tzinfo=None) - timedelta(hours=1)
    jobs, allocations = [], []
    for scenario in SCENARIOS:
        user, account = OWNERS.get(scenario.name, ("alice", "vision"))
        job = "platform-b" if scenario.name == "benign-b" else scenario.name
        jobs.append({"job_id": job, "user": user, "account": account, "source": "test"})
        for node in (f"{scenario.name}-n0", f"{scenario.name}-n1"):
            for gpu in (0, 1):
                allocations.append(
                    {"job_id": job, "node": node, "gpu": gpu, "gpu_instance_id": None,
                     "start_time": start, "end_time": None}
                )  # fmt: skip
    service.store.upsert_jobs(pa.Table.from_pylist(jobs, schema=JOB_SCHEMA)).result()
    table = pa.Table.from_pylist(allocations, schema=JOB_ALLOCATION_SCHEMA)
    slurm_store.merge_allocations(service.store, table).result()


def test_alerts_are_attributed_and_shown_to_the_owner_only(
    ranks: Run,
    service: Service,
    client_as: Callable[[str], TestClient],
) -> None:
    _allocate(service)
    spool = IntegritySpool(service.store, ranks.spool(), service.rules)
    cycle = spool.collect_once()
    assert cycle.errors == []
    assert cycle.steps_evaluated == STEPS * len(SCENARIOS)
    again = spool.collect_once()  # nothing new: nothing re-read, nothing re-raised
    assert (again.records, again.alerts) == (0, 0)

    bob = service.principal("bob")
    alice = service.principal("alice")
    assert bob is not None and alice is not None
    alerts = service.job_alerts(bob, "scale")
    assert alerts is not None
    [gi1] = [a for a in alerts if a.rule_id == "GI-1"]
    assert (gi1.job_id, gi1.subject, gi1.node, gi1.gpu, gi1.severity) == (
        "scale", "rank 1", "scale-n0", 1, Severity.HIGH,
    )  # fmt: skip
    assert (gi1.user, gi1.account) == ("bob", "nlp")
    assert gi1.step == STEPS - 1 and gi1.count == STEPS - 5  # steps 5..11 (3 of 10 from 5)
    assert any(e.position and "rank-1.jsonl" in e.source for e in gi1.evidence)
    [gi3] = [a for a in service.job_alerts(bob, "liar") or [] if a.rule_id == "GI-3"]
    assert gi3.severity is Severity.CRITICAL and gi3.subject == "rank 0 (suspected)"
    assert {a.rule_id for a in service.job_alerts(bob, "replica") or []} == {"GI-4"}
    # benign-b's processes claim job benign-b, the platform maps their GPUs to platform-b
    attr = service.job_alerts(alice, "platform-b") or []
    assert {a.rule_id for a in attr} == {"GI-ATTR"} and len(attr) == WORLD
    assert service.job_alerts(alice, "scale") is None  # not alice's job

    page = client_as("bob").get("/jobs/scale")
    assert page.status_code == 200
    assert "GI-1" in page.text and "rank 1" in page.text and "scale-n0" in page.text
    body = client_as("bob").get("/api/jobs/scale").json()
    assert [a["rule_id"] for a in body["alerts"]] == ["GI-1"]
    assert body["alerts"][0]["step"] == STEPS - 1
    assert client_as("bob").get("/api/jobs/scale/alerts").json()["alerts"] == body["alerts"]
    assert client_as("alice").get("/api/jobs/scale/alerts").status_code == 404
    assert "GI-1" not in client_as("alice").get("/jobs/scale").text
    json.dumps(body)  # the JSON twin is plain JSON
