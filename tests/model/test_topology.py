from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcscope.model.errors import TopologyError
from hpcscope.model.hostlist import HostlistError, expand_hostlist
from hpcscope.model.topology import ElementKind, load_topology, parse_topology
from hpcscope.service.settings import bundled_topology


def test_default_topology_is_two_nodes_of_eight_h100() -> None:
    topology = load_topology(bundled_topology("2x8-h100"))
    assert [node.name for node in topology.nodes] == ["gpu01", "gpu02"]
    assert topology.gpu_count == 16
    node = topology.node("gpu01")
    assert node.gpus[0].model.name == "NVIDIA H100 80GB HBM3"
    assert node.gpus[0].model.memory_bytes == 81559 * 2**20
    assert len(node.hcas) == 8
    assert node.hcas[3].rate_bits_per_second == 400e9
    assert node.hcas[3].gpu_index == 3
    assert node.nvlink is not None
    assert node.nvlink.nccl_bus_bandwidth_bytes_per_second == pytest.approx(370.8e9)
    assert topology.storage["kind"] == "lustre"
    assert topology.partitions[0].nodes == ("gpu01", "gpu02")


def test_scale_topology_has_1024_gpus_with_unique_ids() -> None:
    topology = load_topology(bundled_topology("128x8-h100"))
    assert len(topology.nodes) == 128
    assert topology.gpu_count == 1024
    ids = [element.id for element in topology.elements()]
    assert len(ids) == len(set(ids))
    assert "gpu-gpu128-7" in ids


def test_elements_cover_the_five_layers_and_the_weights() -> None:
    topology = load_topology(bundled_topology())
    kinds = {element.kind for element in topology.elements()}
    assert kinds == set(ElementKind)
    gpu = next(e for e in topology.elements() if e.id == "gpu-gpu02-2")
    assert gpu.parent_id == "node-gpu02"


def test_gpu_identity_is_deterministic() -> None:
    one = load_topology(bundled_topology()).node("gpu01").gpus[2]
    two = load_topology(bundled_topology()).node("gpu01").gpus[2]
    assert one.uuid == two.uuid
    assert one.uuid.startswith("GPU-")
    assert one.device == "nvidia2"
    assert one.pci_bus_id == "00000000:3a:00.0"


def _default_text() -> str:
    return bundled_topology().read_text()


def test_invalid_field_names_file_line_and_field() -> None:
    text = _default_text().replace(
        "      count: 8\n      memory_bytes", "      count: -1\n      memory_bytes"
    )
    with pytest.raises(TopologyError) as info:
        parse_topology(text, source="bad.yaml")
    error = info.value
    assert error.source == "bad.yaml"
    assert error.field == "node_groups[0].gpu.count"
    lines = text.splitlines()
    assert error.line is not None
    assert lines[error.line - 1].strip() == "count: -1"
    assert str(error).startswith(f"bad.yaml:{error.line}: node_groups[0].gpu.count:")


def test_unknown_field_is_rejected_with_its_line() -> None:
    text = _default_text().replace("  gpu_hour: 2.50\n", "  gpu_hour: 2.50\n  gpu_hours: 3\n")
    with pytest.raises(TopologyError) as info:
        parse_topology(text, source="t.yaml")
    assert info.value.field == "pricing.gpu_hours"
    assert info.value.line is not None
    assert text.splitlines()[info.value.line - 1].strip() == "gpu_hours: 3"


@pytest.mark.parametrize(
    ("pool", "message"),
    [
        ("[scratch-OST0008]", "scratch-OST0008 not an OST of scratch"),
        ("[" + ", ".join(f"scratch-OST{i:04x}" for i in range(8)) + "]", "at least one OST"),
    ],
)
def test_the_datasets_pool_names_osts_of_the_filesystem(pool: str, message: str) -> None:
    text = _default_text().replace("[scratch-OST0006, scratch-OST0007]", pool)
    with pytest.raises(TopologyError, match=message) as info:
        parse_topology(text, source="t.yaml")
    assert info.value.field == "storage"


def test_bad_size_string_is_explained() -> None:
    text = _default_text().replace("memory_bytes: 2TiB", "memory_bytes: two terabytes")
    with pytest.raises(TopologyError, match="not a size"):
        parse_topology(text, source="t.yaml")


def test_yaml_syntax_error_has_line_and_column() -> None:
    with pytest.raises(TopologyError) as info:
        parse_topology("name: x\nnode_groups: [\n", source="broken.yaml")
    assert info.value.line is not None and info.value.line >= 2
    assert info.value.column is not None


def test_partition_with_unknown_host() -> None:
    text = _default_text().replace('nodes: "gpu[01-02]"', 'nodes: "gpu[01-03]"')
    with pytest.raises(TopologyError, match="gpu03") as info:
        parse_topology(text, source="t.yaml")
    assert info.value.field == "scheduler.partitions[0].nodes"


def test_missing_file() -> None:
    with pytest.raises(TopologyError, match="cannot read"):
        load_topology(Path("/nonexistent/topology.yaml"))


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("gpu[01-03]", ["gpu01", "gpu02", "gpu03"]),
        ("a,b[3,5-6]", ["a", "b3", "b5", "b6"]),
        ("rack[1-2]n[01-02]", ["rack1n01", "rack1n02", "rack2n01", "rack2n02"]),
        ("d09n04s[01-02]", ["d09n04s01", "d09n04s02"]),
        ("node[001-003],login1", ["node001", "node002", "node003", "login1"]),
        ("(null)", []),
        ("None assigned", []),
    ],
)
def test_expand_hostlist(expression: str, expected: list[str]) -> None:
    assert expand_hostlist(expression) == expected


@pytest.mark.parametrize("expression", ["gpu[01-", "gpu01]", "gpu[a-b]", "gpu[5-1]"])
def test_bad_hostlist(expression: str) -> None:
    with pytest.raises(HostlistError):
        expand_hostlist(expression)


@given(st.lists(st.integers(min_value=0, max_value=999), min_size=1, max_size=20, unique=True))
def test_hostlist_round_trip_of_explicit_lists(numbers: list[int]) -> None:
    names = [f"n{n:03d}" for n in numbers]
    expression = "n[" + ",".join(f"{n:03d}" for n in numbers) + "]"
    assert expand_hostlist(expression) == names
