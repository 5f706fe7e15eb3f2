"""AllReduce cost models against the reference's worked table and a measured nccl-tests run."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from hpcscope.analysis.simulate.collectives import (
    ALLREDUCE_ALGORITHMS,
    AllReduceAlgorithm,
    CollectiveModelError,
    Fabric,
    allreduce_cost,
    gradient_bytes,
    message_bytes_for,
)
from hpcscope.model.errors import SourceError
from hpcscope.model.nccl_latency import (
    NcclLatencies,
    default_nccl_latencies,
    load_nccl_latencies,
    parse_nccl_latencies,
)
from hpcscope.model.topology import load_topology
from tests.support.paths import FIXTURES, REPO_ROOT

HERE = FIXTURES / "simulate"
GIB = 2**30


@pytest.fixture(scope="module")
def latencies() -> NcclLatencies:
    return default_nccl_latencies()


def nccl_tests_row(path: Path, size_bytes: int) -> tuple[float, float]:
    """(out-of-place time in us, busbw in GB/s) of one size in an nccl-tests table.

    Whether a ``root`` column exists is read from the header, as the reference advises.
    """
    has_root = False
    for line in path.read_text().splitlines():
        if line.startswith("#") and "redop" in line:
            has_root = "root" in line.split()
        if line.startswith("#") or not line.strip():
            continue
        fields = line.split()
        if int(fields[0]) == size_bytes:
            time_at = 5 if has_root else 4
            return float(fields[time_at]), float(fields[time_at + 2])
    raise AssertionError(f"no {size_bytes}-byte row in {path}")


def test_bundled_latency_table_is_nccls(latencies: NcclLatencies) -> None:
    # NVIDIA/nccl tuning.cc as transcribed in the reference (section 3), in microseconds.
    assert latencies.base_us["ring"] == {"LL": 6.6, "LL128": 14.0, "Simple": 8.4}
    assert latencies.base_us["tree"] == {"LL": 6.8, "LL128": 14.0, "Simple": 0.0}
    assert latencies.hop_us["nvlink"]["ring"] == {"LL": 0.6, "LL128": 1.9, "Simple": 3.4}
    assert latencies.hop_us["nvlink"]["tree"] == {"LL": 0.6, "LL128": 1.25, "Simple": 28.0}
    assert latencies.hop_us["network"]["ring"] == {"LL": 2.7, "LL128": 4.0, "Simple": 14.0}
    assert latencies.hop_us["network"]["tree"] == {"LL": 5.0, "LL128": 8.5, "Simple": 28.0}
    assert latencies.hop_seconds("nvlink", "ring", "Simple") == pytest.approx(3.4e-6)


# Reference, training-steps.md section 3: S = 1.27 GB, B_nvl = 370 GB/s, B_nic = 48 GB/s.
WORKED_MS = {
    8: (6.1, 6.1, 6.1),
    64: (7.4, 6.2, 11.9),
    256: (9.3, 6.6, 12.6),
    1024: (16.5, 6.8, 12.8),
}


@pytest.mark.parametrize("gpus", sorted(WORKED_MS))
def test_worked_allreduce_table(gpus: int, latencies: NcclLatencies) -> None:
    fabric = Fabric(8, 370e9, "nvlink", 48e9, 8)
    columns: tuple[AllReduceAlgorithm, ...] = ("ring", "two-level", "two-level-sum")
    for algorithm, expected_ms in zip(columns, WORKED_MS[gpus], strict=True):
        cost = allreduce_cost(1.27e9, gpus, fabric, latencies, algorithm=algorithm)
        # the reference rounds to 0.1 ms: within half a unit, plus 1 % for its rounding of S
        assert cost.seconds * 1e3 == pytest.approx(expected_ms, abs=0.05 + 0.01 * expected_ms)


def test_flat_ring_at_1024_gpus_is_latency_bound(latencies: NcclLatencies) -> None:
    fabric = Fabric(8, 370e9, "nvlink", 48e9, 8)
    ring = allreduce_cost(1.27e9, 1024, fabric, latencies, algorithm="ring")
    # "At 1024 GPUs the flat ring's extra 10 ms is all latency (2,046 steps)"
    assert ring.latency_seconds == pytest.approx(9.68e-3, rel=0.01)
    assert ring.bandwidth_seconds == pytest.approx(6.86e-3, rel=0.01)


def test_eight_gib_on_a3_mega_within_15_percent_of_nccl_tests(latencies: NcclLatencies) -> None:
    """The validation point: 8 GiB AllReduce on 2 x 8 H100 measured by nccl-tests."""
    measured_us, measured_busbw = nccl_tests_row(
        HERE / "nccl_tests_all_reduce_perf_h100_2node_16gpu.log", 8 * GIB
    )
    assert measured_us == 47535.0  # the fixture is the run the reference cites
    fabric = Fabric.from_topology(load_topology(HERE / "a3-mega-2x8-h100.yaml"))
    assert fabric.nic_bytes_per_second == 25e9  # 200 Gb/s per NIC, from the topology
    assert fabric.intra_bytes_per_second == 370.8e9  # NVLink as NCCL sees it
    cost = allreduce_cost(8 * GIB, 16, fabric, latencies, algorithm="two-level")
    error = cost.seconds * 1e6 / measured_us - 1
    assert abs(error) < 0.15, f"model {cost.seconds * 1e3:.1f} ms vs measured 47.5 ms"
    # the reference's own figures: T_inter 42.9 ms, T_intra 40.6 ms, pipelined ~43 ms (-9.5 %)
    assert cost.inter_seconds * 1e3 == pytest.approx(42.9, abs=0.1)
    assert cost.intra_seconds * 1e3 == pytest.approx(40.5, abs=0.2)
    assert error == pytest.approx(-0.095, abs=0.01)
    assert cost.bus_bandwidth_bytes_per_second / 1e9 == pytest.approx(measured_busbw, rel=0.15)
    # the unpipelined sum and the flat ring are far off: the pipelined form is the one to use
    total = allreduce_cost(8 * GIB, 16, fabric, latencies, algorithm="two-level-sum")
    assert total.seconds * 1e6 / measured_us > 1.6
    ring = allreduce_cost(8 * GIB, 16, fabric, latencies, algorithm="ring")
    assert ring.seconds * 1e6 / measured_us > 1.6


def test_default_cluster_is_nvlink_bound_at_two_nodes(latencies: NcclLatencies) -> None:
    fabric = Fabric.from_topology(load_topology(REPO_ROOT / "topologies/2x8-h100.yaml"))
    assert fabric.nic_bytes_per_second == 50e9  # NDR: 400 Gb/s per port, 50 GB/s per direction
    cost = allreduce_cost(8 * GIB, 16, fabric, latencies)
    # "On NDR (48 GB/s) the same job would be NVLink-bound at ~41 ms"
    assert cost.intra_seconds > cost.inter_seconds
    assert cost.seconds * 1e3 == pytest.approx(40.6, abs=0.5)


def test_one_gpu_and_one_node(latencies: NcclLatencies) -> None:
    fabric = Fabric(8, 370e9, "nvlink", 48e9, 8)
    assert allreduce_cost(1e9, 1, fabric, latencies).seconds == 0
    single = allreduce_cost(1e9, 4, fabric, latencies)
    assert single.nodes == 1 and single.gpus_per_node == 4 and single.inter_seconds == 0
    assert single.intra_seconds == pytest.approx(2 * 3 / 4 * 1e9 / 370e9)


def test_buckets_pay_latency_each(latencies: NcclLatencies) -> None:
    fabric = Fabric(8, 370e9, "nvlink", 48e9, 8)
    one = allreduce_cost(1.27e9, 64, fabric, latencies)
    many = allreduce_cost(1.27e9, 64, fabric, latencies, buckets=51)
    assert many.bandwidth_seconds == one.bandwidth_seconds
    assert many.latency_seconds == pytest.approx(51 * one.latency_seconds)


@pytest.mark.parametrize("algorithm", ALLREDUCE_ALGORITHMS)
@pytest.mark.parametrize("gpus", [2, 8, 16, 96, 1000])
def test_message_bytes_for_inverts_the_model(
    algorithm: AllReduceAlgorithm, gpus: int, latencies: NcclLatencies
) -> None:
    fabric = Fabric(8, 370.8e9, "nvlink", 50e9, 8)
    seconds = allreduce_cost(2.5e9, gpus, fabric, latencies, algorithm=algorithm).seconds
    assert message_bytes_for(seconds, gpus, fabric, latencies, algorithm=algorithm) == (
        pytest.approx(2.5e9, rel=1e-9)
    )
    assert message_bytes_for(1e-9, gpus, fabric, latencies) == 0.0  # below the latency floor


def test_bad_inputs_name_the_field(latencies: NcclLatencies) -> None:
    fabric = Fabric(8, 370e9, "nvlink", 48e9, 8)
    with pytest.raises(CollectiveModelError) as info:
        allreduce_cost(1e9, 0, fabric, latencies)
    assert info.value.field == "gpus"
    with pytest.raises(CollectiveModelError) as info:
        allreduce_cost(-1, 8, fabric, latencies)
    assert info.value.field == "message_bytes"
    no_nic = Fabric(8, 370e9, "nvlink", 0.0, 0)
    with pytest.raises(CollectiveModelError, match="no NIC"):
        allreduce_cost(1e9, 16, no_nic, latencies)
    with pytest.raises(CollectiveModelError) as info:
        Fabric(0, 370e9, "nvlink", 48e9, 8)
    assert info.value.field == "gpus_per_node"
    with pytest.raises(CollectiveModelError) as info:
        gradient_bytes(1e9, "int3")
    assert info.value.field == "precision"
    assert gradient_bytes(635e6) == 1.27e9
    assert math.isclose(gradient_bytes(7e9, "fp32"), 28e9)


def test_site_latency_table_and_its_errors(tmp_path: Path) -> None:
    text = (REPO_ROOT / "src/hpcscope/model/data/nccl_latency.yaml").read_text()
    site = tmp_path / "site.yaml"
    site.write_text(text.replace("Simple: 14.0}", "Simple: 20.0}", 1))
    table = load_nccl_latencies(site)
    assert table.hop_us["network"]["ring"]["Simple"] == 20.0
    assert table.source == str(site)
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("Simple: 3.4}", "Simple: -3.4}"))
    with pytest.raises(SourceError) as info:
        load_nccl_latencies(bad)
    assert info.value.field == "hop_us.nvlink.ring.Simple"
    assert "negative" in info.value.message
    with pytest.raises(SourceError) as info:
        parse_nccl_latencies("base_us: [1, 2", source="x.yaml")
    assert info.value.line == 1 and info.value.source == "x.yaml"
    with pytest.raises(SourceError) as info:
        parse_nccl_latencies("base_us: {ring: {}}\nhop_us: {}\n", source="y.yaml")
    assert info.value.field == "base_us.ring.LL"
    with pytest.raises(SourceError, match="cannot read"):
        load_nccl_latencies(tmp_path / "missing.yaml")
