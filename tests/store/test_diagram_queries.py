"""Store queries behind the diagram, on a real DuckDB file with the real schema."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from hpcscope.model.access import JobScope
from hpcscope.model.alerts import Alert, AlertState, Severity, Vector
from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA, SCRAPE_SCHEMA
from hpcscope.store import Store
from hpcscope.store import diagram as q
from hpcscope.store.alerts import set_alert_state, upsert_alerts
from hpcscope.store.reports import EmbeddedSamples
from tests.support.fleet import NOW, SAMPLES, STEP, write_fleet

ALL = JobScope(all_jobs=True)
NOBODY = JobScope(all_jobs=False)
ALICE = JobScope(all_jobs=False, users=frozenset({"alice"}))
CAROL = JobScope(all_jobs=False, users=frozenset({"carol"}), accounts=frozenset({"vision", "nlp"}))
RECENT = NOW - timedelta(minutes=1)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(tmp_path / "store.duckdb")
    write_fleet(opened)
    yield opened
    opened.close()


def _states(store: Store, *, scope: JobScope, since: datetime, idle_values: bool) -> q.GpuStates:
    latest = EmbeddedSamples(store).latest(since=since)
    return q.gpu_states(store, latest=latest, scope=scope, idle_values=idle_values)


def _by_gpu(rows: list[q.GpuStateRow]) -> dict[tuple[object, object], q.GpuStateRow]:
    return {(r["node"], r["gpu"]): r for r in rows}


def test_admin_sees_every_gpu_with_its_job_and_counters(store: Store) -> None:
    rows = _by_gpu(_states(store, scope=ALL, since=RECENT, idle_values=True).rows)
    assert len(rows) == 16
    straggler = rows[("gpu02", 2)]
    assert straggler["visible_jobs"] == ["4410002"] and straggler["hidden_jobs"] == 0
    assert straggler["sm_active_ratio"] == pytest.approx(0.92)
    assert straggler["reported_util_ratio"] == pytest.approx(0.99)
    starved = rows[("gpu01", 0)]
    assert (starved["reported_util_ratio"], starved["sm_active_ratio"]) == pytest.approx(
        (0.87, 0.19)
    )
    idle = rows[("gpu01", 7)]
    assert idle["allocated"] is False and idle["visible_jobs"] == []


def test_a_researcher_gets_other_jobs_as_allocated_without_anything_else(store: Store) -> None:
    rows = _by_gpu(_states(store, scope=ALICE, since=RECENT, idle_values=True).rows)
    own = rows[("gpu01", 1)]
    assert own["visible_jobs"] == ["4410001"] and own["sm_active_ratio"] == pytest.approx(0.19)
    for key in [("gpu02", g) for g in range(8)] + [("gpu01", 4), ("gpu01", 5)]:
        row = rows[key]
        assert row["allocated"] is True
        assert row["visible_jobs"] == [] and row["hidden_jobs"] == 1
        assert row["values_visible"] is False
        assert all(dict(row)[c] is None for c in q.LIVE_GPU_COLUMNS), key
    # a GPU no job holds shows its counters to a logged-in user (memory left behind is a signal)
    assert rows[("gpu01", 6)]["reported_util_ratio"] == 0.0


def test_a_team_lead_sees_the_accounts_they_coordinate(store: Store) -> None:
    rows = _by_gpu(_states(store, scope=CAROL, since=RECENT, idle_values=True).rows)
    assert rows[("gpu02", 2)]["visible_jobs"] == ["4410002"]
    assert rows[("gpu01", 0)]["visible_jobs"] == ["4410001"]
    assert rows[("gpu01", 4)]["visible_jobs"] == [] and rows[("gpu01", 4)]["hidden_jobs"] == 1


def test_nobody_scope_without_idle_values_returns_no_counter_at_all(store: Store) -> None:
    rows = _states(store, scope=NOBODY, since=RECENT, idle_values=False).rows
    assert len(rows) == 16
    assert all(r["visible_jobs"] == [] for r in rows)
    assert all(dict(r)[c] is None for r in rows for c in q.LIVE_GPU_COLUMNS)
    assert sum(1 for r in rows if r["allocated"]) == 14


def test_a_job_unknown_to_the_scheduler_is_hidden_from_non_admins(store: Store) -> None:
    sample: dict[str, list[object]] = {field.name: [None] for field in GPU_SAMPLE_SCHEMA}
    sample.update(
        ts=[NOW + STEP], node=["gpu01"], gpu=[7], job_id=["9999999"], reported_util_ratio=[0.5]
    )
    store.append("gpu_samples", pa.table(sample, schema=GPU_SAMPLE_SCHEMA)).result()
    row = _by_gpu(_states(store, scope=ALICE, since=RECENT, idle_values=True).rows)[("gpu01", 7)]
    assert (
        row["allocated"] is True and row["hidden_jobs"] == 1 and row["reported_util_ratio"] is None
    )
    row = _by_gpu(_states(store, scope=ALL, since=RECENT, idle_values=True).rows)[("gpu01", 7)]
    assert row["visible_jobs"] == ["9999999"] and row["reported_util_ratio"] == 0.5


def test_old_samples_are_not_live(store: Store) -> None:
    later = NOW + timedelta(hours=1)
    rows = _states(store, scope=ALL, since=later - timedelta(minutes=1), idle_values=True).rows
    # open allocations still say who holds a GPU; no counter is older than the window
    assert {(r["node"], r["gpu"]) for r in rows} == {("gpu01", g) for g in range(6)} | {
        ("gpu02", g) for g in range(8)
    }
    assert all(r["ts"] is None and r["sm_active_ratio"] is None for r in rows)
    assert q.last_sample_times(store, since=NOW - timedelta(days=1))[("gpu02", 2)] == NOW
    assert q.last_sample_times(store, since=later) == {}


def test_recent_job_samples_are_scoped(store: Store) -> None:
    since = NOW - timedelta(minutes=5)
    everything = q.recent_job_samples(store, scope=ALL, since=since)
    assert set(everything.column("job_id").to_pylist()) == {"4410001", "4410002", "4410003"}
    assert everything.num_rows == 14 * 21  # 14 held GPUs, the last 21 scrapes (5 min at 15 s)
    alice = q.recent_job_samples(store, scope=ALICE, since=since)
    assert set(alice.column("job_id").to_pylist()) == {"4410001"}
    assert q.recent_job_samples(store, scope=NOBODY, since=since).num_rows == 0


def test_cluster_health_is_an_aggregate_the_same_for_every_scope(store: Store) -> None:
    health = _states(store, scope=ALL, since=RECENT, idle_values=True).health
    assert _states(store, scope=NOBODY, since=RECENT, idle_values=False).health == health
    assert health["gpus_reporting"] == 16 and health["gpus_allocated"] == 14
    util = (4 * 0.87 + 2 * 0.0 + 7 * 0.97 + 0.99) / 14
    real = (4 * 0.19 + 2 * 0.0 + 7 * 0.55 + 0.92) / 14
    assert health["reported_util_ratio"] == pytest.approx(util)
    assert health["sm_active_ratio"] == pytest.approx(real)
    assert set(health) == {
        "gpus_reporting",
        "gpus_allocated",
        "reported_util_ratio",
        "sm_active_ratio",
        "gpus_with_xid",
        "latest_ts",
    }


def test_gpu_time_counts_intervals_and_not_gaps(store: Store) -> None:
    window = {"since": NOW - timedelta(days=1), "until": NOW + STEP, "max_interval_seconds": 45.0}
    total = q.gpu_time(store, scope=ALL, **window)  # type: ignore[arg-type]
    intervals = SAMPLES * STEP.total_seconds()  # the last sample weighs the median interval
    assert total.allocated_seconds == pytest.approx(14 * intervals)
    useful = intervals * (4 * 0.19 + 7 * 0.55 + 0.92)
    assert total.useful_seconds == pytest.approx(useful)
    assert total.measured_seconds == pytest.approx(total.allocated_seconds)
    assert total.jobs == 3
    alice = q.gpu_time(store, scope=ALICE, **window)  # type: ignore[arg-type]
    assert alice.allocated_seconds == pytest.approx(4 * intervals)
    assert alice.useful_seconds == pytest.approx(4 * intervals * 0.19)
    # a ten-minute silence on one GPU is a gap, not ten minutes of anything: the sample before
    # it weighs the cap (45 s), the late sample the median interval
    late: dict[str, list[object]] = {field.name: [None] for field in GPU_SAMPLE_SCHEMA}
    late.update(
        ts=[NOW + timedelta(minutes=10)],
        node=["gpu01"],
        gpu=[0],
        job_id=["4410001"],
        reported_util_ratio=[0.87],
        sm_active_ratio=[0.19],
    )
    store.append("gpu_samples", pa.table(late, schema=GPU_SAMPLE_SCHEMA)).result()
    window["until"] = NOW + timedelta(minutes=11)
    after = q.gpu_time(store, scope=ALICE, **window)  # type: ignore[arg-type]
    assert after.allocated_seconds == pytest.approx(alice.allocated_seconds + 45.0)


def test_scheduler_summary_counts_every_job(store: Store) -> None:
    summary = q.scheduler_summary(store, now=NOW, since=NOW - timedelta(days=1))
    assert summary["pending"] == 2 and summary["running"] == 3
    assert summary["started_since"] == 3
    assert summary["wait_median_seconds"] == pytest.approx(180.0)  # waits of 3, 8 and 1 min
    assert summary["oldest_pending_submit"] == NOW - timedelta(minutes=6)
    assert [j["job_id"] for j in q.active_jobs(store, scope=ALICE)] == ["4410001", "4410004"]
    assert {j["job_id"] for j in q.active_jobs(store, scope=NOBODY)} == set()


def test_scrape_health_per_exporter(store: Store) -> None:
    health = q.scrape_health(store, since=NOW - timedelta(minutes=15))
    assert len(health) == 1
    dcgm = health[0]
    assert dcgm["exporter"] == "dcgm-exporter" and dcgm["targets"] == 2
    assert dcgm["scrapes"] == 2 * SAMPLES and dcgm["failures"] == 1
    assert dcgm["failing_targets"] == 0 and dcgm["last_error"] == "timeout after 5.0 s"
    assert dcgm["last_ok_ts"] == NOW
    failed: dict[str, list[object]] = {field.name: [None] for field in SCRAPE_SCHEMA}
    failed.update(
        ts=[NOW + STEP],
        target=["127.0.0.1:9402"],
        exporter=["dcgm-exporter"],
        node=["gpu02"],
        ok=[False],
        duration_seconds=[5.0],
        samples=[0],
        rejected_lines=[0],
        error=["connection refused"],
    )
    store.append("scrapes", pa.table(failed, schema=SCRAPE_SCHEMA)).result()
    dcgm = q.scrape_health(store, since=NOW - timedelta(minutes=15))[0]
    assert dcgm["failing_targets"] == 1 and dcgm["last_error"] == "connection refused"


def _alert(rule: str, vector: Vector, severity: Severity, node: str | None, job: str) -> Alert:
    return Alert(
        rule_id=rule,
        vector=vector,
        severity=severity,
        title=rule,
        first_seen=NOW,
        last_seen=NOW,
        node=node,
        job_id=job,
    )


def test_open_alerts_are_counted_per_vector_node_and_severity(store: Store) -> None:
    assert q.open_alert_counts(store) == []  # the table exists (migration 7), nothing open yet
    rdma = _alert("RD-4", Vector.RDMA, Severity.HIGH, "gpu02", "4410001")
    rdma_again = _alert("RD-4", Vector.RDMA, Severity.HIGH, "gpu02", "4410002")
    miner = _alert("SC-2", Vector.SUPPLY_CHAIN, Severity.CRITICAL, "gpu01", "4410001")
    shell = _alert("SC-1", Vector.SUPPLY_CHAIN, Severity.HIGH, "gpu01", "4410001")
    gone = _alert("CE-3", Vector.CONTAINER_ESCAPE, Severity.HIGH, "gpu01", "4410001")
    nowhere = _alert("GI-1", Vector.GRADIENT_INJECTION, Severity.HIGH, None, "4410001")
    upsert_alerts(store, [rdma, rdma_again, miner, shell, gone, nowhere]).result()
    set_alert_state(store, shell.key, AlertState.ACKNOWLEDGED, by="admin", at=NOW).result()
    set_alert_state(store, gone.key, AlertState.RESOLVED, by="admin", at=NOW).result()
    alice, bob = {"user": "alice", "account": "vision"}, {"user": "bob", "account": "nlp"}
    counts = q.open_alert_counts(store)
    assert counts is not None
    assert sorted(counts, key=lambda r: (r["vector"], r["severity"], str(r["user"]))) == [
        {"vector": "gradient-injection", "node": None, "severity": "HIGH", **alice, "open": 1},
        # one row per job owner: each viewer counts the alerts they may read
        {"vector": "rdma-blind-spot", "node": "gpu02", "severity": "HIGH", **alice, "open": 1},
        {"vector": "rdma-blind-spot", "node": "gpu02", "severity": "HIGH", **bob, "open": 1},
        # acknowledged is still open; resolved is not
        {"vector": "supply-chain", "node": "gpu01", "severity": "CRITICAL", **alice, "open": 1},
        {"vector": "supply-chain", "node": "gpu01", "severity": "HIGH", **alice, "open": 1},
    ]


def test_alert_counts_are_none_without_an_alerts_table(store: Store) -> None:
    store.submit_write(lambda con: con.execute("DROP TABLE alerts")).result()
    assert q.open_alert_counts(store) is None


def test_the_typed_row_names_every_live_counter() -> None:
    """``GpuCounters`` lists the columns by hand (a TypedDict cannot be built from a tuple):
    it must name exactly :data:`LIVE_GPU_COLUMNS`, in order."""
    assert tuple(q.GpuCounters.__annotations__) == q.LIVE_GPU_COLUMNS
