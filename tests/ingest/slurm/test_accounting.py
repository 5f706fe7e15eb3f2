"""sacct --json (21.08-23.02 and a real 22.05 capture), sacct --parsable2 against XDMoD's oracle,
and sacctmgr associations/coordinators."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.ingest.slurm import (
    HPCSCOPE_FIELDS,
    SacctRecord,
    SchedulerFormatError,
    account_memberships,
    gpus_from_tres_string,
    parse_sacct_json,
    parse_sacct_parsable2,
    parse_sacctmgr_parsable,
)
from hpcscope.model.schemas import ACCOUNT_MEMBERSHIP_SCHEMA, JOB_SCHEMA
from tests.support.paths import FIXTURES

SLURM = FIXTURES / "slurm"
SARC = SLURM / "sacct_json_sarc"
XDMOD = SLURM / "sacct_parsable2_xdmod"
DEB = SLURM / "debian-22.05"
MANIFEST = json.loads((DEB / "MANIFEST.json").read_text())


# --------------------------------------------------------------------------- sacct --json


@pytest.mark.parametrize(
    ("name", "job_id", "state", "limit_minutes", "gpus"),
    [
        ("sacct_json_slurm_21_8_8.json", "55978384", "REQUEUED", 1440, 1),
        ("sacct_json_slurm_22_5_9.json", "20247445_100", "FAILED", 2880, 16),
        ("sacct_json_slurm_23_2_6.json", "4", "RUNNING", 7200, 2),
    ],
)
def test_sacct_json_generations(
    name: str, job_id: str, state: str, limit_minutes: int, gpus: int
) -> None:
    snap = parse_sacct_json((SARC / name).read_bytes(), source=name)
    assert snap.jobs.schema == JOB_SCHEMA
    assert snap.jobs.num_rows == 1
    row = snap.jobs.to_pylist()[0]
    assert row["job_id"] == job_id
    assert row["state"] == state
    assert row["time_limit_seconds"] == limit_minutes * 60
    assert row["gpus"] == gpus
    assert row["submit_time"] is not None and row["start_time"] is not None


def test_sacct_json_running_job_has_no_end_and_requeued_no_exit_code() -> None:
    running = parse_sacct_json((SARC / "sacct_json_slurm_23_2_6.json").read_bytes(), source="s")
    assert running.jobs.column("end_time").to_pylist() == [None]
    requeued = parse_sacct_json((SARC / "sacct_json_slurm_21_8_8.json").read_bytes(), source="s")
    assert requeued.jobs.column("exit_code").to_pylist() == [None]


def test_sacct_json_array_task_keeps_raw_id() -> None:
    snap = parse_sacct_json((SARC / "sacct_json_slurm_22_5_9.json").read_bytes(), source="s")
    raw = json.loads((SARC / "sacct_json_slurm_22_5_9.json").read_text())["jobs"][0]["job_id"]
    assert snap.aliases.to_pylist() == [
        {"raw_job_id": str(raw), "job_id": "20247445_100", "cluster": "narval"}
    ]


def test_sacct_json_22_05_failed_exit_code_zero_is_unknown_not_success() -> None:
    snap = parse_sacct_json((DEB / "sacct.json").read_bytes(), source="sacct --json")
    rows = {r["job_id"]: r for r in snap.jobs.to_pylist()}
    assert rows["2"]["state"] == "FAILED"
    assert rows["2"]["exit_code"] is None
    assert [w.field for w in snap.warnings] == ["jobs[1].exit_code"]


def test_sacct_json_real_22_05_capture() -> None:
    snap = parse_sacct_json((DEB / "sacct.json").read_bytes(), source="sacct --json")
    rows = {r["job_id"]: r for r in snap.jobs.to_pylist()}
    assert sorted(rows) == ["1", "2", "3_1", "3_2", "4", "6", "7", "9+0", "9+1"]
    assert rows["1"]["user"] == "hpcs_alice"
    assert rows["1"]["account"] == "team-a"
    assert rows["1"]["gpus"] == 2
    assert rows["2"]["gpus"] == 3
    assert rows["6"]["state"] == "CANCELLED"
    # --begin=now+4: eligible later than submit, so the two queue waits differ
    delayed = rows["4"]
    assert delayed["eligible_time"] > delayed["submit_time"]
    assert delayed["start_time"] >= delayed["eligible_time"]
    # the het job was cancelled while pending: it never started
    assert rows["9+0"]["start_time"] is None and rows["9+0"]["nodes"] is None
    aliases = {r["raw_job_id"]: r["job_id"] for r in snap.aliases.to_pylist()}
    assert aliases == {"3": "3_2", "8": "3_1", "9": "9+0", "10": "9+1"}


def test_sacct_json_v0040_shape_state_list_and_objects() -> None:
    """23.11 shape: state.current is a list, numbers are objects (field names unchanged)."""
    doc = json.loads((SARC / "sacct_json_slurm_23_2_6.json").read_text())
    doc["meta"] = {"plugin": {"data_parser": "data_parser/v0.0.40"}}
    job = doc["jobs"][0]
    job["state"]["current"] = ["COMPLETED"]
    job["time"]["end"] = 1613725309
    job["exit_code"] = {
        "status": ["SIGNALED"],
        "return_code": {"set": True, "infinite": False, "number": 0},
        "signal": {"id": {"set": True, "infinite": False, "number": 9}, "name": "KILL"},
    }
    snap = parse_sacct_json(doc, source="v40")
    row = snap.jobs.to_pylist()[0]
    assert row["state"] == "COMPLETED"
    assert row["exit_code"] == 137
    assert row["end_time"] == datetime(2021, 2, 19, 9, 1, 49)


def test_sacct_json_duplicate_records_keep_the_last() -> None:
    doc = json.loads((SARC / "sacct_json_slurm_23_2_6.json").read_text())
    first = dict(doc["jobs"][0])
    second = json.loads(json.dumps(first))
    second["state"]["current"] = "COMPLETED"
    second["time"]["end"] = 1613725309
    doc["jobs"] = [first, second]
    snap = parse_sacct_json(doc, source="dup")
    assert snap.jobs.column("state").to_pylist() == ["COMPLETED"]
    assert any("listed again" in w.message for w in snap.warnings)


def test_sacct_json_truncated_names_line_and_column() -> None:
    raw = (DEB / "sacct.json").read_bytes()
    with pytest.raises(SchedulerFormatError) as info:
        parse_sacct_json(raw[: len(raw) * 2 // 3], source="sacct --json")
    assert info.value.source == "sacct --json"
    assert info.value.line is not None and info.value.column is not None


# --------------------------------------------------------------------------- parsable2


def _xdmod_view(record: SacctRecord) -> dict[str, Any]:
    """Our record in the field names and types of XDMoD's shredder output."""
    return {
        "job_id": record.job_id,
        "job_id_raw": record.job_id_raw,
        "job_array_index": record.job_array_index,
        "cluster_name": "testresource",  # XDMoD's test renames the cluster
        "partition_name": record.partition or "",
        "qos_name": record.qos or "",
        "account_name": record.account or "",
        "group_name": record.group or "",
        "gid_number": record.gid or "",
        "user_name": record.user or "",
        "uid_number": record.uid or "",
        "submit_time": record.submit_time,
        "eligible_time": record.eligible_time,
        "start_time": record.start_time,
        "end_time": record.end_time,
        "elapsed": record.elapsed_seconds,
        "exit_code": record.exit_code,
        "state": record.state,
        "nnodes": record.nnodes,
        "ncpus": record.ncpus,
        "req_cpus": record.req_cpus,
        "req_mem": record.req_mem,
        "req_tres": record.req_tres,
        "alloc_tres": record.alloc_tres,
        "timelimit": record.time_limit_seconds,
        "node_list": record.node_list,
        "job_name": record.job_name,
        "ngpus": record.gpus,
    }


def test_parsable2_matches_xdmod_oracle_exactly() -> None:
    parsed = parse_sacct_parsable2(
        (XDMOD / "accounting-logs.log").read_text(), source="accounting-logs.log"
    )
    oracle = json.loads((XDMOD / "accounting-logs.parsed-by-xdmod.json").read_text())
    assert len(parsed.records) == len(oracle) == 4
    diffs = [
        (i, key, _xdmod_view(record)[key], expected[key])
        for i, (record, expected) in enumerate(zip(parsed.records, oracle, strict=True))
        for key in expected
        if _xdmod_view(record)[key] != expected[key]
    ]
    assert diffs == []
    assert parsed.snapshot.warnings == []


@pytest.mark.parametrize(
    ("tres", "count"),
    [tuple(case) for case in json.loads((XDMOD / "alloc-tres-gpu-count.cases.json").read_text())],
)
def test_gpu_count_cases_from_xdmod(tres: str, count: int) -> None:
    assert (gpus_from_tres_string(tres) or 0) == count


def test_typed_and_untyped_gpu_tres_are_not_double_counted() -> None:
    assert gpus_from_tres_string("cpu=8,gres/gpu=4,gres/gpu:h100=4,node=1") == 4
    assert gpus_from_tres_string("gres/gpu:a100=2,gres/gpu:h100=4") == 6


def test_parsable2_arrays_pending_and_unknown_states() -> None:
    arrays = parse_sacct_parsable2(
        (XDMOD / "accounting-logs-with-job-arrays.log").read_text(), source="arrays"
    )
    assert [r.job_id for r in arrays.records] == [
        "4103947_100",
        "4103947_[1-3]",
        "4103947_[1,5]",
        "4103947_[9-11,20]",
        "4103947_[91,100-102]",
        "4103947_[9-11,13,16-20]",
    ]
    assert arrays.records[0].job_array_index == 100
    pending = parse_sacct_parsable2(
        (XDMOD / "non-ended-job-state.log").read_text(), source="non-ended"
    )
    rows = {r["job_id"]: r for r in pending.snapshot.jobs.to_pylist()}
    assert rows["3451067"]["state"] == "RUNNING" and rows["3451067"]["end_time"] is None
    assert rows["3483276"]["state"] == "PENDING" and rows["3483276"]["start_time"] is None
    unknown = parse_sacct_parsable2(
        (XDMOD / "unknown-job-state.log").read_text(), source="unknown-job-state.log"
    )
    assert unknown.snapshot.jobs.num_rows == 2
    assert [(w.line, w.field) for w in unknown.snapshot.warnings] == [(1, "State"), (2, "State")]


def test_parsable2_real_22_05_capture_with_hpcscope_fields() -> None:
    parsed = parse_sacct_parsable2(
        (DEB / "sacct_parsable2_hpcscope.txt").read_text(),
        source="sacct",
        fields=HPCSCOPE_FIELDS,
    )
    rows = {r["job_id"]: r for r in parsed.snapshot.jobs.to_pylist()}
    assert sorted(rows) == ["1", "2", "3_1", "3_2", "4", "6", "7", "9+0", "9+1"]
    assert rows["2"]["exit_code"] == 3
    assert rows["2"]["state"] == "FAILED"
    assert rows["6"]["state"] == "CANCELLED"  # "CANCELLED by 0"
    assert rows["9+0"]["start_time"] is None  # "None assigned": never ran
    assert rows["9+0"]["time_limit_seconds"] is None  # Partition_Limit
    assert rows["1"]["time_limit_seconds"] == 3600
    assert all(not r.job_id.endswith(".batch") for r in parsed.records)
    xdmod = parse_sacct_parsable2((DEB / "sacct_parsable2_xdmod.txt").read_text(), source="x")
    assert xdmod.snapshot.jobs.num_rows == 9


def test_parsable2_truncated_line_is_skipped_with_its_line_number() -> None:
    text = (XDMOD / "accounting-logs.log").read_text()
    lines = text.splitlines()
    lines[2] = lines[2][:40]
    parsed = parse_sacct_parsable2("\n".join(lines), source="cut.log")
    assert parsed.snapshot.jobs.num_rows == 3
    assert [(w.source, w.line) for w in parsed.snapshot.warnings] == [("cut.log", 3)]


def test_parsable2_other_format_is_an_error() -> None:
    with pytest.raises(SchedulerFormatError) as info:
        parse_sacct_parsable2("a,b,c\nd,e,f\n", source="wrong")
    assert info.value.line == 1


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.sampled_from("0123456789|_[]-:.,TUnknow CANELD\n"), max_size=300))
def test_parsable2_never_crashes(text: str) -> None:
    error: SchedulerFormatError | None = None
    try:
        parsed = parse_sacct_parsable2(text, source="fuzz")
    except SchedulerFormatError as exc:
        error = exc
    if error is not None:
        assert error.source == "fuzz"
    else:
        assert parsed.snapshot.jobs.schema == JOB_SCHEMA


# --------------------------------------------------------------------------- sacctmgr


def test_sacctmgr_memberships_and_coordinators_from_real_output() -> None:
    assoc = parse_sacctmgr_parsable(
        (DEB / "sacctmgr_assoc.txt").read_text(),
        source="sacctmgr show assoc",
        fields=["cluster", "account", "user", "partition", "parentname", "defaultqos"],
    )
    users = parse_sacctmgr_parsable(
        (DEB / "sacctmgr_users_withcoord.txt").read_text(), source="sacctmgr show user"
    )
    accounts = parse_sacctmgr_parsable(
        (DEB / "sacctmgr_accounts_withcoord.txt").read_text(), source="sacctmgr show account"
    )
    expected = [
        {"user": "hpcs_alice", "account": "team-a", "coordinator": False},
        {"user": "hpcs_bob", "account": "team-b", "coordinator": False},
        {"user": "hpcs_carol", "account": "team-a", "coordinator": True},
        {"user": "hpcs_carol", "account": "team-b", "coordinator": True},
        {"user": "root", "account": "root", "coordinator": False},
    ]
    from_users = account_memberships(assoc.rows, users.rows, cluster="hpcstest")
    from_accounts = account_memberships(users.rows, accounts.rows)
    assert from_users.schema == ACCOUNT_MEMBERSHIP_SCHEMA
    assert from_users.to_pylist() == expected
    assert from_accounts.to_pylist() == expected


def test_sacctmgr_exporter_limits_file_yields_only_user_rows() -> None:
    rows = parse_sacctmgr_parsable(
        (SLURM / "cli_json_rivosinc" / "sacctmgr.txt").read_text(),
        source="sacctmgr.txt",
        fields=["user", "account", "cpu", "mem", "running_jobs", "total_jobs"],
    )
    assert account_memberships(rows.rows).to_pylist() == [
        {"user": "shouldignore", "account": "account5", "coordinator": False}
    ]


def test_sacctmgr_without_header_or_fields_is_an_error() -> None:
    with pytest.raises(SchedulerFormatError):
        parse_sacctmgr_parsable("hpcstest|team-a|alice|||\n", source="x")


def test_manifest_lists_the_captured_jobs() -> None:
    assert MANIFEST["slurm"] == "slurm-wlm 22.05.8"


@settings(max_examples=100, deadline=None)
@given(
    key=st.sampled_from(
        sorted(json.loads((SARC / "sacct_json_slurm_23_2_6.json").read_text())["jobs"][0])
    ),
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=6),
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(st.text(max_size=6), children, max_size=3)
        ),
        max_leaves=8,
    ),
)
def test_sacct_json_any_field_any_value_never_crashes(key: str, value: object) -> None:
    doc = json.loads((SARC / "sacct_json_slurm_23_2_6.json").read_text())
    doc["jobs"][0][key] = value
    snap = parse_sacct_json(doc, source="prop")
    assert snap.jobs.num_rows + sum("skipped" in w.message for w in snap.warnings) == 1


@settings(max_examples=50, deadline=None)
@given(names=st.sets(st.from_regex(r"[a-z][a-z_]{2,12}", fullmatch=True), min_size=1, max_size=4))
def test_sacct_json_unknown_fields_warn_once_each(names: set[str]) -> None:
    doc = json.loads((DEB / "sacct.json").read_text())
    known = set(doc["jobs"][0])
    fresh = {n for n in names if n not in known}
    for job in doc["jobs"]:
        for name in fresh:
            job[name] = {"set": True, "number": 1}
    snap = parse_sacct_json(doc, source="prop")
    assert snap.jobs.num_rows == 9
    unknown = [w for w in snap.warnings if "unknown field" in w.message]
    from hpcscope.ingest.slurm.fields import SLURMDBD_JOB_KEYS

    assert len(unknown) == len(fresh - SLURMDBD_JOB_KEYS)
