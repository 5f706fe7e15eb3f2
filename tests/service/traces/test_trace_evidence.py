"""Root-cause evidence for a straggler from GPU and InfiniBand telemetry in a real (temporary)
store.

The param 8-rank DLRM traces (rank 7 is the straggler the others wait for) are linked to a job
whose GPU samples are written to the store: the evidence must name the straggler's GPU, its
throttle reasons, clock and temperature against its peers, or rule the GPU out when it looks
like the others.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

from hpcscope.model.access import Principal, Role
from hpcscope.model.schemas import (
    GPU_SAMPLE_SCHEMA,
    IB_PORT_SCHEMA,
    JOB_ALLOCATION_SCHEMA,
    LUSTRE_JOB_STATS_SCHEMA,
)
from hpcscope.service.core import Service
from hpcscope.service.settings import Settings
from hpcscope.service.traces import reports as trace_reports
from hpcscope.store.infiniband import append_ib_counters
from hpcscope.store.lustre import append_job_stats
from tests.conftest import demo_users
from tests.support.paths import FIXTURES

PARAM = FIXTURES / "traces" / "param_dlrm_8rank" / "dlrm_kineto.tar.gz"
WINDOW_START = datetime(2023, 9, 7, 23, 10, 1)  # the traces' profiled step, UTC
ALICE = Principal("alice", Role.RESEARCHER)
BOB = Principal("bob", Role.RESEARCHER)


def _samples(job_id: str, slow_gpu: int | None, *, xid: int | None = None) -> pa.Table:
    rows: dict[str, list[Any]] = {f.name: [] for f in GPU_SAMPLE_SCHEMA}
    for second in range(-6, 8):
        for gpu in range(8):
            slow = gpu == slow_gpu
            values = {
                "ts": WINDOW_START + timedelta(seconds=second),
                "node": "dgx1",
                "gpu": gpu,
                "job_id": job_id,
                "reported_util_ratio": 1.0,
                "sm_active_ratio": 0.5,
                "sm_clock_hertz": 1.10e9 if slow else 1.53e9,
                "gpu_temperature_celsius": 89.0 if slow else 68.0,
                "clock_throttle_reasons": 0x40 if slow else 0,
                # a new Xid during the profiled step (DCGM repeats the last one afterwards)
                "xid_last": xid if slow and xid and second >= 1 else 0,
                "power_watts": 250.0,
            }
            for field in GPU_SAMPLE_SCHEMA:
                rows[field.name].append(values.get(field.name))
    return pa.table(rows, schema=GPU_SAMPLE_SCHEMA)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    settings = Settings(store_path=tmp_path / "s.duckdb", secret_key="t", scrape_interval_seconds=1)
    opened = Service.open(settings, users=demo_users())
    jobs = pa.table(
        {
            "job_id": ["77", "78"],
            "user": ["alice", "alice"],
            "account": ["vision", "vision"],
            "start_time": [WINDOW_START - timedelta(hours=1)] * 2,
            "gpus": [8, 8],
            "nodes": ["dgx1", "dgx1"],
            "source": ["test", "test"],
        }
    )
    opened.store.upsert_jobs(jobs).result()
    for job_id in ("77", "78"):
        opened.store.append("job_allocations", _allocation(job_id, ["dgx1"])).result()
    opened.store.append("gpu_samples", _samples("77", slow_gpu=7, xid=79)).result()
    opened.store.append("gpu_samples", _samples("78", slow_gpu=None)).result()
    yield opened
    opened.close()


def _evidence(document: Mapping[str, Any], rank: int) -> list[dict[str, Any]]:
    [straggler] = [s for s in document["stragglers"] if s["rank"] == rank]
    return list(straggler["evidence"])


def test_thermal_throttling_of_the_stragglers_gpu_is_evidence(service: Service) -> None:
    row = trace_reports.analyze_and_store(
        service, ALICE, [PARAM], source_names=["dlrm_kineto.tar.gz"], job_id="77"
    )
    found = trace_reports.get_analysis(service, ALICE, row.analysis_id)
    assert found is not None
    _, document = found
    hardware = [e for e in _evidence(document, 7) if e["kind"] == "hardware"]
    summaries = " | ".join(e["summary"] for e in hardware)
    assert all(e["supports"] for e in hardware), summaries
    throttle = next(e for e in hardware if "throttle_reasons" in e["figures"])
    assert throttle["figures"]["throttle_reasons"] == 0x40
    assert throttle["figures"]["node"] == "dgx1" and throttle["figures"]["gpu"] == 7
    assert "HW thermal slowdown" in throttle["summary"]
    clock = next(e for e in hardware if "sm_clock_hertz" in e["figures"])
    assert clock["figures"]["sm_clock_hertz"] == pytest.approx(1.10e9)
    assert clock["figures"]["peers_sm_clock_hertz"] == pytest.approx(1.53e9)
    hot = next(e for e in hardware if "max_temperature_celsius" in e["figures"])
    assert hot["figures"]["max_temperature_celsius"] == 89.0
    assert any(
        e["figures"].get("xid") == 79 and "fallen off the bus" in e["summary"] for e in hardware
    )
    assert any("rank 7 ran on node dgx1 GPU 7" in n for n in document["evidence_notes"])
    # the trace-side checks are there too, ruling data and network out
    kinds = {(e["kind"], e["supports"]) for e in _evidence(document, 7)}
    assert ("data", False) in kinds and ("network", False) in kinds


def test_a_healthy_gpu_is_ruled_out(service: Service) -> None:
    row = trace_reports.analyze_and_store(
        service, ALICE, [PARAM], source_names=["dlrm_kineto.tar.gz"], job_id="78"
    )
    found = trace_reports.get_analysis(service, ALICE, row.analysis_id)
    assert found is not None
    hardware = [e for e in _evidence(found[1], 7) if e["kind"] == "hardware"]
    assert len(hardware) == 1 and hardware[0]["supports"] is False
    assert "the GPU is not it" in hardware[0]["summary"]


def test_evidence_follows_the_link_and_the_window(service: Service) -> None:
    row = trace_reports.analyze_and_store(
        service, ALICE, [PARAM], source_names=["dlrm_kineto.tar.gz"]
    )
    found = trace_reports.get_analysis(service, ALICE, row.analysis_id)
    assert found is not None
    assert all(e["kind"] != "hardware" for e in _evidence(found[1], 7))
    trace_reports.link_analysis(service, ALICE, row.analysis_id, "77")
    found = trace_reports.get_analysis(service, ALICE, row.analysis_id)
    assert found is not None
    assert any(e["kind"] == "hardware" and e["supports"] for e in _evidence(found[1], 7))


def _shifted(table: pa.Table, job_id: str, delta: timedelta) -> pa.Table:
    moved = table.set_column(0, "ts", pa.array([t + delta for t in table.column("ts").to_pylist()]))
    moved = moved.set_column(
        moved.schema.get_field_index("job_id"), "job_id", pa.array([job_id] * moved.num_rows)
    )
    return moved.cast(GPU_SAMPLE_SCHEMA)


def test_samples_outside_the_profiled_window_are_ignored(service: Service) -> None:
    # a throttled GPU 7 a day later must not count against the (healthy) profiled window
    service.store.append("gpu_samples", _shifted(_samples("78", 7), "78", timedelta(days=1)))
    service.store.flush()
    row = trace_reports.analyze_and_store(service, ALICE, [PARAM], source_names=["x"], job_id="78")
    found = trace_reports.get_analysis(service, ALICE, row.analysis_id)
    assert found is not None
    hardware = [e for e in _evidence(found[1], 7) if e["kind"] == "hardware"]
    assert len(hardware) == 1 and not hardware[0]["supports"]


def test_no_sample_in_the_window_is_said(service: Service) -> None:
    jobs = pa.table({"job_id": ["79"], "user": ["alice"], "account": ["vision"], "source": ["t"]})
    service.store.upsert_jobs(jobs).result()
    service.store.append(
        "gpu_samples", _shifted(_samples("79", 7), "79", timedelta(days=1))
    ).result()
    row = trace_reports.analyze_and_store(service, ALICE, [PARAM], source_names=["x"], job_id="79")
    found = trace_reports.get_analysis(service, ALICE, row.analysis_id)
    assert found is not None
    assert all(e["kind"] != "hardware" for e in _evidence(found[1], 7))
    assert any("no GPU sample in the profiled window" in n for n in found[1]["evidence_notes"])


def test_a_job_you_may_not_see_cannot_be_linked(service: Service) -> None:
    with pytest.raises(trace_reports.TraceAccessError, match="no job 77 visible"):
        trace_reports.analyze_and_store(service, BOB, [PARAM], source_names=["x"], job_id="77")
    row = trace_reports.analyze_and_store(service, BOB, [PARAM], source_names=["x"])
    with pytest.raises(trace_reports.TraceAccessError):
        trace_reports.link_analysis(service, BOB, row.analysis_id, "77")


def test_the_server_never_forks(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    # the server holds the DuckDB file: no forked helper even for inputs above its 2 MB
    def refuse() -> int:
        raise AssertionError("the server forked")

    monkeypatch.setattr("os.fork", refuse)
    row = trace_reports.analyze_and_store(service, ALICE, [PARAM], source_names=["x"])
    assert row.straggler_ranks == (7,)


def _two_node_traces(directory: Path) -> Path:
    """The param ranks as if ranks 0-3 ran on dgx1 and 4-7 on dgx2 (Kineto's ``host_name``
    set in copies of the real traces; everything else untouched)."""
    with tarfile.open(PARAM) as archive:
        archive.extractall(directory, filter="data")
    traces = sorted(directory.rglob("*.json"))
    assert len(traces) == 8
    for path in traces:
        document = orjson.loads(path.read_bytes())
        rank = document["distributedInfo"]["rank"]
        document["host_name"] = "dgx1" if rank < 4 else "dgx2"
        path.write_bytes(orjson.dumps(document))
    return directory


def _allocation(job_id: str, nodes: list[str]) -> pa.Table:
    """``job_id`` on all 8 GPUs of each of ``nodes``, from an hour before the profiled step."""
    rows = len(nodes) * 8
    return pa.table(
        {
            "job_id": [job_id] * rows,
            "node": [node for node in nodes for _ in range(8)],
            "gpu": list(range(8)) * len(nodes),
            "gpu_instance_id": [None] * rows,
            "start_time": [WINDOW_START - timedelta(hours=1)] * rows,
            "end_time": [None] * rows,
        },
        schema=JOB_ALLOCATION_SCHEMA,
    )


def _two_node_job(service: Service, job_id: str) -> None:
    """Alice's job on all 8 GPUs of dgx1 and of dgx2."""
    jobs = pa.table(
        {"job_id": [job_id], "user": ["alice"], "account": ["vision"], "source": ["test"]}
    )
    service.store.upsert_jobs(jobs).result()
    service.store.append("job_allocations", _allocation(job_id, ["dgx1", "dgx2"])).result()


def _ib_reads(node: str, symbol_errors: tuple[float, float]) -> pa.Table:
    rows = []
    for second, value in zip((-2, 2), symbol_errors, strict=True):
        row: dict[str, Any] = dict.fromkeys(IB_PORT_SCHEMA.names)
        row.update(
            ts=WINDOW_START + timedelta(seconds=second),
            node=node,
            device="mlx5_0",
            port=1,
            state_id=4,
            physical_state_id=5,
            symbol_error_total=value,
            link_error_recovery_total=0.0,
        )
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=IB_PORT_SCHEMA)


@pytest.mark.parametrize(("dgx2_errors", "supports"), [((10.0, 1510.0), True), ((3.0, 3.0), False)])
def test_infiniband_errors_on_the_stragglers_node_are_network_evidence(
    service: Service, tmp_path: Path, dgx2_errors: tuple[float, float], supports: bool
) -> None:
    _two_node_job(service, "80")
    append_ib_counters(service.store, _ib_reads("dgx1", (0.0, 0.0))).result()
    append_ib_counters(service.store, _ib_reads("dgx2", dgx2_errors)).result()
    # counters of a day later must not count
    late = _ib_reads("dgx1", (0.0, 99999.0))
    late = late.set_column(
        0, "ts", pa.array([t + timedelta(days=1) for t in late["ts"].to_pylist()])
    )
    append_ib_counters(service.store, late.cast(IB_PORT_SCHEMA)).result()
    traces = _two_node_traces(tmp_path / "two-nodes")
    row = trace_reports.analyze_and_store(service, ALICE, [traces], source_names=["x"], job_id="80")
    found = trace_reports.get_analysis(service, ALICE, row.analysis_id)
    assert found is not None
    fabric = [e for e in _evidence(found[1], 7) if e["figures"].get("source") == "infiniband"]
    assert len(fabric) == 1, fabric
    [item] = fabric
    assert item["kind"] == "network" and item["supports"] is supports
    assert item["figures"]["node"] == "dgx2"
    assert item["figures"]["errors"] == dgx2_errors[1] - dgx2_errors[0]
    assert item["figures"]["peers_max_errors"] == 0
    if supports:
        assert "1,500 symbol errors" in item["summary"]
        assert _evidence(found[1], 7)[0] == item  # supporting evidence comes first
    assert any("rank 7 ran on node dgx2 GPU 7" in n for n in found[1]["evidence_notes"])
    # linking again does not duplicate the telemetry evidence
    trace_reports.link_analysis(service, ALICE, row.analysis_id, "80")
    again = trace_reports.get_analysis(service, ALICE, row.analysis_id)
    assert again is not None
    assert [e for e in _evidence(again[1], 7) if e["figures"].get("source")] == fabric


def test_a_node_without_counters_is_said(service: Service, tmp_path: Path) -> None:
    _two_node_job(service, "81")
    traces = _two_node_traces(tmp_path / "two-nodes")
    row = trace_reports.analyze_and_store(service, ALICE, [traces], source_names=["x"], job_id="81")
    found = trace_reports.get_analysis(service, ALICE, row.analysis_id)
    assert found is not None
    assert all(e["figures"].get("source") != "infiniband" for e in _evidence(found[1], 7))
    assert any("dgx1, dgx2: no InfiniBand counters" in n for n in found[1]["evidence_notes"])


def _lustre_reads(node: str, job_id: str, read_usecs: float) -> pa.Table:
    """Two job_stats snapshots of one OST entry of ``job_id`` on ``node`` around the profiled
    step: 1,000 reads of 1 MiB, ``read_usecs`` microseconds of read latency in all."""
    rows = []
    for second, fraction in ((-2, 0.0), (2, 1.0)):
        for operation, unit, total in (("read", "usecs", read_usecs), ("read_bytes", "bytes", 1e9)):
            rows.append(
                {
                    "ts": WINDOW_START + timedelta(seconds=second),
                    "server": "oss1",
                    "target": "scratch-OST0000",
                    "component": "ost",
                    "job_id_raw": f"{job_id}:1000:{node}",
                    "job_id": job_id,
                    "host": node,
                    "operation": operation,
                    "unit": unit,
                    "samples": 1000.0 * fraction,
                    "sum_value": total * fraction,
                    "min_value": None,
                    "max_value": None,
                    "start_ts": WINDOW_START - timedelta(minutes=10),
                }
            )
    return pa.Table.from_pylist(rows, schema=LUSTRE_JOB_STATS_SCHEMA)


@pytest.mark.parametrize(("dgx2_usecs", "supports"), [(24e6, True), (1.1e6, False)])
def test_slow_lustre_reads_on_the_stragglers_node_are_storage_evidence(
    service: Service, tmp_path: Path, dgx2_usecs: float, supports: bool
) -> None:
    _two_node_job(service, "82")
    append_job_stats(service.store, _lustre_reads("dgx1", "82", 1e6)).result()
    append_job_stats(service.store, _lustre_reads("dgx2", "82", dgx2_usecs)).result()
    append_job_stats(service.store, _lustre_reads("dgx2", "99", 90e6)).result()  # another job
    traces = _two_node_traces(tmp_path / "two-nodes")
    row = trace_reports.analyze_and_store(service, ALICE, [traces], source_names=["x"], job_id="82")
    found = trace_reports.get_analysis(service, ALICE, row.analysis_id)
    assert found is not None
    storage = [e for e in _evidence(found[1], 7) if e["figures"].get("source") == "lustre"]
    assert len(storage) == 1, storage
    [item] = storage
    assert item["kind"] == "data" and item["supports"] is supports, item["summary"]
    assert item["figures"]["node"] == "dgx2"
    # the other job's slower reads on dgx2 are not this job's
    latency = 0.024 if supports else 0.0011
    assert item["figures"]["mean_read_latency_seconds"] == pytest.approx(latency)
    assert item["figures"]["peers_mean_read_latency_seconds"] == pytest.approx(0.001)
    if supports:
        assert "24.00 ms per read RPC on dgx2" in item["summary"]


def test_no_lustre_rows_is_said(service: Service, tmp_path: Path) -> None:
    _two_node_job(service, "83")
    traces = _two_node_traces(tmp_path / "two-nodes")
    row = trace_reports.analyze_and_store(service, ALICE, [traces], source_names=["x"], job_id="83")
    found = trace_reports.get_analysis(service, ALICE, row.analysis_id)
    assert found is not None
    assert all(e["figures"].get("source") != "lustre" for e in _evidence(found[1], 7))
    assert any("no Lustre job_stats" in n for n in found[1]["evidence_notes"])
