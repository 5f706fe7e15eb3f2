"""Megatron StragglerDetector min/max lines."""

from __future__ import annotations

import pytest

from hpcscope.ingest.nccl.logs import read_nccl_log
from hpcscope.ingest.nccl.megatron_straggler import StragglerExtreme, ThroughputRanking
from tests.ingest.nccl.nccl_fixtures import NCCL


def test_min_max_pairs_in_base_units() -> None:
    log = read_nccl_log(NCCL / "megatron_straggler_detector_minmax.log")
    extremes = {(s.metric, s.which): s for s in log.stragglers if isinstance(s, StragglerExtreme)}
    assert len(extremes) == 14
    assert extremes[("Rtt", "min")].value == pytest.approx(3.45308)
    assert extremes[("Rtt", "min")].rank == 8
    assert extremes[("Utl", "min")].value == pytest.approx(0.97)
    assert extremes[("Clk", "max")].value == pytest.approx(1.98e9)
    assert extremes[("Etpt", "max")].unit == "flops_per_second"
    rankings = [s for s in log.stragglers if isinstance(s, ThroughputRanking)]
    assert [r.side for r in rankings] == ["bottom", "top"]
    assert rankings[0].ranks[0] == pytest.approx((0, 296.02e12))


def test_data_loading_straggler_in_the_evo2_line() -> None:
    log = read_nccl_log(NCCL / "megatron_straggler_detector_hsd_evo2.log")
    extremes = {(s.metric, s.which): s for s in log.stragglers if isinstance(s, StragglerExtreme)}
    assert extremes[("DRtt", "max")].rank == 23
    assert extremes[("DRtt", "max")].value == pytest.approx(0.13033)
    assert extremes[("Utl", "min")].rank == 20
