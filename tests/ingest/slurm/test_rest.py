"""slurmrestd jobs/nodes/partitions on real responses, and what bad input does."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hpcscope.ingest.slurm import (
    SchedulerFormatError,
    parse_slurmrestd_jobs,
    parse_slurmrestd_nodes,
    parse_slurmrestd_partitions,
)
from hpcscope.model.schemas import JOB_ALIAS_SCHEMA, JOB_ALLOCATION_SCHEMA, JOB_SCHEMA
from tests.support.paths import FIXTURES

REST = FIXTURES / "slurm" / "slurmrestd_lcrownover"
V40_JOBS = (REST / "V0040OpenapiJobInfoResp.json").read_bytes()


def _doc() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(V40_JOBS)
    return loaded


def test_v0040_jobs_real_response() -> None:
    snap = parse_slurmrestd_jobs(V40_JOBS, source="V0040")
    assert snap.jobs.schema == JOB_SCHEMA
    assert snap.allocations.schema == JOB_ALLOCATION_SCHEMA
    assert snap.aliases.schema == JOB_ALIAS_SCHEMA
    assert snap.warnings == []
    rows = {r["job_id"]: r for r in snap.jobs.to_pylist()}
    assert sorted(rows) == ["7725337_411", "7725337_[412-9999]"]
    task = rows["7725337_411"]
    assert task["user"] == "rdennis"
    assert task["account"] == "jamming"
    assert task["partition"] == "preempt"
    assert task["qos"] == "normal"
    assert task["cluster"] == "talapas"
    assert task["state"] == "RUNNING"
    assert task["submit_time"] == datetime(2024, 7, 29, 15, 51, 57)
    assert task["start_time"] == datetime(2024, 7, 29, 17, 32, 41)
    # a running job's end_time in slurmrestd is the projected end (start + limit): not stored
    assert task["end_time"] is None
    assert task["exit_code"] is None
    assert task["time_limit_seconds"] == 1440 * 60
    assert task["gpus"] == 0
    assert task["nodes"] == "n0180"
    pending = rows["7725337_[412-9999]"]
    assert pending["state"] == "PENDING"
    assert pending["start_time"] is None
    aliases = {r["raw_job_id"]: r["job_id"] for r in snap.aliases.to_pylist()}
    assert aliases["7745162"] == "7725337_411"


def test_v0041_placeholder_shape_reads_with_slurm_messages_as_warnings() -> None:
    snap = parse_slurmrestd_jobs((REST / "V0041OpenapiJobInfoResp.json").read_bytes(), source="v41")
    assert snap.jobs.num_rows == 2
    assert {str(w.field) for w in snap.warnings} == {"errors", "warnings"}


def test_squeue_json_v0037_is_the_same_parser() -> None:
    raw = (FIXTURES / "slurm" / "cli_json_rivosinc" / "squeue_out.json").read_bytes()
    snap = parse_slurmrestd_jobs(raw, source="squeue --json")
    rows = {r["job_id"]: r for r in snap.jobs.to_pylist()}
    assert sorted(rows) == ["26515966", "58948420_[1-10]"]
    assert rows["26515966"]["user"] == "bkd"
    assert rows["26515966"]["time_limit_seconds"] == 30240 * 60
    assert snap.warnings == []


def _job_with_gpus(doc: dict[str, Any], detail: list[str], nodes: str) -> dict[str, Any]:
    job = dict(doc["jobs"][0])
    job["gres_detail"] = detail
    job["nodes"] = nodes
    job["job_resources"] = {"nodes": nodes}
    job["tres_alloc_str"] = "cpu=8,mem=64G,node=2,billing=8,gres/gpu=6,gres/gpu:h100=6"
    job["array_job_id"] = {"set": True, "infinite": False, "number": 0}
    job["job_id"] = 42
    return job


def test_gres_detail_gives_one_allocation_per_gpu_per_node() -> None:
    doc = _doc()
    doc["jobs"] = [_job_with_gpus(doc, ["gpu:h100:4(IDX:0-3)", "gpu:h100:2(IDX:0,3)"], "g[01-02]")]
    snap = parse_slurmrestd_jobs(doc, source="t")
    assert snap.jobs.column("gpus").to_pylist() == [6]
    got = sorted((r["node"], r["gpu"]) for r in snap.allocations.to_pylist())
    assert got == [("g01", 0), ("g01", 1), ("g01", 2), ("g01", 3), ("g02", 0), ("g02", 3)]
    assert set(snap.allocations.column("job_id").to_pylist()) == {"42"}
    assert snap.allocations.column("end_time").null_count == 4 + 2


def test_mig_gres_without_device_map_is_not_attributed() -> None:
    doc = _doc()
    doc["jobs"] = [_job_with_gpus(doc, ["gpu:1g.10gb:1(IDX:5)"], "n0162")]
    snap = parse_slurmrestd_jobs(doc, source="t")
    assert snap.allocations.num_rows == 0
    assert any("MIG" in w.message for w in snap.warnings)


def test_mig_gres_with_device_map() -> None:
    doc = _doc()
    doc["jobs"] = [_job_with_gpus(doc, ["gpu:1g.10gb:2(IDX:5-6)"], "n0162")]
    mig = {5: (2, 7), 6: (2, 8)}
    snap = parse_slurmrestd_jobs(
        doc, source="t", gres_index=lambda node, entry, index: mig.get(index)
    )
    got = sorted((r["gpu"], r["gpu_instance_id"]) for r in snap.allocations.to_pylist())
    assert got == [(2, 7), (2, 8)]


def test_gres_detail_not_matching_nodes_records_no_allocation() -> None:
    doc = _doc()
    doc["jobs"] = [_job_with_gpus(doc, ["gpu:h100:4(IDX:0-3)"], "g[01-02]")]
    snap = parse_slurmrestd_jobs(doc, source="t")
    assert snap.allocations.num_rows == 0
    assert snap.jobs.num_rows == 1
    assert any(w.field == "jobs[0].gres_detail" for w in snap.warnings)


def test_het_component_and_finished_exit_code() -> None:
    doc = _doc()
    job = dict(doc["jobs"][0])
    job["job_id"] = 901
    job["het_job_id"] = {"set": True, "infinite": False, "number": 900}
    job["het_job_offset"] = {"set": True, "infinite": False, "number": 1}
    job["array_job_id"] = {"set": True, "infinite": False, "number": 0}
    job["job_state"] = ["FAILED"]
    job["exit_code"] = {
        "status": ["SIGNALED"],
        "return_code": {"set": True, "infinite": False, "number": 0},
        "signal": {"id": {"set": True, "infinite": False, "number": 9}, "name": "KILL"},
    }
    doc["jobs"] = [job]
    snap = parse_slurmrestd_jobs(doc, source="t")
    row = snap.jobs.to_pylist()[0]
    assert row["job_id"] == "900+1"
    assert row["exit_code"] == 128 + 9
    assert row["end_time"] == datetime(2024, 7, 30, 17, 32, 41)  # 1722360761 UTC
    alias = {"raw_job_id": "901", "job_id": "900+1", "cluster": "talapas"}
    assert snap.aliases.to_pylist() == [alias]


def test_unknown_future_field_is_a_warning_and_the_job_is_kept() -> None:
    doc = _doc()
    doc["jobs"][0]["quantum_entanglement"] = {"set": True}
    doc["jobs"][1]["quantum_entanglement"] = 1
    doc["brand_new_top_level"] = []
    snap = parse_slurmrestd_jobs(doc, source="http://ctl:6820/slurm/v0.0.40/jobs")
    assert snap.jobs.num_rows == 2
    fields = sorted(str(w.field) for w in snap.warnings)
    assert fields == ["$.brand_new_top_level", "jobs[0].quantum_entanglement"]
    assert all(w.source == "http://ctl:6820/slurm/v0.0.40/jobs" for w in snap.warnings)


def test_bad_entry_is_skipped_others_kept() -> None:
    doc = _doc()
    doc["jobs"][0]["job_id"] = "not-a-number"
    doc["jobs"].append("garbage")
    snap = parse_slurmrestd_jobs(doc, source="t")
    assert snap.jobs.column("job_id").to_pylist() == ["7725337_[412-9999]"]
    assert [w.field for w in snap.warnings] == ["jobs[0]", "jobs[2]"]


def test_truncated_document_names_source_line_and_column() -> None:
    cut = V40_JOBS[: len(V40_JOBS) // 2]
    with pytest.raises(SchedulerFormatError) as info:
        parse_slurmrestd_jobs(cut, source="http://ctl/slurm/v0.0.40/jobs")
    err = info.value
    assert err.source == "http://ctl/slurm/v0.0.40/jobs"
    assert err.line is not None and err.line > 100
    assert err.column is not None
    assert "truncated" in str(err)


@pytest.mark.parametrize("payload", [b"", b"[]", b'{"meta": {}}', b'{"jobs": {}}', b"\xff\xfe"])
def test_documents_without_a_jobs_array_raise(payload: bytes) -> None:
    with pytest.raises(SchedulerFormatError):
        parse_slurmrestd_jobs(payload, source="t")


def test_nodes_v0040_and_sinfo_json_v0037() -> None:
    snap = parse_slurmrestd_nodes((REST / "V0040OpenapiNodesResp.json").read_bytes(), source="n")
    nodes = {n.name: n for n in snap.nodes}
    assert len(nodes) == 12
    assert nodes["dtn1"].states == ("DOWN", "NOT_RESPONDING")
    assert nodes["n1000"].gpus == 8
    assert nodes["n0162"].gpu_indices_used == (0, 1, 2, 3, 5, 6, 7, 8, 9)
    assert nodes["n0162"].gres[0].is_mig
    assert nodes["n0164"].gpus_used == 0
    assert snap.warnings == ()
    raw = (FIXTURES / "slurm" / "cli_json_rivosinc" / "sinfo_out.json").read_bytes()
    old = parse_slurmrestd_nodes(raw, source="sinfo --json")
    assert [n.states for n in old.nodes] == [("MIXED",), ("IDLE",), ("ALLOCATED",), ("DOWN",)]
    assert old.warnings == ()


def test_partitions_v0040() -> None:
    snap = parse_slurmrestd_partitions(
        (REST / "V0040OpenapiPartitionResp.json").read_bytes(), source="p"
    )
    parts = {p.name: p for p in snap.partitions}
    assert sorted(parts) == ["compute", "gpu", "memory", "memorylong", "preempt"]
    assert parts["memorylong"].max_time_seconds == 20160 * 60
    assert parts["gpu"].total_nodes == 23
    assert parts["compute"].state == "UP"


# --------------------------------------------------------------------------- properties

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(key=st.sampled_from(sorted(_doc()["jobs"][0])), value=json_values, which=st.integers(0, 1))
# non-finite floats (JSON's Infinity and NaN) in an int field, bare and in Slurm's number object
@example(key="time_limit", value=float("inf"), which=0)
@example(key="eligible_time", value=9223372036855.0, which=0)  # an epoch past any timestamp
@example(key="time_limit", value=float("nan"), which=1)
@example(key="time_limit", value={"set": True, "infinite": False, "number": -float("inf")}, which=0)
def test_any_field_replaced_by_any_value_never_crashes(key: str, value: Any, which: int) -> None:
    doc = _doc()
    doc["jobs"][which][key] = value
    snap = parse_slurmrestd_jobs(doc, source="prop")
    assert snap.jobs.schema == JOB_SCHEMA
    assert snap.jobs.num_rows + sum(1 for w in snap.warnings if "skipped" in w.message) == 2


@settings(max_examples=100, deadline=None)
@given(cut=st.integers(min_value=0, max_value=len(V40_JOBS) - 2))
def test_any_truncation_is_an_error_with_position(cut: int) -> None:
    with pytest.raises(SchedulerFormatError) as info:
        parse_slurmrestd_jobs(V40_JOBS[:cut], source="cut")
    assert info.value.source == "cut"
