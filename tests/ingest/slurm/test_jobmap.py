"""The mapping-directory reader follows dcgm-exporter's rules; job records round-trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.ingest.slurm.jobmap import (
    JobMapError,
    parse_job_record,
    read_job_records,
    read_mapping_dir,
    records_snapshot,
    split_mapping_name,
)
from hpcscope.model.schemas import JOB_ALLOCATION_SCHEMA, JOB_SCHEMA
from tests.support.paths import FIXTURES

CAPTURE = FIXTURES / "slurm" / "debian-22.05"


def test_dcgm_exporter_rules(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("101\n")
    (tmp_path / "1").write_text("job1-1\njob2-1")  # no final newline: still two ids
    (tmp_path / "2").write_text("")  # empty: no label
    (tmp_path / "3").write_text("\n0\n")  # blank and "0": idle
    (tmp_path / "4").write_text("707\r\n")  # CRLF: Go's ScanLines drops the \r
    (tmp_path / "2.7").write_text("303\n")  # MIG GPU 2, instance 7
    (tmp_path / "5.x").write_text("no\n")
    (tmp_path / "gpu6").write_text("no\n")
    (tmp_path / ".1.tmp.123").write_text("partial\n")  # a writer's temp file
    (tmp_path / "7").mkdir()  # a directory with a matching name
    snap = read_mapping_dir(tmp_path, node="n01")
    assert snap.jobs_by_gpu() == {
        (0, None): ["101"],
        (1, None): ["job1-1", "job2-1"],
        (2, 7): ["303"],
        (4, None): ["707"],
    }
    assert set(snap.rows.column("node").to_pylist()) == {"n01"}
    assert snap.warnings == []


def test_missing_directory_is_a_warning_not_an_error(tmp_path: Path) -> None:
    snap = read_mapping_dir(tmp_path / "absent")
    assert snap.rows.num_rows == 0
    assert "does not exist" in snap.warnings[0].message


@pytest.mark.parametrize(
    ("name", "expected"),
    [("0", (0, None)), ("12", (12, None)), ("2.0", (2, 0)), ("3.10", (3, 10)), ("a", None),
     ("1.", None), (".1", None), ("1.2.3", None), ("-1", None)],
)  # fmt: skip
def test_mapping_names(name: str, expected: tuple[int, int | None] | None) -> None:
    assert split_mapping_name(name) == expected


@settings(max_examples=100, deadline=None)
@given(
    files=st.dictionaries(
        st.from_regex(r"[0-9]{1,2}(\.[0-9])?|[a-z]{1,3}(\.[a-z0-9])?", fullmatch=True),
        st.lists(st.text(alphabet="0123456789_+abc \r", max_size=6), max_size=4),
        max_size=6,
    )
)
def test_reader_never_crashes_and_only_reads_dcgm_names(files: dict[str, list[str]]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for name, lines in files.items():
            (Path(tmp) / name).write_text("\n".join(lines))
        snap = read_mapping_dir(tmp)
        for gpu, instance in snap.jobs_by_gpu():
            name = f"{gpu}" if instance is None else f"{gpu}.{instance}"
            assert any(split_mapping_name(n) == (gpu, instance) for n in files), name
        assert all(job not in ("", "0") for job in snap.rows.column("job_id").to_pylist())


def test_records_written_by_the_real_prolog_under_slurm() -> None:
    """Records captured from the test cluster (written by deploy/slurm/prolog and epilog)."""
    captured = json.loads((CAPTURE / "job_records_after.json").read_text())
    records = [parse_job_record(text, source=name) for name, text in sorted(captured.items())]
    by_raw = {r.raw_job_id: r for r in records}
    assert by_raw["1"].gpus == ("0", "1") and by_raw["1"].user == "hpcs_alice"
    assert by_raw["8"].job_id == "8"  # 22.05 gives the prolog no array variables
    assert all(r.end_time is not None for r in records)
    assert by_raw["2"].exit_code == 3
    snapshot = records_snapshot(records)
    assert snapshot.jobs.schema == JOB_SCHEMA
    assert snapshot.allocations.schema == JOB_ALLOCATION_SCHEMA
    assert snapshot.allocations.num_rows == sum(len(r.gpus) for r in records)
    assert snapshot.jobs.column("state").null_count == snapshot.jobs.num_rows


def test_bad_records_are_skipped_with_a_positioned_error(tmp_path: Path) -> None:
    good = {
        "format": "hpcscope-job-record/1",
        "raw_job_id": "5",
        "gpus": ["0"],
        "start_time": 1.0,
        "future_field": "ignored",
    }
    (tmp_path / "5.json").write_text(json.dumps(good))
    (tmp_path / "6.json").write_text('{"format": "hpcscope-job-record/1", "raw_')
    (tmp_path / "7.json").write_text(json.dumps({**good, "format": "other/2"}))
    (tmp_path / ".5.json.tmp.1").write_text("partial")
    records = read_job_records(tmp_path)
    assert [r.raw_job_id for r in records.records] == ["5"]
    assert [(Path(w.source).name, w.line is not None) for w in records.warnings] == [
        ("6.json", True),
        ("7.json", False),
    ]
    with pytest.raises(JobMapError):
        parse_job_record({**good, "job_id": "not an id"}, source="x")
