"""GPU idle / compute / non-compute per rank against HolisticTraceAnalysis 0.5.0's figures
(computed once with HTA in the bench venv; listed in tests/fixtures/traces/PROVENANCE.md)."""

from __future__ import annotations

import pytest

from hpcscope.service.traces.pipeline import analyze
from tests.support.paths import FIXTURES

# rank: (idle, compute, non_compute, kernel) microseconds, HTA 0.5.0 get_temporal_breakdown
HTA_2RANK = {0: (321378, 106252, 172428, 600058), 1: (328671, 135548, 136455, 600674)}
HTA_PARAM = {
    0: (6419, 1034, 5556, 13009),
    1: (6428, 1246, 11075, 18749),
    2: (7046, 1068, 3236, 11350),
    3: (8145, 1240, 9468, 18853),
    4: (8887, 1126, 6576, 16589),
    5: (9121, 1041, 6230, 16392),
    6: (7051, 1051, 3308, 11410),
    7: (8308, 1059, 1600, 10967),
}


@pytest.mark.parametrize(
    ("path", "expected"),
    [("hta_trace_filter_2rank", HTA_2RANK), ("param_dlrm_8rank/dlrm_kineto.tar.gz", HTA_PARAM)],
)
def test_gpu_totals_within_one_percent_of_hta(
    path: str, expected: dict[int, tuple[int, ...]]
) -> None:
    result = analyze([FIXTURES / "traces" / path], workers=2)
    got = {t.rank: t.gpu for t in result.timelines}
    assert sorted(got) == sorted(expected)
    for rank, (idle, compute, non_compute, kernel) in expected.items():
        gpu = got[rank]
        assert gpu is not None
        assert gpu.idle_seconds * 1e6 == pytest.approx(idle, rel=0.01)
        assert gpu.compute_seconds * 1e6 == pytest.approx(compute, rel=0.01)
        assert gpu.non_compute_seconds * 1e6 == pytest.approx(non_compute, rel=0.01)
        assert gpu.kernel_seconds * 1e6 == pytest.approx(kernel, rel=0.01)


def test_hta_sample_is_partial_and_reports_skew() -> None:
    result = analyze([FIXTURES / "traces" / "hta_trace_filter_2rank"], workers=1)
    assert result.table.partial  # 2 of 128 ranks
    assert result.table.steps == (551, 552)
    assert any("126 of 128 ranks have no trace" in n for n in result.table.notes)
    assert any("clock skew" in n for n in result.table.notes)


def test_param_phases_add_up() -> None:
    result = analyze([FIXTURES / "traces" / "param_dlrm_8rank" / "dlrm_kineto.tar.gz"], workers=2)
    table = result.table
    assert table.ranks == tuple(range(8))
    assert table.seconds.sum(axis=2) == pytest.approx(table.step_seconds, abs=1e-9)


def test_param_names_the_rank_the_others_wait_for() -> None:
    # One profiled step; rank 7 starts it last and arrives last at 6 of the 8 collectives
    # (the others wait 0.5-7.6 ms for it in the first all-to-all). HTA 0.5.0's
    # get_potential_stragglers ranks it first as well ([7] with num_candidates=1).
    result = analyze([FIXTURES / "traces" / "param_dlrm_8rank" / "dlrm_kineto.tar.gz"], workers=1)
    [straggler] = result.report.stragglers
    assert (straggler.rank, straggler.phase) == (7, "forward")
    assert straggler.score < 0.75
    assert straggler.excess_seconds_per_step == pytest.approx(0.0046, abs=0.0003)
    assert straggler.unexplained_seconds_per_step > straggler.excess_seconds_per_step / 2
    assert "began the step later" in straggler.hint
    assert result.report.what_if.worst_rank == 7
    ranked = sorted(result.report.scores, key=lambda r: result.report.scores[r])
    assert ranked[:3] == [7, 2, 6]  # HTA's candidates with num_candidates=3: [2, 7, 6]
