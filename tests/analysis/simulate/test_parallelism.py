"""The expert all-to-all and pipeline-bubble cost terms: formulas, properties, errors."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcscope.analysis.simulate.collectives import CollectiveModelError, Fabric
from hpcscope.analysis.simulate.parallelism import (
    alltoall_cost,
    overlap,
    pipeline_bubble_ratio,
    pipeline_bubble_seconds,
)
from hpcscope.model.nccl_latency import NcclLatencies, default_nccl_latencies

#: The default cluster's fabric: 8 H100 per node (NVLink as NCCL sees it), 8 NDR NICs.
H100 = Fabric(
    gpus_per_node=8,
    intra_bytes_per_second=370.8e9,
    intra_link="nvlink",
    nic_bytes_per_second=50e9,
    nics_per_node=8,
)
LAT: NcclLatencies = default_nccl_latencies()

sizes = st.floats(min_value=0, max_value=1e11, allow_nan=False)
ranks = st.integers(min_value=1, max_value=1024)


def test_one_node_is_the_nccl_tests_formula() -> None:
    """nccl-tests: busbw = algbw (n-1)/n, so t = (n-1)/n S / B + latency on one NVLink node."""
    size = 4096 * 7168 * 8 * 3  # DeepEP's DeepSeek-V3 layer: FP8 dispatch + BF16 combine
    cost = alltoall_cost(size, 8, H100, LAT)
    latency = LAT.base_seconds("ring", "Simple") + LAT.hop_seconds("nvlink", "ring", "Simple")
    assert cost.bandwidth_seconds == pytest.approx(7 / 8 * size / 370.8e9)
    assert cost.latency_seconds == pytest.approx(latency)
    assert cost.inter_seconds == 0 and cost.nodes == 1
    big = alltoall_cost(1e12, 8, H100, LAT)
    assert big.bus_bandwidth_bytes_per_second == pytest.approx(370.8e9, rel=1e-4)


def test_two_nodes_are_bound_by_the_nics() -> None:
    size = 1e9
    cost = alltoall_cost(size, 16, H100, LAT)
    # 7/16 of the buffer over NVLink, 8/16 over the GPU's NIC (8 NICs for 8 GPUs)
    assert cost.intra_seconds == pytest.approx(7 / 16 * size / 370.8e9)
    assert cost.inter_seconds == pytest.approx(8 / 16 * size / 50e9)
    assert cost.bandwidth_seconds == cost.inter_seconds
    assert cost.latency_seconds == pytest.approx(
        LAT.base_seconds("ring", "Simple") + LAT.hop_seconds("network", "ring", "Simple")
    )


@given(a=sizes, b=sizes, n=ranks)
def test_alltoall_is_monotonic_in_bytes(a: float, b: float, n: int) -> None:
    small, large = sorted((a, b))
    assert alltoall_cost(small, n, H100, LAT).seconds <= alltoall_cost(large, n, H100, LAT).seconds


@given(size=sizes, n=ranks)
def test_alltoall_is_latency_plus_a_bandwidth_term(size: float, n: int) -> None:
    cost = alltoall_cost(size, n, H100, LAT)
    assert cost.intra_seconds == pytest.approx((min(n, 8) - 1) / n * size / 370.8e9)
    assert cost.bandwidth_seconds == max(cost.intra_seconds, cost.inter_seconds)
    if n == 1:
        assert cost.seconds == 0
    if cost.nodes == 1:  # inside a node the bus bandwidth never beats NVLink
        assert cost.bus_bandwidth_bytes_per_second <= H100.intra_bytes_per_second * (1 + 1e-9)


@given(size=st.floats(min_value=1e6, max_value=1e11), nodes=st.integers(min_value=2, max_value=64))
def test_more_full_nodes_send_more_over_the_nics(size: float, nodes: int) -> None:
    """On full nodes, a larger share (n-g)/n of the buffer crosses the NICs as nodes are added."""
    fewer = alltoall_cost(size, 8 * (nodes - 1), H100, LAT)
    more = alltoall_cost(size, 8 * nodes, H100, LAT)
    assert more.inter_seconds > fewer.inter_seconds
    assert more.seconds >= fewer.seconds


@given(
    p=st.integers(min_value=1, max_value=64),
    m=st.integers(min_value=1, max_value=4096),
    v=st.integers(min_value=1, max_value=8),
)
def test_bubble_ratio_and_seconds_agree(p: int, m: int, v: int) -> None:
    ratio = pipeline_bubble_ratio(p, m, v)
    assert 0 <= ratio < 1
    assert ratio == pytest.approx((p - 1) / (v * m + p - 1))
    bubble = pipeline_bubble_seconds(1.0, p, m, v)
    assert bubble == pytest.approx((p - 1) / (v * m))
    # bubble / (compute + bubble) is the ratio: both forms of Narayanan et al.'s §2.2
    assert bubble / (1.0 + bubble) == pytest.approx(ratio)
    assert pipeline_bubble_ratio(p, m + 1, v) <= ratio  # more micro-batches, smaller bubble
    assert pipeline_bubble_ratio(p + 1, m, v) >= ratio  # more stages, larger bubble


@given(p=st.integers(min_value=2, max_value=64))
def test_bubble_vanishes_as_microbatches_grow(p: int) -> None:
    ratios = [pipeline_bubble_ratio(p, m) for m in (1, 10, 100, 10_000, 10**8)]
    assert ratios == sorted(ratios, reverse=True)
    assert ratios[-1] < 1e-6 * p
    assert pipeline_bubble_ratio(1, 1) == 0


def test_megatron_worked_bubble() -> None:
    """The formulas of Narayanan et al. 2021 §2.2 worked for p = 8 stages and m = 32
    micro-batches: (p-1)/m of the ideal time; interleaving v = 2 chunks halves it."""
    assert pipeline_bubble_seconds(1.0, 8, 32) == pytest.approx(7 / 32)
    assert pipeline_bubble_seconds(1.0, 8, 32, 2) == pytest.approx(7 / 64)
    assert pipeline_bubble_ratio(8, 32) == pytest.approx(7 / 39)


@given(
    comm=st.floats(min_value=0, max_value=1.0),
    a=st.floats(min_value=0, max_value=1.0),
    b=st.floats(min_value=0, max_value=1.0),
)
def test_overlap_splits_the_communication(comm: float, a: float, b: float) -> None:
    low, high = sorted((a, b))
    split = overlap(comm, low, overlapped=True)
    assert split.hidden_seconds + split.exposed_seconds == pytest.approx(comm)
    assert 0 <= split.hidden_seconds <= min(comm, low)
    # longer GEMMs hide at least as much
    assert overlap(comm, high, overlapped=True).exposed_seconds <= split.exposed_seconds
    assert overlap(comm, low, overlapped=False).exposed_seconds == comm


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: alltoall_cost(1e9, 0, H100, LAT), "expert_parallel_ranks"),
        (lambda: alltoall_cost(-1.0, 8, H100, LAT), "alltoall_bytes"),
        (lambda: alltoall_cost(math.nan, 8, H100, LAT), "alltoall_bytes"),
        (
            lambda: alltoall_cost(1e9, 16, Fabric(8, 370.8e9, "nvlink", 0.0, 0), LAT),
            "nics_per_node",
        ),
        (lambda: pipeline_bubble_ratio(0, 4), "pipeline_stages"),
        (lambda: pipeline_bubble_ratio(4, 0), "microbatches"),
        (lambda: pipeline_bubble_seconds(1.0, 4, 4, 0), "virtual_stages"),
        (lambda: pipeline_bubble_seconds(-1.0, 4, 4), "compute_seconds"),
        (lambda: overlap(-1.0, 1.0, overlapped=True), "alltoall_seconds"),
    ],
)
def test_bad_parameters_name_their_field(call: Callable[[], object], field: str) -> None:
    with pytest.raises(CollectiveModelError) as info:
        call()
    assert info.value.field == field
