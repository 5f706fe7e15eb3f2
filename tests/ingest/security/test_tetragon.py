"""Tetragon JSON export: real samples, the EventChecker spec, jobs through a fake /proc."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from hpcscope.ingest.security.exec_cache import ExecJobCache
from hpcscope.ingest.security.lines import SecurityEventError
from hpcscope.ingest.security.tetragon import parse_tetragon_lines, tetragon_event_row
from hpcscope.model.security_events import MAY_READ, MAY_WRITE, TETRAGON_EVENT_SCHEMA

SECURITY = Path(__file__).resolve().parents[2] / "fixtures" / "security"
FIXTURES = SECURITY / "tetragon"
PROC = SECURITY / "proc"


def test_kubernetes_exec_export_parses() -> None:
    with (FIXTURES / "events_process_exec_testdata.jsonl").open("rb") as stream:
        result = parse_tetragon_lines(stream, source="events.json")
    assert result.errors == ()
    assert result.table.schema == TETRAGON_EVENT_SCHEMA
    rows = result.table.to_pylist()
    assert [row["event_type"] for row in rows] == ["process_exec"] * 3
    first = rows[0]
    assert first["binary"] == "/usr/bin/netserver"
    assert first["arguments"] == "-D"
    assert first["pid"] == 68790 and first["uid"] == 0 and first["auid"] == 4294967295
    assert first["node_name"] == "my-node"
    assert first["pod_namespace"] == "default" and first["pod_name"] == "tiefighter"
    assert first["container_id"].startswith("containerd://19a02291e106")
    assert first["parent_binary"] == "/usr/bin/containerd-shim-runc-v2"
    # No "time" on the first line: the exec's start_time stands in.
    assert first["event_time_ns"] == 1666062978273546829
    assert rows[1]["event_time_ns"] == 1666062981373327754


def test_host_kprobe_sample_parses() -> None:
    # Published pretty-printed; the export writes one event per line.
    line = orjson.dumps(
        json.loads((FIXTURES / "process_kprobe_host_no_pod_insmod.json").read_text())
    )
    [row] = parse_tetragon_lines([line], source="insmod.json").table.to_pylist()
    assert row["event_type"] == "process_kprobe"
    assert row["function_name"] == "security_kernel_read_file"
    assert row["action"] == "KPROBE_ACTION_POST"
    assert row["file_path"] == "/home/tixxdz/tetragon/contrib/tester-progs/kernel_module_hello.ko"
    assert row["int_args"] == [2]
    assert row["access_mask"] is None  # arg1 of this hook is not a MAY_* mask
    assert row["return_int"] == 0
    assert (row["uid"], row["auid"], row["parent_binary"]) == (0, 1000, "/usr/bin/sudo")
    assert row["pod_name"] is None and row["job_id"] is None


def _scalars(spec: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in spec.items() if isinstance(value, str | int)}


def test_eventchecker_spec_describes_an_exec_we_parse() -> None:
    check = yaml.safe_load((FIXTURES / "eventchecker_process_exec.yaml").read_text())
    [exec_check] = [item["exec"] for item in check["spec"]["checks"]]
    process, parent = _scalars(exec_check["process"]), _scalars(exec_check["parent"])
    pod = exec_check["process"]["pod"]
    # The event the checker accepts, as the export writes it.
    event = {
        "process_exec": {
            "process": {
                "exec_id": "Y2hlY2tlcjox",
                "pid": 4242,
                **process,
                "start_time": "2022-05-11T15:39:12.000000001Z",
                "parent_exec_id": "Y2hlY2tlcjow",
                "pod": {
                    "namespace": pod["namespace"],
                    "name": pod["name"]["value"] + "-7d9c",
                    "container": {"id": "containerd://abc", "name": pod["container"]["name"]},
                },
            },
            "parent": {"exec_id": "Y2hlY2tlcjow", "pid": 4241, **parent},
        },
        "node_name": "gpu01",
        "time": "2022-05-11T15:39:12.000000002Z",
    }
    jobs = ExecJobCache(proc_root=PROC)
    [row] = parse_tetragon_lines(
        [orjson.dumps(event)], source="checker", jobs=jobs
    ).table.to_pylist()
    for key, value in process.items():
        assert row[key] == value, key
    assert row["parent_binary"] == parent["binary"]
    assert row["pod_namespace"] == "curl" and row["pod_name"].startswith("curl")
    assert row["ts"].isoformat() == "2022-05-11T15:39:12"
    assert (row["job_id"], row["job_step"], row["job_source"]) == ("4242", "0", "cgroup")


def _exec(exec_id: str, pid: int, parent: str | None = None) -> bytes:
    process = {"exec_id": exec_id, "pid": pid, "uid": 1000, "binary": "/usr/bin/python3"}
    if parent:
        process["parent_exec_id"] = parent
    return orjson.dumps({"process_exec": {"process": process}, "node_name": "gpu01"})


def _kprobe(exec_id: str, pid: int, path: str, mask: int) -> bytes:
    return orjson.dumps(
        {
            "process_kprobe": {
                "process": {"exec_id": exec_id, "pid": pid, "uid": 1000},
                "function_name": "security_file_permission",
                "policy_name": "hpcscope-weights",
                "action": "KPROBE_ACTION_POST",
                "args": [
                    {"file_arg": {"path": path, "permission": "-rw-r--r--"}},
                    {"int_arg": mask},
                ],
                "return": {"int_arg": 0},
            },
            "node_name": "gpu01",
            "time": "2026-12-01T10:00:00.5Z",
        }
    )


def _exit(exec_id: str, pid: int) -> bytes:
    return orjson.dumps(
        {"process_exit": {"process": {"exec_id": exec_id, "pid": pid}, "status": 3, "signal": ""}}
    )


def test_jobs_resolved_once_inherited_and_evicted() -> None:
    jobs = ExecJobCache(proc_root=PROC)
    lines = [
        _exec("A", 4242),
        _exec("B", 99_999, parent="A"),  # gone before we looked: the parent's job
        _kprobe("A", 4242, "/lustre/scratch/checkpoints/run1/model.safetensors", MAY_READ),
        _kprobe("A", 4242, "/lustre/scratch/checkpoints/run1/model.safetensors", MAY_WRITE),
        _exec("C", 5151),
        _exec("D", 6161),
        _exec("E", 7000),
        _exit("A", 4242),
    ]
    result = parse_tetragon_lines(lines, source="tetragon.log", jobs=jobs)
    assert result.errors == ()
    rows = result.table.to_pylist()
    assert [(r["job_id"], r["job_sluid"], r["job_source"]) for r in rows] == [
        ("4242", None, "cgroup"),
        ("4242", None, "parent"),
        ("4242", None, "cgroup"),
        ("4242", None, "cgroup"),
        ("5151", None, "cgroup"),
        (None, "sEKNKTV3WPV500", "cgroup"),
        (None, None, None),
        ("4242", None, "cgroup"),
    ]
    assert rows[2]["access_mask"] == MAY_READ and rows[3]["access_mask"] == MAY_WRITE
    assert rows[2]["file_mode"] == "-rw-r--r--" and rows[2]["policy_name"] == "hpcscope-weights"
    assert rows[7]["exit_status"] == 3 and rows[7]["exit_signal"] is None
    # One read of /proc per exec_id (A, B, C, D, E), none for the kprobes or the exit.
    assert jobs.proc_reads == 5
    assert "A" not in jobs and "B" in jobs


def test_cache_is_bounded() -> None:
    jobs = ExecJobCache(proc_root=PROC, max_entries=2)
    for exec_id, pid in [("a", 4242), ("b", 5151), ("c", 8080)]:
        jobs.on_exec(exec_id, pid, None)
    assert len(jobs) == 2 and "a" not in jobs and "c" in jobs
    with pytest.raises(ValueError, match="max_entries"):
        ExecJobCache(proc_root=PROC, max_entries=0)


def test_other_event_types_are_kept_and_bad_lines_reported() -> None:
    lines = [
        b'{"process_uprobe": {"process": {"pid": 1}}, "node_name": "n",'
        b' "time": "2024-01-01T00:00:00Z"}',
        b'{"process_lsm": {"process": {"exec_id": "x", "pid": 7, "binary": "/bin/sh"},'
        b' "function_name": "file_open",'
        b' "args": [{"file_arg": {"path": "/etc/munge/munge.key"}}]}}',
        b'{"process_tracepoint": {"process": {"pid": "12"}, "args": [{"size_arg": "4096"}]}}',
        b'{"node_name": "n"}',
        b'{"process_exec": {"process": {"pid": true}}}',
        b"not json",
    ]
    result = parse_tetragon_lines(lines, source="t.log")
    rows = result.table.to_pylist()
    assert [r["event_type"] for r in rows] == [
        "process_uprobe",
        "process_lsm",
        "process_tracepoint",
    ]
    assert rows[0]["event_time_ns"] == 1704067200000000000
    assert rows[1]["file_path"] == "/etc/munge/munge.key"
    assert rows[2]["pid"] == 12 and rows[2]["int_args"] == [4096]
    assert [(e.line, e.field) for e in result.errors] == [
        (4, None),
        (5, "process_exec.process.pid"),
        (6, None),
    ]
    assert result.errors[2].column == 1


@given(line=st.binary(max_size=300))
def test_any_bytes_give_a_row_or_the_typed_error(line: bytes) -> None:
    error: SecurityEventError | None = None
    try:
        row = tetragon_event_row(
            line, source="fuzz", line_number=3, jobs=ExecJobCache(proc_root=PROC)
        )
    except SecurityEventError as exc:
        error = exc
    if error is not None:
        assert error.source == "fuzz" and error.line == 3
    else:
        assert row["event_type"]


_VALUE = (
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.floats(allow_nan=False)
)


@given(
    event_type=st.sampled_from(["process_exec", "process_exit", "process_kprobe", "process_lsm"]),
    process=st.dictionaries(
        st.sampled_from(["exec_id", "pid", "uid", "auid", "binary", "tid", "parent_exec_id"]),
        _VALUE,
    ),
    args=st.lists(
        st.dictionaries(
            st.sampled_from(["file_arg", "int_arg", "sock_arg", "size_arg", "path_arg"]),
            _VALUE | st.dictionaries(st.sampled_from(["path", "permission", "dport"]), _VALUE),
        ),
        max_size=3,
    ),
)
def test_any_shapes_never_raise_untyped(
    event_type: str, process: dict[str, Any], args: list[dict[str, Any]]
) -> None:
    line = json.dumps({event_type: {"process": process, "args": args}}).encode()
    result = parse_tetragon_lines([line], source="fuzz", jobs=ExecJobCache(proc_root=PROC))
    assert result.table.num_rows + len(result.errors) == 1


@given(
    pid=st.integers(1, 2**31),
    uid=st.integers(0, 2**32 - 1),
    binary=st.text(max_size=30),
    path=st.text(max_size=40).map(lambda text: "/" + text),  # Tetragon's paths are absolute
    mask=st.sampled_from([MAY_READ, MAY_WRITE, MAY_READ | MAY_WRITE]),
    nanos=st.integers(0, 999_999_999),
)
def test_kprobe_round_trip(
    pid: int, uid: int, binary: str, path: str, mask: int, nanos: int
) -> None:
    event = {
        "process_kprobe": {
            "process": {"exec_id": "e", "pid": pid, "uid": uid, "binary": binary},
            "function_name": "security_file_permission",
            "args": [{"file_arg": {"path": path}}, {"int_arg": mask}],
        },
        "time": f"2026-12-01T10:00:00.{nanos:09d}Z",
    }
    [row] = parse_tetragon_lines([orjson.dumps(event)], source="rt").table.to_pylist()
    assert (row["pid"], row["uid"], row["binary"]) == (pid, uid, binary)
    assert (row["file_path"], row["access_mask"]) == (path, mask)
    assert row["event_time_ns"] == 1796119200_000_000_000 + nanos


def test_a_path_printed_without_its_leading_slash_is_absolute() -> None:
    """Tetragon 0.8's FollowFD events (the Security Observability report) print d_path
    without its leading slash: ``etc/passwd`` is ``/etc/passwd``."""
    event = {
        "process_kprobe": {
            "process": {"exec_id": "e", "binary": "/usr/bin/vi"},
            "function_name": "__x64_sys_write",
            "args": [{"file_arg": {"path": "etc/passwd"}}, {"size_arg": "627"}],
        },
        "time": "2022-01-19T16:29:01.861Z",
    }
    [row] = parse_tetragon_lines([orjson.dumps(event)], source="t").table.to_pylist()
    assert (row["file_path"], row["int_args"]) == ("/etc/passwd", [627])
