"""The diagram layout: every element once, nothing overlapping, stable ids, bounded sizes."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcscope.model.catalog import default_catalog
from hpcscope.model.topology import ElementKind, Topology, load_topology, parse_topology
from hpcscope.serve.diagram.layout import BADGE_SIZE, expected_element_ids, layout_diagram
from hpcscope.serve.diagram.shapes import Box, DiagramLayout, Role, Shape, View
from hpcscope.service.settings import bundled_topology

CATALOG = default_catalog()


@pytest.fixture(scope="module")
def small() -> Topology:
    return load_topology(bundled_topology("2x8-h100"))


@pytest.fixture(scope="module")
def large() -> Topology:
    return load_topology(bundled_topology("128x8-h100"))


def check_layout(layout: DiagramLayout, topology: Topology) -> None:
    """The invariants every view must keep."""
    ids = [shape.id for shape in layout.shapes]
    duplicates = [i for i, n in Counter(ids).items() if n > 1]
    assert not duplicates, f"ids drawn twice: {duplicates[:5]}"
    drawn = {s.id for s in layout.elements()}
    expected = set(expected_element_ids(topology, layout.view, layout.zoom_node))
    assert drawn == expected, (
        f"missing {sorted(expected - drawn)[:5]}, extra {sorted(drawn - expected)[:5]}"
    )
    canvas = Box(0, 0, layout.width, layout.height)
    by_id = {s.id: s for s in layout.shapes}
    siblings: dict[tuple[Role, str | None], list[Shape]] = defaultdict(list)
    for shape in layout.shapes:
        assert shape.box.width > 0 and shape.box.height > 0, shape.id
        assert canvas.contains(shape.box), f"{shape.id} outside the canvas"
        if shape.parent_id is not None:
            assert by_id[shape.parent_id].box.contains(shape.box), f"{shape.id} outside parent"
        group = Role.ELEMENT if shape.role is Role.CELL else shape.role
        siblings[(group, shape.parent_id)].append(shape)
        for i, number in enumerate(reversed(shape.badges)):
            cx = shape.badge_x - i * (BADGE_SIZE + 2)
            badge = Box(cx - BADGE_SIZE / 2, shape.badge_y - BADGE_SIZE / 2, BADGE_SIZE, BADGE_SIZE)
            assert shape.box.contains(badge), f"badge {number} outside {shape.id}"
    for members in siblings.values():
        for i, one in enumerate(members):
            for other in members[i + 1 :]:
                assert not one.box.overlaps(other.box), f"{one.id} overlaps {other.id}"
    bands = {band.key: band.box for band in layout.bands}
    for i, band in enumerate(layout.bands):
        for other_band in layout.bands[i + 1 :]:
            assert not band.box.overlaps(other_band.box)
    for shape in layout.elements():
        if shape.parent_id is None:
            assert any(box.contains(shape.box) for box in bands.values()), shape.id
    # overlays sit in the gutter, right of every element
    content_right = max(s.box.right for s in layout.elements())
    for shape in layout.overlay(Role.COLLECTOR) + layout.overlay(Role.VECTOR):
        assert shape.box.x > content_right
    # the keyboard walk: every non-cell shape once, in drawing order
    order = [s.tab_index for s in layout.focus_order]
    assert order == list(range(1, len(order) + 1))
    assert {s.id for s in layout.focus_order} == {
        s.id for s in layout.shapes if s.role is not Role.CELL
    }


def test_default_cluster_is_drawn_in_detail(small: Topology) -> None:
    layout = layout_diagram(small, CATALOG)
    assert layout.view is View.DETAIL
    check_layout(layout, small)
    assert {s.id for s in layout.elements()} == {e.id for e in small.elements()}
    gpu = layout.shape("gpu-gpu02-2")
    assert gpu.role is Role.ELEMENT and gpu.parent_id == "node-gpu02" and gpu.label == "GPU 2"
    assert layout.shape("hca-gpu01-mlx5_3").kind is ElementKind.HCA
    # readable on a 1366-pixel screen without scrolling sideways
    assert layout.width <= 1320
    assert layout.height <= 800
    assert gpu.box.width >= 80 and gpu.box.height >= 60


def test_tab_order_is_reading_order(small: Topology) -> None:
    layout = layout_diagram(small, CATALOG)
    walk = [s.id for s in layout.focus_order]
    elements = [e.id for e in small.elements()]
    assert walk[: len(elements)] == elements
    assert walk[len(elements) :] == [f"collector-{c.id}" for c in _collectors_in_band_order()] + [
        f"vector-{v.id}" for v in CATALOG.threat_vectors
    ]


def _collectors_in_band_order() -> list[Any]:
    order = ["scheduler", "software", "compute", "fabric", "storage", "weights"]
    band_of = {
        ElementKind.SCHEDULER: "scheduler",
        ElementKind.SOFTWARE: "software",
        ElementKind.NODE: "compute",
        ElementKind.GPU: "compute",
        ElementKind.NVSWITCH: "compute",
        ElementKind.HCA: "compute",
        ElementKind.FABRIC: "fabric",
        ElementKind.STORAGE: "storage",
        ElementKind.WEIGHTS: "weights",
    }
    return sorted(CATALOG.collectors, key=lambda c: order.index(band_of[c.observes[-1]]))


def test_threat_badges_follow_the_catalog(small: Topology) -> None:
    layout = layout_diagram(small, CATALOG)
    for shape in layout.elements():
        assert shape.kind is not None
        assert shape.badges == tuple(sorted(v.number for v in CATALOG.vectors_for(shape.kind)))
    assert layout.shape("weights").badges == (1, 2, 3, 4, 5, 6)


def test_ids_are_stable(small: Topology, large: Topology) -> None:
    for topology in (small, large):
        one, two = layout_diagram(topology, CATALOG), layout_diagram(topology, CATALOG)
        assert one == two
        assert [s.id for s in one.shapes] == [s.id for s in two.shapes]


def test_1024_gpus_aggregate_into_node_tiles(large: Topology) -> None:
    layout = layout_diagram(large, CATALOG)
    assert layout.view is View.AGGREGATE
    check_layout(layout, large)
    cells = layout.overlay(Role.CELL)
    assert len(cells) == 1024 and all(c.tab_index is None for c in cells)
    assert layout.shape("gpu-gpu128-7").parent_id == "node-gpu128"
    tiles = [s for s in layout.elements() if s.kind is ElementKind.NODE]
    assert len(tiles) == 128 and all(t.tab_index is not None for t in tiles)
    # usable: fits a desktop screen, few enough SVG shapes, a sensible number of tab stops
    assert layout.width <= 1320
    assert layout.height <= 1000
    assert len(layout.shapes) <= 1300
    assert len(layout.focus_order) <= 160
    compute = next(b for b in layout.bands if b.key == "compute")
    assert compute.badges == (1, 5, 6)


def test_zoom_draws_one_node_in_detail(large: Topology) -> None:
    layout = layout_diagram(large, CATALOG, zoom_node="gpu017")
    assert layout.view is View.ZOOM and layout.zoom_node == "gpu017"
    check_layout(layout, large)
    assert layout.has("hca-gpu017-mlx5_7") and layout.has("nvswitch-gpu017")
    assert not layout.has("gpu-gpu018-0")
    assert layout.shape("gpu-gpu017-3").role is Role.ELEMENT
    with pytest.raises(KeyError):
        layout_diagram(large, CATALOG, zoom_node="nope")


def test_every_element_is_reachable_in_some_view(large: Topology) -> None:
    seen = {s.id for s in layout_diagram(large, CATALOG).elements()}
    for node in large.nodes[:3]:
        seen |= {s.id for s in layout_diagram(large, CATALOG, zoom_node=node.name).elements()}
    wanted = {
        e.id
        for e in large.elements()
        if e.parent_id is None or e.parent_id in {f"node-{n.name}" for n in large.nodes[:3]}
    }
    assert wanted <= seen


def _topology_yaml(nodes: int, gpus: int, hcas: int, nvlink: bool, host_digits: int) -> str:
    text = bundled_topology("2x8-h100").read_text()
    data = yaml.safe_load(text)
    group = data["node_groups"][0]
    group["hostnames"] = f"n[{1:0{host_digits}d}-{nodes:0{host_digits}d}]"
    group["gpu"]["count"] = gpus
    if hcas:
        group["hcas"]["count"] = hcas
    else:
        del group["hcas"]
    if not nvlink:
        del group["nvlink"]
    data["scheduler"]["partitions"][0]["nodes"] = group["hostnames"]
    return yaml.safe_dump(data)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.integers(1, 40),
    gpus=st.integers(0, 16),
    hcas=st.integers(0, 16),
    nvlink=st.booleans(),
    digits=st.integers(2, 3),
)
def test_any_cluster_lays_out_cleanly(
    nodes: int, gpus: int, hcas: int, nvlink: bool, digits: int
) -> None:
    topology = parse_topology(_topology_yaml(nodes, gpus, hcas, nvlink, digits))
    layout = layout_diagram(topology, CATALOG)
    check_layout(layout, topology)
    zoomed = layout_diagram(topology, CATALOG, zoom_node=topology.nodes[-1].name)
    check_layout(zoomed, topology)
