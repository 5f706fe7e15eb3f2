"""Live state, cards and cost of the diagram, per viewer, over a real store."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pyarrow as pa
import pytest

from hpcscope.model.alerts import Alert, Severity, Vector
from hpcscope.model.schemas import SCRAPE_SCHEMA
from hpcscope.service.core import Service
from hpcscope.service.diagram.cards import (
    GpuCardLive,
    NodeCardLive,
    PortCardLive,
    SchedulerCardLive,
    SourcesCardLive,
    UnknownElement,
    VectorCardLive,
    element_card,
)
from hpcscope.service.diagram.collectors import CollectorStatus
from hpcscope.service.diagram.cost import decision_view
from hpcscope.service.diagram.live import GpuState, Viewer, diagram_viewer, live_state
from hpcscope.service.settings import Settings
from hpcscope.service.source_settings import (
    CaptureSection,
    FalcoSection,
    SlurmSection,
    TetragonSection,
)
from hpcscope.store.alerts import upsert_alerts
from tests.support.fleet import NOW, SAMPLES, STEP, write_fleet


def viewer(service: Service, name: str | None) -> Viewer:
    principal = service.principal(name) if name is not None else None
    return Viewer(principal)


@pytest.fixture
def fleet(service: Service) -> Service:
    write_fleet(service.store)
    return service


def test_anonymous_viewing_is_a_site_setting(service: Service) -> None:
    assert diagram_viewer(Settings(), None) is None
    anonymous = diagram_viewer(Settings(anonymous_diagram=True), None)
    assert anonymous is not None and anonymous.anonymous
    assert not anonymous.scope().all_jobs and not anonymous.scope().users
    alice = diagram_viewer(Settings(), service.principal("alice"))
    assert alice is not None and alice.name == "alice"


def test_gpu_states_per_viewer(fleet: Service) -> None:
    admin = live_state(fleet, viewer(fleet, "admin"), now=NOW)
    assert admin.gpus["gpu-gpu02-2"].state is GpuState.ACTIVE
    assert admin.gpus["gpu-gpu02-2"].sm_active_ratio == pytest.approx(0.92)
    assert admin.gpus["gpu-gpu01-7"].state is GpuState.IDLE
    alice = live_state(fleet, viewer(fleet, "alice"), now=NOW)
    assert alice.gpus["gpu-gpu01-0"].job_ids == ("4410001",)
    hidden = alice.gpus["gpu-gpu02-2"]
    assert hidden.state is GpuState.ALLOCATED and hidden.job_ids == () and not hidden.has_values
    # live verdicts come from the analysis of the job report, for visible jobs only
    assert admin.gpus["gpu-gpu02-2"].verdict == "straggler"
    assert admin.gpus["gpu-gpu02-0"].verdict == "waiting_at_barrier"
    assert admin.gpus["gpu-gpu01-0"].verdict == "busy_not_computing"
    assert admin.gpus["gpu-gpu01-4"].verdict == "idle"
    assert alice.gpus["gpu-gpu01-0"].verdict == "busy_not_computing"
    assert alice.gpus["gpu-gpu02-2"].verdict is None
    assert admin.gpus["gpu-gpu01-7"].has_values and not alice.gpus["gpu-gpu01-7"].has_values
    node = alice.nodes["node-gpu01"]
    assert (node.active, node.allocated_hidden, node.idle) == (4, 2, 2)
    assert node.sm_active_ratio == pytest.approx(0.19) and node.job_ids == ("4410001",)
    anonymous = live_state(fleet, Viewer(None), now=NOW)
    assert {g.state for g in anonymous.gpus.values()} == {GpuState.ALLOCATED, GpuState.IDLE}
    assert not any(g.has_values for g in anonymous.gpus.values())
    # the aggregate is the same for everyone (to the last bits a parallel sum may reorder)
    for name, value in dataclasses.asdict(admin.cluster).items():
        theirs = getattr(anonymous.cluster, name)
        assert theirs == (pytest.approx(value) if isinstance(value, float) else value), name
    assert anonymous.cluster.gpus_allocated == 14


def test_silent_gpus_are_stale_not_idle(fleet: Service) -> None:
    later = NOW + timedelta(minutes=30)
    state = live_state(fleet, viewer(fleet, "admin"), now=later)
    idle = state.gpus["gpu-gpu01-7"]
    assert idle.state is GpuState.STALE and idle.age_seconds == pytest.approx(1800)
    held = state.gpus["gpu-gpu01-0"]
    assert held.state is GpuState.STALE and not held.has_values
    assert held.job_ids == ("4410001",)  # the allocation is still known
    assert state.cluster.gpus_reporting == 0


def test_gpus_never_seen_have_no_data(service: Service) -> None:
    state = live_state(service, viewer(service, "admin"), now=NOW)
    assert {g.state for g in state.gpus.values()} == {GpuState.NODATA}
    assert state.cluster.gpus_reporting == 0


def test_collector_health_from_our_own_scrapes(fleet: Service) -> None:
    health = {h.id: h for h in live_state(fleet, Viewer(None), now=NOW).collectors}
    dcgm = health["dcgm-exporter"]
    assert dcgm.status is CollectorStatus.OK
    assert dcgm.targets == 2 and dcgm.failures_in_window == 1 and dcgm.staleness_seconds == 0
    assert health["ib-counters"].status is CollectorStatus.NOT_CONFIGURED
    assert health["lustre-metrics"].status is CollectorStatus.NOT_CONFIGURED
    assert health["slurm-exporter"].status is CollectorStatus.NOT_CONFIGURED
    # the scheduler read through slurmrestd: configured, and said to be so, without a health
    fleet.settings.slurm = SlurmSection(url="http://127.0.0.1:6820")
    slurm = {h.id: h for h in live_state(fleet, Viewer(None), now=NOW).collectors}["slurm-exporter"]
    assert slurm.status is CollectorStatus.CONFIGURED
    assert slurm.note is not None and "slurmrestd (http://127.0.0.1:6820)" in slurm.note
    # three scrape intervals without a good scrape: stale
    late = live_state(fleet, Viewer(None), now=NOW + timedelta(seconds=50))
    assert {h.id: h for h in late.collectors}["dcgm-exporter"].status is CollectorStatus.STALE
    failed: dict[str, list[object]] = {field.name: [None] for field in SCRAPE_SCHEMA}
    failed.update(
        ts=[NOW + STEP],
        target=["127.0.0.1:9401"],
        exporter=["dcgm-exporter"],
        node=["gpu01"],
        ok=[False],
        duration_seconds=[5.0],
        samples=[0],
        rejected_lines=[0],
        error=["HTTP 500"],
    )
    fleet.store.append("scrapes", pa.table(failed, schema=SCRAPE_SCHEMA)).result()
    now = NOW + STEP
    dcgm = {h.id: h for h in live_state(fleet, Viewer(None), now=now).collectors}["dcgm-exporter"]
    assert dcgm.status is CollectorStatus.FAILING and dcgm.last_error == "HTTP 500"


def test_gpu_card_shows_real_beside_reported_now_and_over_the_job(fleet: Service) -> None:
    card = element_card(fleet, viewer(fleet, "bob"), "gpu-gpu02-2", now=NOW)
    assert card.card is not None and card.kind == "gpu"
    assert isinstance(card.live, GpuCardLive)
    assert card.live.gpu.sm_active_ratio == pytest.approx(0.92)
    assert card.live.gpu.reported_util_ratio == pytest.approx(0.99)
    assert [j.user for j in card.live.jobs] == ["bob"]
    assert card.live.gpu.verdict == "straggler"
    (over,) = card.live.over_job
    bob = fleet.principal("bob")
    assert bob is not None
    report = fleet.job_report(bob, "4410002", now=NOW)
    assert report is not None and over.gpu is not None
    # the card shows the job report's numbers, not numbers of its own
    assert over.gpu == next(g for g in report.gpus if (g.node, g.gpu) == ("gpu02", 2))
    assert over.gpu.verdict == "straggler" and over.job_verdict == report.verdict == "straggler"
    assert over.job_sm_active_ratio == report.sm_active_ratio
    assert over.job_sm_active_ratio == pytest.approx((7 * 0.55 + 0.92) / 8)
    assert over.gpus_observed == 8 and over.explanation == report.explanation
    assert card.live.paired_hca == "hca-gpu02-mlx5_2"
    assert [v.number for v in card.vectors] == [1, 5, 6]
    assert {h.id for h in card.collectors} == {"dcgm-exporter"}
    # the same GPU for alice: allocated, nothing else
    other = element_card(fleet, viewer(fleet, "alice"), "gpu-gpu02-2", now=NOW)
    assert isinstance(other.live, GpuCardLive)
    assert other.live.gpu.state is GpuState.ALLOCATED
    assert other.live.jobs == () and other.live.over_job == ()


def test_node_scheduler_and_uncollected_sources(fleet: Service) -> None:
    alice = viewer(fleet, "alice")
    node = element_card(fleet, alice, "node-gpu01", now=NOW)
    assert isinstance(node.live, NodeCardLive)
    assert [j.job_id for j in node.live.jobs] == ["4410001"]
    assert {n.collector_id for n in node.live.not_collected} == {
        "node-exporter",
        "falco",
        "tetragon",
    }
    scheduler = element_card(fleet, alice, "scheduler", now=NOW)
    assert isinstance(scheduler.live, SchedulerCardLive)
    assert (scheduler.live.pending, scheduler.live.running) == (2, 3)
    assert scheduler.live.oldest_pending_wait_seconds == pytest.approx(360)
    assert [j.job_id for j in scheduler.live.jobs] == ["4410001", "4410004"]
    hca = element_card(fleet, alice, "hca-gpu01-mlx5_3", now=NOW)
    assert isinstance(hca.live, PortCardLive) and hca.live.paired_gpu == "gpu-gpu01-3"
    (missing,) = hca.live.not_collected
    assert "ibstat, perfquery" in missing.message and "not configured" in missing.message
    for element_id, collector in (
        ("storage", "lustre-metrics"),
        ("weights", "ebpf-checkpoints"),
        ("software", "pytorch-profiler"),
    ):
        card = element_card(fleet, alice, element_id, now=NOW)
        assert isinstance(card.live, SourcesCardLive)
        assert collector in {n.collector_id for n in card.live.not_collected}
    with pytest.raises(UnknownElement):
        element_card(fleet, alice, "gpu-gpu09-0", now=NOW)


def test_the_storage_card_says_job_stats_are_stored_once_collected(fleet: Service) -> None:
    alice = viewer(fleet, "alice")
    read: dict[str, list[object]] = {field.name: [None] for field in SCRAPE_SCHEMA}
    read.update(
        ts=[NOW],
        target=["/var/spool/hpcscope/oss1.job_stats"],
        exporter=["lustre"],
        node=["oss1"],
        ok=[True],
        duration_seconds=[0.01],
        samples=[12],
        rejected_lines=[0],
    )
    fleet.store.append("scrapes", pa.table(read, schema=SCRAPE_SCHEMA)).result()
    card = element_card(fleet, alice, "storage", now=NOW)
    assert isinstance(card.live, SourcesCardLive)
    assert card.live.not_collected == ()  # never "does not store these values yet"
    assert (
        "Lustre job_stats",
        "stored per job (lustre_job_stats); evidence in trace analyses",
    ) in (card.live.facts)


def test_vector_cards_say_when_detections_are_not_configured(fleet: Service) -> None:
    fleet.store.submit_write(lambda con: con.execute("DROP TABLE alerts")).result()
    card = element_card(fleet, viewer(fleet, "alice"), "vector-rdma-blind-spot", now=NOW)
    assert isinstance(card.live, VectorCardLive)
    assert card.live.vector.number == 3 and not card.live.alerts.configured
    assert card.live.open_alerts is None


def test_vector_cards_count_open_alerts_of_the_real_table(fleet: Service) -> None:
    # no source raises alerts yet: the table alone does not make detections "configured"
    card = element_card(fleet, viewer(fleet, "alice"), "vector-rdma-blind-spot", now=NOW)
    assert isinstance(card.live, VectorCardLive) and not card.live.alerts.configured
    fleet.settings = fleet.settings.model_copy(update={"falco": FalcoSection(ingest_token="t")})
    card = element_card(fleet, viewer(fleet, "alice"), "vector-rdma-blind-spot", now=NOW)
    assert isinstance(card.live, VectorCardLive) and card.live.alerts.configured
    assert card.live.open_alerts == 0
    found = [
        Alert("RD-4", Vector.RDMA, Severity.HIGH, "t", NOW, NOW, node="gpu02", job_id="4410001"),
        Alert("SC-2", Vector.SUPPLY_CHAIN, Severity.CRITICAL, "t", NOW, NOW, node="gpu02"),
    ]
    upsert_alerts(fleet.store, found).result()
    card = element_card(fleet, viewer(fleet, "alice"), "vector-rdma-blind-spot", now=NOW)
    assert isinstance(card.live, VectorCardLive) and card.live.open_alerts == 1
    # alice counts the alert of her job; the one on no job (a process outside every job) is
    # counted by those who read every alert only
    state = live_state(fleet, viewer(fleet, "alice"), now=NOW)
    assert state.alerts.by_node == {"gpu02": 1}
    assert state.alerts.by_vector == {"rdma-blind-spot": 1}
    assert state.alerts.worst_by_node == {"gpu02": "HIGH"}
    state = live_state(fleet, viewer(fleet, "admin"), now=NOW)
    assert state.alerts.by_node == {"gpu02": 2}
    assert state.alerts.by_vector == {"rdma-blind-spot": 1, "supply-chain": 1}
    assert state.alerts.worst_by_node == {"gpu02": "CRITICAL"}
    assert state.alerts.worst_by_vector == {"rdma-blind-spot": "HIGH", "supply-chain": "CRITICAL"}
    anonymous = live_state(fleet, Viewer(None), now=NOW)
    assert anonymous.alerts.configured and not anonymous.alerts.shown
    assert anonymous.alerts.by_vector == {}


def test_cost_of_lost_gpu_hours(fleet: Service) -> None:
    view = decision_view(fleet, viewer(fleet, "carol"), now=NOW)
    # every sample weighs one interval, the last one its series' median interval
    intervals_hours = SAMPLES * STEP.total_seconds() / 3600
    assert view.cluster.allocated_gpu_hours == pytest.approx(14 * intervals_hours)
    lost = intervals_hours * (4 * 0.81 + 2 * 1.0 + 7 * 0.45 + 0.08)
    assert view.cluster.lost_gpu_hours == pytest.approx(lost)
    assert view.cluster.lost_cost == pytest.approx(lost * 2.50)
    assert view.cluster.currency == "USD"
    assert view.own is not None and view.own.scope == "your jobs"
    assert view.own.allocated_gpu_hours == pytest.approx(12 * intervals_hours)  # vision + nlp
    assert view.own.real_efficiency_ratio == pytest.approx((4 * 0.19 + 7 * 0.55 + 0.92) / 12)
    assert view.own.reported_utilization_ratio == pytest.approx((4 * 0.87 + 7 * 0.97 + 0.99) / 12)
    assert [b.title for b in view.bridges] == [
        "Business",
        "Organization",
        "People",
        "Business lines",
    ]
    assert {o.layer.value for o in view.owners} == {
        "compute",
        "interconnect",
        "storage",
        "scheduler",
        "software",
        "weights",
    }
    assert decision_view(fleet, viewer(fleet, "admin"), now=NOW).own is None
    assert decision_view(fleet, Viewer(None), now=NOW).own is None


def test_captured_and_sensor_collectors_say_what_was_collected(fleet: Service) -> None:
    """The profiler and NCCL logs through the golden path's captures, eBPF on checkpoints
    through the accesses the Tetragon tail brought: not configured only when nothing is set."""
    from pathlib import Path

    from hpcscope.model.capture import StoredCapture
    from hpcscope.model.file_access import FILE_ACCESS_SCHEMA
    from hpcscope.store.captures import upsert_capture
    from hpcscope.store.file_access import append_file_access

    def health() -> dict[str, object]:
        return {h.id: h for h in live_state(fleet, Viewer(None), now=NOW).collectors}

    before = health()
    for cid in ("pytorch-profiler", "nccl-logs", "ebpf-checkpoints", "tetragon"):
        assert before[cid].status is CollectorStatus.NOT_CONFIGURED  # type: ignore[attr-defined]
    fleet.settings.capture = CaptureSection(spool_dir=Path("/var/spool/hpcscope/capture"))
    fleet.settings.tetragon = TetragonSection(events_path=Path("/var/log/tetragon/tetragon.log"))
    waiting = health()
    assert waiting["pytorch-profiler"].status is CollectorStatus.CONFIGURED  # type: ignore[attr-defined]
    assert waiting["ebpf-checkpoints"].status is CollectorStatus.CONFIGURED  # type: ignore[attr-defined]
    captured = NOW - timedelta(minutes=2)
    upsert_capture(
        fleet.store,
        StoredCapture(
            job_id="101", capture_window=0, claimed_job_id="101", updated=captured,
            window_start=captured, window_end=captured, ranks=4, world_size=4, steps=8,
            nodes=("gpu01",), attribution="verified", straggler_rank=None, straggler_phase=None,
            straggler_node=None, straggler_gpu=None, delay_seconds_per_step=None,
            what_if_gain_seconds_per_step=None, notes=(),
            result_json='{"analysis": {}, "nccl_logs": ["nccl-rank-0.log"]}',
        ),
    )  # fmt: skip
    access = [
        {"ts": NOW - timedelta(seconds=30), "path": "/lustre/scratch/checkpoints/a/model.pt",
         "access": "read", "bytes": 4096, "node": "gpu01", "job_id": "101", "pid": 7, "uid": 1,
         "binary": "/usr/bin/python3", "arguments": "", "exec_id": None,
         "function": "security_file_permission", "source_kind": "tetragon",
         "source_name": "tetragon.log", "source_line": 1}
    ]  # fmt: skip
    append_file_access(fleet.store, pa.Table.from_pylist(access, schema=FILE_ACCESS_SCHEMA))
    fleet.store.flush()
    seen = health()
    for cid, when in (("pytorch-profiler", captured), ("nccl-logs", captured),
                      ("ebpf-checkpoints", NOW - timedelta(seconds=30))):  # fmt: skip
        assert seen[cid].status is not CollectorStatus.NOT_CONFIGURED  # type: ignore[attr-defined]
        assert seen[cid].last_event_ts == when, cid  # type: ignore[attr-defined]
    assert seen["pytorch-profiler"].status is CollectorStatus.OK  # type: ignore[attr-defined]
