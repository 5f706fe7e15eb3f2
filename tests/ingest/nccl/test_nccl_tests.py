"""nccl-tests output: the header decides the columns; interleaved runs; units."""

from __future__ import annotations

import pytest

from hpcscope.ingest.nccl.logs import parse_nccl_log_text, read_nccl_log
from hpcscope.ingest.nccl.nccl_tests import NcclTestsResult
from tests.ingest.nccl.nccl_fixtures import NCCL


def _result(name: str) -> NcclTestsResult:
    results = read_nccl_log(NCCL / name).nccl_tests
    assert len(results) == 1
    return results[0]


def test_full_h100_table() -> None:
    result = _result("nccl_tests_all_reduce_perf_h100_2node_16gpu.log")
    assert (result.has_root, result.layout, result.error_column) == (True, "header", "#wrong")
    assert (result.nthread, result.ngpus, result.min_bytes, result.max_bytes) == (
        1,
        1,
        8,
        8589934592,
    )
    assert result.step == "2(factor)" and (result.warmup_iters, result.iters) == (5, 20)
    assert len(result.devices) == 16 and {d.host for d in result.devices} == {
        "ztan-mig-235z",
        "ztan-mig-gq73",
    }
    assert len(result.rows) == 31 and result.runs == 1
    last = result.rows[-1]
    assert last.size_bytes == 8589934592 and last.root == -1
    assert last.out_of_place.busbw_bytes_per_second == pytest.approx(338.82e9)
    assert last.out_of_place.time_seconds == pytest.approx(0.047535)
    assert last.in_place is not None and last.in_place.wrong == "0"
    assert result.avg_busbw_bytes_per_second == pytest.approx(70.742e9)
    assert result.out_of_bounds == 0


def test_legacy_header_has_no_root_and_an_error_column() -> None:
    result = _result("nccl_tests_all_reduce_perf_legacy_error_column.log")
    assert (result.has_root, result.error_column, result.layout) == (False, "error", "header")
    assert [d.group for d in result.devices] == [None, None]
    assert result.step == "1048576(bytes)"


def test_units_line_decides_the_root_column_and_runs_interleave() -> None:
    result = _result("nccl_tests_all_reduce_perf_multinode_interleaved_small.log")
    assert (result.has_root, result.layout) == (True, "units")
    assert result.runs == 2
    runs = [(r.size_bytes, r.run) for r in result.rows]
    assert runs == [
        (8, 0), (16, 0), (32, 0), (64, 0), (128, 0), (256, 0),
        (8, 1), (512, 0), (16, 1), (1024, 0),
    ]  # fmt: skip


def test_new_220_header_lines() -> None:
    result = _result("nccl_tests_all_reduce_perf_newheader_v2.20_excerpt.log")
    assert (result.version, result.collective) == ("2.20.0", "all_reduce_perf")
    assert result.has_root is True and len(result.rows) == 4
    assert result.rows[0].out_of_place.algbw_bytes_per_second == pytest.approx(0.23e9)


def test_row_cut_after_the_out_of_place_half() -> None:
    result = _result("nccl_tests_all_reduce_perf_tree_header_rtx4090.log")
    assert len(result.rows) == 1 and result.rows[0].in_place is None
    assert {d.pid for d in result.devices} == {28307}


def test_header_decides_even_when_a_row_could_fit_both_layouts() -> None:
    """With a root column, 9 fields is a cut row; without one, 9 fields is not a row."""
    text = (
        "#       size         count      type   redop     time   algbw   busbw  error"
        "     time   algbw   busbw  error\n"
        "           8             2     float     sum      -1    42.56    0.00    0.00      0\n"
    )
    result = parse_nccl_log_text(text, source="t.log")
    assert result.nccl_tests[0].has_root is False
    assert result.nccl_tests[0].rows == [] and result.unknown_lines == 1


def test_row_shape_decides_without_any_header() -> None:
    text = "#  Rank  0 Group  0 Pid 1 on h device  0 [0x01] GPU\n" + (
        "     1024  256  float  sum  -1  47.44  0.02  0.02  0  53.56  0.02  0.02  0\n"
    )
    result = parse_nccl_log_text(text, source="t.log").nccl_tests[0]
    assert (result.has_root, result.layout, result.rows[0].root) == (True, "row_shape", -1)
