"""Lustre job_stats: both real layouts, job id extraction, errors with positions, round trip."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.ingest.exporters.lustre_jobstats import (
    DEFAULT_JOBID_PATTERN,
    JobStatsFormatError,
    compile_jobid_pattern,
    parse_job_stats,
)
from hpcscope.model.errors import SourceError
from hpcscope.model.schemas import LUSTRE_JOB_STATS_SCHEMA
from tests.support.paths import FIXTURES

LCTL = FIXTURES / "lustre" / "lctl_get_param_job_stats_lustre2.14_slurm_jobids_whamcloud.txt"
PROC = FIXTURES / "lustre" / "mdt_job_stats_lustre_exporter_fixture.yaml"

OST_OPS = [
    "read_bytes",
    "write_bytes",
    "read",
    "write",
    "getattr",
    "setattr",
    "punch",
    "sync",
    "destroy",
    "create",
    "statfs",
    "get_info",
    "set_info",
    "quotactl",
    "prealloc",
]


def _row(table: pa.Table, job_id_raw: str, operation: str) -> dict[str, object]:
    rows = [
        r
        for r in table.to_pylist()
        if r["job_id_raw"] == job_id_raw and r["operation"] == operation
    ]
    assert len(rows) == 1
    row: dict[str, object] = rows[0]
    return row


def test_lctl_2_14_output() -> None:
    table = parse_job_stats(LCTL.read_text(), source=str(LCTL), server="es01a-oss1")
    assert table.schema == LUSTRE_JOB_STATS_SCHEMA
    assert table.num_rows == 16 * 15
    assert set(table["target"].to_pylist()) == {"es01a-OST0001"}
    assert set(table["component"].to_pylist()) == {"ost"}
    assert set(table["server"].to_pylist()) == {"es01a-oss1"}
    assert table["operation"].to_pylist()[:15] == OST_OPS
    assert len(set(table["job_id_raw"].to_pylist())) == 16

    write_bytes = _row(table, "SLURM_JOB10:0:es18kxe-co-client", "write_bytes")
    assert write_bytes == {
        "ts": datetime(2024, 8, 8, 10, 57, 27, 887515),  # 1723114647.887515895, truncated
        "server": "es01a-oss1",
        "target": "es01a-OST0001",
        "component": "ost",
        "job_id_raw": "SLURM_JOB10:0:es18kxe-co-client",
        "job_id": "10",
        "host": "es18kxe-co-client",
        "operation": "write_bytes",
        "unit": "bytes",
        "samples": 861.0,
        "sum_value": 11025514496.0,
        "min_value": 24576.0,
        "max_value": 16777216.0,
        "start_ts": datetime(2024, 8, 8, 7, 27, 5, 57286),  # 1723102025.057286226
    }
    write = _row(table, "SLURM_JOB10:0:es18kxe-co-client", "write")
    assert (write["unit"], write["samples"], write["sum_value"], write["max_value"]) == (
        "usecs",
        861.0,
        7304967.0,
        34699.0,
    )
    bare = _row(table, "SLURM_JOB97", "write_bytes")  # the unquoted form
    assert (bare["job_id"], bare["host"], bare["samples"], bare["sum_value"]) == (
        "97",
        None,
        14.0,
        201359360.0,
    )
    assert bare["ts"] == datetime(2024, 8, 8, 10, 54, 45, 382793)
    jobs = {(r["job_id_raw"], r["job_id"], r["host"]) for r in table.to_pylist()}
    assert ("SLURM_JOB35:0:es18kxe-co-client", "35", "es18kxe-co-client") in jobs
    assert {job for _, job, _ in jobs} == {"10", "20", "29", "35", "51", "59", "79", "97"}


def test_pre_2_14_proc_file() -> None:
    table = parse_job_stats(
        PROC.read_text(),
        source=str(PROC),
        server="mds1",
        target="lustrefs-MDT0000",
        component="mdt",
    )
    assert table.num_rows == 15 * 16
    rows = table.to_pylist()
    assert {r["job_id"] for r in rows} == {str(n) for n in range(43, 58)}
    assert {r["job_id_raw"] for r in rows} == {r["job_id"] for r in rows}
    assert {r["host"] for r in rows} == {None}
    assert {r["unit"] for r in rows} == {"reqs"}
    assert {r["target"] for r in rows} == {"lustrefs-MDT0000"}
    assert {r["component"] for r in rows} == {"mdt"}
    assert all(r["sum_value"] is None and r["start_ts"] is None for r in rows)
    setattr_43 = _row(table, "43", "setattr")
    assert setattr_43["samples"] == 1.0
    assert setattr_43["ts"] == datetime(2017, 11, 15, 21, 37, 17)  # 1510781837
    assert _row(table, "47", "open")["ts"] == datetime(2017, 11, 15, 21, 37, 26)
    assert sum(r["samples"] for r in rows) == 15.0  # one setattr per job, nothing else


def test_headerless_file_without_target_keeps_them_null() -> None:
    table = parse_job_stats(PROC.read_text(), source="job_stats", server="mds1")
    assert set(table["target"].to_pylist()) == {None}
    assert set(table["component"].to_pylist()) == {None}


@pytest.mark.parametrize(
    ("raw", "job", "host"),
    [
        ("SLURM_JOB10:0:es18kxe-co-client", "10", "es18kxe-co-client"),
        ("SLURM_JOB10", "10", None),
        ("12345", "12345", None),
        ("12345:1000:gpu01", "12345", "gpu01"),
        ("12345:1000", "12345", None),
        ("bash:0:host", None, None),
        ("bash.0", None, None),
        ("python.1000", None, None),
        ("12345abc", None, None),
    ],
)
def test_default_jobid_pattern(raw: str, job: str | None, host: str | None) -> None:
    text = (
        f'job_stats:\n- job_id: "{raw}"\n  snapshot_time: 5\n  open: {{ samples: 1, unit: reqs }}\n'
    )
    row = parse_job_stats(text, source="t", server="s").to_pylist()[0]
    assert (row["job_id_raw"], row["job_id"], row["host"]) == (raw, job, host)


def test_site_pattern_for_another_jobid_name() -> None:
    # jobid_name=%H.%j: host first, dot separated
    text = (
        "job_stats:\n- job_id: gpu07.4242\n  snapshot_time: 5\n  open: { samples: 1, unit: reqs }\n"
    )
    row = parse_job_stats(
        text, source="t", server="s", jobid_pattern=r"(?P<host>[^.]+)\.(?P<job>\d+)"
    ).to_pylist()[0]
    assert (row["job_id"], row["host"]) == ("4242", "gpu07")
    with pytest.raises(ValueError, match="job"):
        compile_jobid_pattern(r"(?P<host>\w+)")
    with pytest.raises(ValueError, match="regular expression"):
        compile_jobid_pattern(r"(?P<job>")
    assert compile_jobid_pattern(DEFAULT_JOBID_PATTERN).groupindex.keys() == {"job", "host"}


def test_several_targets_and_an_empty_one() -> None:
    text = (
        "obdfilter.fs-OST0000.job_stats=\njob_stats:\n"
        "obdfilter.fs-OST0001.job_stats=\njob_stats:\n- job_id: 7\n  snapshot_time: 9\n"
        "  read: { samples: 2, unit: usecs, min: 1, max: 3, sum: 4 }\n"
        "mdt.fs-MDT0000.job_stats=\njob_stats:\n- job_id: 7\n  snapshot_time: 9\n"
        "  open: { samples: 3, unit: usecs, min: 1, max: 3, sum: 5 }\n"
    )
    rows = parse_job_stats(text, source="t", server="s").to_pylist()
    assert [(r["target"], r["component"], r["operation"]) for r in rows] == [
        ("fs-OST0001", "ost", "read"),
        ("fs-MDT0000", "mdt", "open"),
    ]


@pytest.mark.parametrize(
    ("text", "line", "column", "message"),
    [
        (
            "job_stats:\n- job_id: 1\n  snapshot_time: 5\n  this is not job_stats\n",
            4,
            3,
            "expected",
        ),
        (
            "job_stats:\n- job_id: 1\n  snapshot_time: 5\n  open: { samples: many, unit: reqs }\n",
            4,
            20,
            "samples must be a number",
        ),
        (
            "job_stats:\n- job_id: 1\n  snapshot_time: soon\n",
            3,
            18,
            "expected seconds",
        ),
        ("job_stats:\n- job_id: 1\n  colour: blue\n", 3, 3, "unknown key 'colour'"),
        ("job_stats:\n  open: { samples: 1, unit: reqs }\n", 2, 3, "outside"),
        ("job_stats:\n- job_id: 1\n  open: { samples: 1, unit: reqs }\n", 2, 1, "snapshot_time"),
        (
            "job_stats:\n- job_id: 1\n  snapshot_time: 5\n  open: { samples: 1, unit: reqs\n",
            4,
            33,  # just past the end of the line, where the '}' is missing
            "unterminated",
        ),
        (
            "job_stats:\n- job_id: 1\n  snapshot_time: 5\n  open: { unit: reqs }\n",
            4,
            9,
            "without 'samples'",
        ),
        (
            "job_stats:\n- job_id: 1\n  snapshot_time: 5\n"
            "  w: { samples: 1, unit: bytes, hist: { 4K: x } }\n",
            4,
            41,
            "bad hist bucket",
        ),
        ('job_stats:\n- job_id: "1\n', 2, 11, "unterminated quoted"),
        ("llite.fs-ffff.job_stats=\n", 1, 1, "unknown parameter 'llite'"),
    ],
)
def test_errors_name_source_line_and_column(
    text: str, line: int, column: int, message: str
) -> None:
    with pytest.raises(JobStatsFormatError, match=message) as caught:
        parse_job_stats(text, source="spool/oss1.job_stats", server="oss1")
    error = caught.value
    assert isinstance(error, SourceError)
    assert (error.source, error.line, error.column) == ("spool/oss1.job_stats", line, column)
    assert error.describe().startswith(f"spool/oss1.job_stats:{line}:{column}: ")


def test_an_error_keeps_the_complete_entries_before_it() -> None:
    good = LCTL.read_text()
    with pytest.raises(JobStatsFormatError) as caught:
        parse_job_stats(good + "- job_id: 9\n  snapshot_time: x\n", source="t", server="s")
    assert caught.value.line == good.count("\n") + 2
    partial = caught.value.partial
    assert partial is not None and partial.num_rows == 16 * 15
    with pytest.raises(JobStatsFormatError) as first:
        parse_job_stats("job_stats:\n- job_id: 1\n  bad line\n", source="t", server="s")
    assert first.value.partial is None


# ---------------------------------------------------------------- round trip


@dataclass(frozen=True)
class Op:
    name: str
    unit: str
    samples: int
    minimum: int
    maximum: int
    total: int
    hist: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Entry:
    job_id: str
    quoted: bool
    snapshot: tuple[int, int]
    start: tuple[int, int]
    ops: tuple[Op, ...]


COUNTS = st.integers(0, 2**50)
OPS = st.builds(
    Op,
    name=st.from_regex(r"[a-z][a-z_]{0,14}", fullmatch=True),
    unit=st.sampled_from(["bytes", "usecs", "reqs"]),
    samples=COUNTS,
    minimum=COUNTS,
    maximum=COUNTS,
    total=COUNTS,
    hist=st.lists(
        st.tuples(st.sampled_from(["4K", "64K", "1M", "16M"]), st.integers(0, 10**6)), max_size=4
    ).map(tuple),
)
JOB_IDS = st.one_of(
    st.integers(1, 10**9).map(str),
    st.tuples(
        st.integers(1, 10**9),
        st.integers(0, 65535),
        st.from_regex(r"[a-z][\w-]{0,20}", fullmatch=True),
    ).map(lambda t: f"{t[0]}:{t[1]}:{t[2]}"),
    st.integers(1, 10**6).map(lambda n: f"SLURM_JOB{n}"),
    st.from_regex(r"[a-z]{1,8}\.[0-9]{1,5}", fullmatch=True),
)
TIMES = st.tuples(st.integers(0, 4_000_000_000), st.integers(0, 999_999_999))
ENTRIES = st.builds(
    Entry,
    job_id=JOB_IDS,
    quoted=st.booleans(),
    snapshot=TIMES,
    start=TIMES,
    ops=st.lists(OPS, min_size=1, max_size=5, unique_by=lambda op: op.name).map(tuple),
)


def render(target: str, entries: list[Entry]) -> str:
    """The 2.14 lctl layout, column padding included."""
    lines = [f"obdfilter.{target}.job_stats=", "job_stats:"]
    for entry in entries:
        job = f'"{entry.job_id}"' if entry.quoted else entry.job_id
        lines.append(f"- job_id:          {job}")
        lines.append(f"  snapshot_time:   {entry.snapshot[0]}.{entry.snapshot[1]:09d} secs.nsecs")
        lines.append(f"  start_time:      {entry.start[0]}.{entry.start[1]:09d} secs.nsecs")
        lines.append("  elapsed_time:    12.000000001 secs.nsecs")
        for op in entry.ops:
            hist = ", ".join(f"{size}: {count}" for size, count in op.hist)
            lines.append(
                f"  {op.name + ':':<16} {{ samples: {op.samples:>11}, unit: {op.unit}, "
                f"min: {op.minimum:>8}, max: {op.maximum:>8}, sum: {op.total:>16}, "
                f"sumsq: {op.total * 3:>18}, hist: {{ {hist} }} }}"
            )
    return "\n".join(lines) + "\n"


def _micros(t: tuple[int, int]) -> datetime:
    """``secs.nsecs`` as stored: naive UTC, truncated to the microsecond."""
    return datetime(1970, 1, 1) + timedelta(seconds=t[0], microseconds=t[1] // 1000)


@settings(max_examples=60, deadline=None)
@given(
    target=st.from_regex(r"[a-z0-9]{1,8}-OST[0-9a-f]{4}", fullmatch=True),
    entries=st.lists(ENTRIES, min_size=0, max_size=6),
)
def test_round_trip(target: str, entries: list[Entry]) -> None:
    table = parse_job_stats(render(target, entries), source="gen", server="oss")
    expected = []
    pattern = re.compile(DEFAULT_JOBID_PATTERN)
    for entry in entries:
        match = pattern.fullmatch(entry.job_id)
        for op in entry.ops:
            expected.append(
                {
                    "ts": _micros(entry.snapshot),
                    "server": "oss",
                    "target": target,
                    "component": "ost",
                    "job_id_raw": entry.job_id,
                    "job_id": match.group("job") if match else None,
                    "host": match.group("host") if match else None,
                    "operation": op.name,
                    "unit": op.unit,
                    "samples": float(op.samples),
                    "sum_value": float(op.total),
                    "min_value": float(op.minimum),
                    "max_value": float(op.maximum),
                    "start_ts": _micros(entry.start),
                }
            )
    assert table.to_pylist() == expected


def test_a_2_14_mdt_entry_without_a_slurm_job() -> None:
    path = FIXTURES / "lustre" / "mdt_job_stats_entry_lustre2.14_whamcloud.txt"
    table = parse_job_stats(
        path.read_text(), source=str(path), server="mds1", target="fs-MDT0000", component="mdt"
    )
    assert table.num_rows == 24  # MDT operations of 2.14, parallel_rename_* and migrate included
    statfs = _row(table, ":988:ds88", "statfs")
    assert (statfs["job_id"], statfs["host"], statfs["unit"]) == (None, None, "usecs")
    assert (statfs["samples"], statfs["sum_value"], statfs["min_value"]) == (9372.0, 148887.0, 8.0)
    assert statfs["ts"] == datetime(2024, 7, 15, 13, 2, 14, 873002)
    assert "parallel_rename_file" in table["operation"].to_pylist()
