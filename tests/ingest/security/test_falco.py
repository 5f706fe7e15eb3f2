"""Falco JSON alerts: the real sample, the event-generator suites' expected outcomes, bad lines."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import orjson
import yaml
from hypothesis import given
from hypothesis import strategies as st

from hpcscope.ingest.security.falco import (
    FALCO_FIELD_COLUMNS,
    falco_alert_row,
    normalize_priority,
    parse_falco_lines,
)
from hpcscope.ingest.security.lines import SecurityEventError
from hpcscope.model.security_events import FALCO_ALERT_SCHEMA, FALCO_PRIORITIES

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "security" / "falco"
JOB_CGROUPS = (
    "cpuset=/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0 "
    "memory=/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0"
)


def test_docs_sample_maps_every_field() -> None:
    with (FIXTURES / "alert_terminal_shell_falco-website.json").open("rb") as stream:
        result = parse_falco_lines(stream, source="alert.json")
    assert result.errors == ()
    assert result.table.schema == FALCO_ALERT_SCHEMA
    [row] = result.table.to_pylist()
    assert row["rule"] == "Terminal shell in container"
    assert row["priority"] == "critical"
    assert row["priority_level"] == 2
    assert row["event_time_ns"] == 1685022245478445995
    assert row["ts"].isoformat() == "2023-05-25T13:44:05.478445"
    assert row["hostname"] == "falco-xczjd"
    assert row["source"] == "syscall"
    assert row["tags"] == ["container", "mitre_execution", "shell"]
    assert row["proc_name"] == "sh"
    assert row["proc_pname"] == "runc"
    assert row["proc_cmdline"] == "sh -c clear; (bash || ash || sh)"
    assert row["user_name"] == "root"
    assert row["user_loginuid"] == -1
    assert row["container_id"] == "ee97d9c4186f"
    assert row["container_image"] == "docker.io/library/alpine"
    assert row["job_id"] is None  # a Kubernetes pod, not a Slurm job
    assert row["source_line"] == 1
    assert orjson.loads(row["raw"])["rule"] == row["rule"]


def _expand(value: Any, item: dict[str, Any]) -> Any:
    if isinstance(value, str):
        return re.sub(r"%\{ item\.(\w+) \}", lambda m: str(item[m.group(1)]), value)
    if isinstance(value, dict):
        return {key: _expand(inner, item) for key, inner in value.items()}
    return value


def _suite_cases(name: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(rule, priority, expected output fields) for every matrix case of a suite."""
    suite = yaml.safe_load((FIXTURES / name).read_text())
    cases = []
    for test in suite["tests"]:
        outcome = test["expectedOutcome"]
        for matrix in test["cases"]:
            assert matrix["strategy"] == "matrix"
            keys = list(matrix["values"])
            for combo in itertools.product(*(matrix["values"][key] for key in keys)):
                item = dict(zip(keys, combo, strict=True))
                fields = _expand(outcome["outputFields"], item)
                cases.append((test["rule"], outcome["priority"], fields))
    return cases


def test_event_generator_suites_expected_alerts_parse() -> None:
    cases = _suite_cases("evtgen_suite_detect_release_agent_file_container_escapes.yaml")
    cases += _suite_cases("evtgen_suite_drop_and_execute_new_binary_in_container.yaml")
    assert len(cases) == 12 + 3
    lines = []
    for index, (rule, priority, fields) in enumerate(cases):
        # What Falco prints for the case: the suite's expected fields, a time, and the
        # thread.cgroups hpcscope's rules append (the test host runs in a Slurm job here).
        output_fields = {
            **fields,
            "evt.time": 1_700_000_000_000_000_000 + index,
            "thread.cgroups": JOB_CGROUPS,
        }
        alert = {
            "hostname": "gpu01",
            "priority": priority.capitalize(),
            "rule": rule,
            "source": "syscall",
            "time": "2023-11-14T22:13:20.000000000Z",
            "output_fields": output_fields,
        }
        lines.append(orjson.dumps(alert))
    result = parse_falco_lines(lines, source="evtgen")
    assert result.errors == ()
    rows = result.table.to_pylist()
    for row, (rule, _priority, fields) in zip(rows, cases, strict=True):
        assert row["rule"] == rule
        assert row["priority"] == "critical"
        assert (row["job_id"], row["job_step"]) == ("4242", "0")
        for name, value in fields.items():
            assert row[FALCO_FIELD_COLUMNS[name]] == value, name


def test_optional_properties_absent_and_na_fields() -> None:
    line = orjson.dumps(
        {
            "rule": "PTRACE attached to process",
            "priority": "Warning",
            "time": "2024-01-02T03:04:05.123456789+01:00",
            "output_fields": {"proc.pid": "<NA>", "fd.name": None, "user.uid": 1000},
        }
    )
    row = falco_alert_row(line, source="s", line_number=7)
    assert row["source"] is None and row["tags"] is None and row["output"] is None
    assert row["event_time_ns"] == 1704161045123456789
    assert row["proc_pid"] is None and row["fd_name"] is None and row["user_uid"] == 1000


def test_malformed_lines_are_errors_and_the_stream_goes_on() -> None:
    good = orjson.dumps({"rule": "r", "priority": "Notice", "output_fields": {"evt.time": 5}})
    lines = [
        good,
        b'{"rule": "r", "priority": ',
        b"",
        b"[]",
        b'{"priority": "Notice", "output_fields": {"evt.time": 5}}',
        b'{"rule": "r", "priority": "Loud", "output_fields": {"evt.time": 5}}',
        b'{"rule": "r", "priority": "Debug"}',
        good,
    ]
    result = parse_falco_lines(lines, source="/var/log/falco.json")
    assert result.table.num_rows == 2
    assert result.lines == 7
    assert [row["source_line"] for row in result.table.to_pylist()] == [1, 8]
    described = [error.describe() for error in result.errors]
    assert described[0].startswith("/var/log/falco.json:2:26: not JSON: input data was truncated")
    assert [(e.line, e.field) for e in result.errors] == [
        (2, None),
        (4, None),
        (5, "rule"),
        (6, "priority"),
        (7, "time"),
    ]


def test_priorities_normalise() -> None:
    assert [normalize_priority(p.capitalize()) for p in FALCO_PRIORITIES] == list(FALCO_PRIORITIES)
    assert normalize_priority("Info") == "informational"
    assert normalize_priority("WARNING") == "warning"
    assert normalize_priority("loud") is None


@given(line=st.binary(max_size=300))
def test_any_bytes_give_a_row_or_the_typed_error(line: bytes) -> None:
    error: SecurityEventError | None = None
    try:
        row = falco_alert_row(line, source="fuzz", line_number=1)
    except SecurityEventError as exc:
        error = exc
    if error is not None:
        assert error.source == "fuzz" and error.line == 1
    else:
        assert row["rule"] is not None


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(fields=st.dictionaries(st.sampled_from(sorted(FALCO_FIELD_COLUMNS)), _JSONISH))
def test_any_output_field_values_never_raise_untyped(fields: dict[str, Any]) -> None:
    line = json.dumps({"rule": "r", "priority": "Alert", "output_fields": fields}).encode()
    try:
        result = parse_falco_lines([line], source="fuzz")
    except Exception as exc:  # pragma: no cover - the assertion names what escaped
        raise AssertionError(f"untyped {type(exc).__name__}: {exc}") from exc
    assert result.lines == 1 and result.table.num_rows + len(result.errors) == 1


@given(
    rule=st.text(min_size=1, max_size=40),
    priority=st.sampled_from(FALCO_PRIORITIES),
    time_ns=st.integers(0, 2**62),
    pid=st.integers(0, 2**31),
    name=st.text(max_size=20).filter(lambda s: s != "<NA>"),
    path=st.text(max_size=40).filter(lambda s: s != "<NA>"),
    tags=st.lists(st.text(max_size=10), max_size=4),
    job=st.integers(1, 2**32 - 1),
)
def test_alert_round_trip(
    rule: str,
    priority: str,
    time_ns: int,
    pid: int,
    name: str,
    path: str,
    tags: list[str],
    job: int,
) -> None:
    cgroups = f"cpuset=/slurm/uid_1/job_{job}/step_0/task_0"
    alert = {
        "rule": rule,
        "priority": priority.capitalize(),
        "tags": tags,
        "output_fields": {
            "evt.time": time_ns,
            "proc.pid": pid,
            "proc.name": name,
            "fd.name": path,
            "thread.cgroups": cgroups,
        },
    }
    [row] = parse_falco_lines([orjson.dumps(alert)], source="rt").table.to_pylist()
    assert (row["rule"], row["priority"], row["event_time_ns"]) == (rule, priority, time_ns)
    assert (row["proc_pid"], row["proc_name"], row["fd_name"]) == (pid, name, path)
    assert row["tags"] == tags and row["job_id"] == str(job) and row["cgroups"] == cgroups


@given(
    garbage=st.lists(st.binary(max_size=60).filter(lambda b: b"\n" not in b), max_size=8),
    positions=st.lists(st.integers(0, 8), max_size=8),
)
def test_good_alerts_survive_any_garbage_around_them(
    garbage: list[bytes], positions: list[int]
) -> None:
    good = [
        orjson.dumps({"rule": f"r{n}", "priority": "Error", "output_fields": {"evt.time": n}})
        for n in range(len(positions))
    ]
    lines: list[bytes] = list(garbage)
    for n, position in enumerate(positions):
        lines.insert(min(position, len(lines)), good[n])
    result = parse_falco_lines(b"\n".join(lines).split(b"\n"), source="mixed")
    rules = result.table.column("rule").to_pylist()
    assert [rule for rule in rules if rule in {f"r{n}" for n in range(len(good))}] == [
        f"r{n}" for n in sorted(range(len(positions)), key=lambda n: lines.index(good[n]))
    ]
    assert result.table.num_rows + len(result.errors) == result.lines
    assert result.lines == sum(1 for line in lines if line.strip())
