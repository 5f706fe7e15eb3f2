"""Pure layout of the cluster diagram: a :class:`Topology` becomes positioned shapes.

The diagram is server-side SVG. This module decides *where* everything goes and nothing else:
no I/O, no live data, no clock. Templates draw the shapes; the service colours them.

Three views, chosen from the topology size and the request:

``detail``
    Every node side by side, each with its GPUs (two rows, as on an HGX board), the NVSwitch
    between the rows, and one HCA per GPU below, each HCA wired down to the InfiniBand fabric.
    Used up to ``detail_max_nodes`` nodes (the default 2 x 8 cluster is drawn this way).
``aggregate``
    Larger clusters: one tile per node, its GPUs drawn as small cells the live state colours,
    the tile's outline takes the worst GPU state. 128 nodes (1,024 GPUs) stay about 1,300
    SVG elements, well inside what a browser draws without effort.
``zoom``
    One node of a larger cluster in full detail (``zoom_node``), with the shared layers.

Bands are stacked top to bottom: scheduler, software stack, GPU nodes (with NVLink and HCAs),
InfiniBand fabric, parallel storage, model weights. A right-hand gutter holds the overlays:
the collectors of Observe mode next to the band they observe, the six threat vectors of
Threats mode. Every shape keeps the stable element id of :meth:`Topology.elements`
(``gpu-gpu01-3``), so live values, cards and tests address the same thing.

Tab order is reading order: the scheduler, the software stack, then each node followed by its
NVSwitch, GPUs and HCAs, then the fabric, the storage, the weights, then the overlay items.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from hpcscope.model.catalog import Catalog
from hpcscope.model.topology import ElementKind, Layer, Node, Topology
from hpcscope.serve.diagram.builder import (
    BADGE_SIZE,
    BAND_GAP,
    BAND_PAD,
    BAR_HEIGHT,
    COLLECTOR_HEIGHT,
    GUTTER_GAP,
    GUTTER_WIDTH,
    LABEL_WIDTH,
    MARGIN,
    NODE_GAP,
    PILL_GAP,
    PILL_HEIGHT,
    TILE_COLUMNS,
    TILE_GAP,
    TILE_HEIGHT,
    TILE_WIDTH,
    Builder,
    draw_node_detail,
    draw_node_tile,
    node_geometry,
    node_width,
)
from hpcscope.serve.diagram.shapes import Band, Box, DiagramLayout, Link, Role, Shape, View

__all__ = ["BADGE_SIZE", "choose_view", "expected_element_ids", "layout_diagram"]

# --------------------------------------------------------------------------------------------
# Bands: which layer each element kind is drawn in.

_BAND_OF_KIND = {
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

#: (key, layer, number in the course's five layers, title) from top to bottom.
_BANDS: tuple[tuple[str, Layer, int | None, str, str], ...] = (
    ("scheduler", Layer.SCHEDULER, 4, "Scheduler", "Slurm"),
    ("software", Layer.SOFTWARE, 5, "ML software", "stack"),
    ("compute", Layer.COMPUTE, 1, "GPU nodes", "NVLink inside"),
    ("fabric", Layer.INTERCONNECT, 2, "Interconnect", "InfiniBand"),
    ("storage", Layer.STORAGE, 3, "Parallel", "storage"),
    ("weights", Layer.WEIGHTS, None, "Model", "weights"),
)


# --------------------------------------------------------------------------------------------
# The whole diagram.


def choose_view(topology: Topology, *, zoom_node: str | None, detail_max_nodes: int) -> View:
    """Detail for small clusters, aggregate for large ones, zoom when a node is asked for."""
    if zoom_node is not None:
        return View.ZOOM
    return View.DETAIL if len(topology.nodes) <= detail_max_nodes else View.AGGREGATE


@dataclass(frozen=True, slots=True)
class _Frame:
    """The diagram's horizontal frame: where content starts, its width, the gutter."""

    x0: float
    content_width: float
    gutter_x: float
    width: float


def _compute_size(nodes: Sequence[Node], view: View) -> tuple[float, float]:
    """Width and height of the compute band's content."""
    if view is View.AGGREGATE:
        columns = min(len(nodes), TILE_COLUMNS)
        rows = math.ceil(len(nodes) / columns)
        return (
            columns * TILE_WIDTH + (columns - 1) * TILE_GAP,
            rows * TILE_HEIGHT + (rows - 1) * TILE_GAP,
        )
    widths = [node_width(node) for node in nodes]
    return (
        sum(widths) + NODE_GAP * (len(nodes) - 1),
        max(node_geometry(node).height for node in nodes),
    )


def _collectors_by_band(catalog: Catalog) -> dict[str, list[str]]:
    """Collector ids per band: beside the last kind it observes ([hca, fabric] -> fabric)."""
    out: dict[str, list[str]] = {key: [] for key, *_ in _BANDS}
    for collector in catalog.collectors:
        out[_BAND_OF_KIND[collector.observes[-1]]].append(collector.id)
    return out


def _bands(
    b: Builder, frame: _Frame, compute_height: float, view: View, pills: dict[str, list[str]]
) -> list[Band]:
    """Stack the six bands; each is tall enough for its content and its collector pills."""
    bands: list[Band] = []
    y = MARGIN
    for key, layer, number, title, subtitle in _BANDS:
        content = compute_height if key == "compute" else BAR_HEIGHT
        stack = len(pills[key]) * (COLLECTOR_HEIGHT + PILL_GAP) - PILL_GAP + 12
        height = max(content + 2 * BAND_PAD, stack)
        badges: tuple[int, ...] = ()
        if key == "compute" and view is View.AGGREGATE:
            # tiles are too small for badges: the band title carries the compute layer's
            numbers = {n for k in (ElementKind.NODE, ElementKind.GPU) for n in b.vector_numbers(k)}
            badges = tuple(sorted(numbers))
        box = Box(MARGIN, y, frame.width - 2 * MARGIN, height)
        bands.append(Band(key, layer, number, title, subtitle, box, badges))
        y += height + BAND_GAP
    return bands


def _draw_compute(
    b: Builder, nodes: Sequence[Node], view: View, frame: _Frame, top: float
) -> list[Shape]:
    """Draw the nodes; return the shapes wired to the fabric (HCAs, or the last tile row)."""
    if view is View.AGGREGATE:
        columns = min(len(nodes), TILE_COLUMNS)
        tiles = []
        for i, node in enumerate(nodes):
            row, column = divmod(i, columns)
            x = frame.x0 + column * (TILE_WIDTH + TILE_GAP)
            tiles.append(draw_node_tile(b, node, x, top + row * (TILE_HEIGHT + TILE_GAP)))
        return tiles[-columns:]
    used = sum(node_width(n) for n in nodes) + NODE_GAP * (len(nodes) - 1)
    x = frame.x0 + (frame.content_width - used) / 2
    wired: list[Shape] = []
    for node in nodes:
        width = node_width(node)
        _, hcas = draw_node_detail(b, node, x, top, width)
        wired.extend(hcas)
        x += width + NODE_GAP
    return wired


def _draw_layers(
    b: Builder,
    topology: Topology,
    nodes: Sequence[Node],
    view: View,
    frame: _Frame,
    bands: Sequence[Band],
) -> None:
    """The elements in reading order: scheduler, software, nodes, fabric, storage, weights."""
    band_box = {band.key: band.box for band in bands}
    x0, middle = frame.x0, frame.x0 + frame.content_width / 2

    def bar(key: str) -> Box:
        box = band_box[key]
        return Box(x0, box.y + (box.height - BAR_HEIGHT) / 2, frame.content_width, BAR_HEIGHT)

    scheduler = b.add(
        id="scheduler",
        kind=ElementKind.SCHEDULER,
        layer=Layer.SCHEDULER,
        label=f"Slurm {topology.scheduler_version}",
        sublabel=f"cluster {topology.slurm_cluster_name} · partitions "
        + ", ".join(p.name for p in topology.partitions),
        box=bar("scheduler"),
    )
    software = b.add(
        id="software",
        kind=ElementKind.SOFTWARE,
        layer=Layer.SOFTWARE,
        label="ML software stack",
        sublabel=" · ".join(f"{name} {version}" for name, version in topology.software),
        box=bar("software"),
    )
    b.link("control", scheduler, software, (x0 + 40, scheduler.box.bottom, x0 + 40, software.box.y))
    wired = _draw_compute(b, nodes, view, frame, band_box["compute"].y + BAND_PAD)
    fabric_spec = topology.interconnect
    fabric = b.add(
        id="fabric",
        kind=ElementKind.FABRIC,
        layer=Layer.INTERCONNECT,
        label=f"{fabric_spec['kind'].replace('infiniband', 'InfiniBand')} "
        f"{fabric_spec['generation']}",
        sublabel=f"{fabric_spec['topology']} · {fabric_spec['leaf_switches']} leaf / "
        f"{fabric_spec['spine_switches']} spine switches · "
        f"{fabric_spec['port_rate_bits_per_second'] / 1e9:g} Gb/s per port",
        box=bar("fabric"),
    )
    for shape in wired:
        box = shape.box
        b.link("ib", shape, fabric, (box.center_x, box.bottom, box.center_x, fabric.box.y))
    storage_spec = topology.storage
    storage = b.add(
        id="storage",
        kind=ElementKind.STORAGE,
        layer=Layer.STORAGE,
        label=f"{storage_spec['kind'].capitalize()} {storage_spec['name']}",
        sublabel=f"{storage_spec['mount_point']} · {storage_spec['metadata_targets']} MDT"
        f" · {storage_spec['object_targets']} OST",
        box=bar("storage"),
    )
    b.link("storage", fabric, storage, (middle, fabric.box.bottom, middle, storage.box.y))
    weights = b.add(
        id="weights",
        kind=ElementKind.WEIGHTS,
        layer=Layer.WEIGHTS,
        label="Model weights",
        sublabel=f"{topology.checkpoint_root} · " + ", ".join(topology.weight_formats),
        box=bar("weights"),
    )
    b.link("checkpoint", storage, weights, (middle, storage.box.bottom, middle, weights.box.y))


def _draw_overlays(
    b: Builder, frame: _Frame, bands: Sequence[Band], pills: dict[str, list[str]]
) -> float:
    """Collectors beside the band they observe; the six vectors stacked from the top.

    Returns:
        The bottom of the vector stack (the diagram must be at least that tall).
    """
    collectors = {c.id: c for c in b.catalog.collectors}
    for band in bands:
        ids = pills[band.key]
        stack = len(ids) * (COLLECTOR_HEIGHT + PILL_GAP) - PILL_GAP
        y = band.box.y + (band.box.height - stack) / 2
        for collector_id in ids:
            pill = b.add(
                id=f"collector-{collector_id}",
                kind=None,
                layer=band.layer,
                label=collectors[collector_id].name,
                sublabel="",
                box=Box(frame.gutter_x, y, GUTTER_WIDTH, COLLECTOR_HEIGHT),
                role=Role.COLLECTOR,
            )
            lead = (frame.x0 + frame.content_width + 2, pill.box.center_y)
            b.links.append(
                Link(
                    f"link-collector-{collector_id}",
                    "collector",
                    pill.id,
                    band.key,
                    lead[0],
                    lead[1],
                    frame.gutter_x,
                    lead[1],
                )
            )
            y += COLLECTOR_HEIGHT + PILL_GAP
    y = MARGIN + BAND_PAD
    for vector in b.catalog.threat_vectors:
        b.add(
            id=f"vector-{vector.id}",
            kind=None,
            layer=None,
            label=f"{vector.number} · {vector.name}",
            sublabel="",
            box=Box(frame.gutter_x, y, GUTTER_WIDTH, PILL_HEIGHT),
            role=Role.VECTOR,
        )
        y += PILL_HEIGHT + PILL_GAP
    return y


def layout_diagram(
    topology: Topology,
    catalog: Catalog,
    *,
    zoom_node: str | None = None,
    detail_max_nodes: int = 4,
) -> DiagramLayout:
    """Place every element of ``topology`` (see the module docstring for the three views).

    Args:
        topology: the cluster.
        catalog: the element catalog (collectors and threat vectors for the overlays).
        zoom_node: draw only this node in detail, with the shared layers.
        detail_max_nodes: largest cluster drawn node by node; above it, node tiles.

    Returns:
        The positioned diagram.

    Raises:
        KeyError: ``zoom_node`` is not a node of the topology.
    """
    view = choose_view(topology, zoom_node=zoom_node, detail_max_nodes=detail_max_nodes)
    nodes = (topology.node(zoom_node),) if zoom_node is not None else topology.nodes
    compute_width, compute_height = _compute_size(nodes, view)
    x0 = MARGIN + LABEL_WIDTH
    content_width = max(compute_width, 560.0)
    gutter_x = x0 + content_width + GUTTER_GAP
    frame = _Frame(x0, content_width, gutter_x, gutter_x + GUTTER_WIDTH + MARGIN)
    b = Builder(catalog)
    pills = _collectors_by_band(catalog)
    bands = _bands(b, frame, compute_height, view, pills)
    _draw_layers(b, topology, nodes, view, frame, bands)
    vectors_bottom = _draw_overlays(b, frame, bands, pills)
    height = max(bands[-1].box.bottom, vectors_bottom) + MARGIN
    return DiagramLayout(
        topology_name=topology.name,
        view=view,
        zoom_node=zoom_node,
        width=round(frame.width, 1),
        height=round(height, 1),
        bands=tuple(bands),
        shapes=tuple(b.shapes),
        links=tuple(b.links),
        node_count=len(topology.nodes),
        gpu_count=topology.gpu_count,
    )


def expected_element_ids(topology: Topology, view: View, zoom_node: str | None) -> Iterator[str]:
    """The element ids a view must draw exactly once (the layout tests' oracle).

    Detail draws every element; aggregate draws nodes and GPUs (as cells) but leaves HCAs and
    NVSwitches to the zoomed view; zoom draws one node's elements and the shared layers.
    """
    zoom_parent = f"node-{zoom_node}" if zoom_node is not None else None
    for element in topology.elements():
        node_bound = element.kind is ElementKind.NODE or element.parent_id is not None
        owner = element.id if element.kind is ElementKind.NODE else element.parent_id
        if view is View.ZOOM and node_bound and owner != zoom_parent:
            continue
        if view is View.AGGREGATE and element.kind in (ElementKind.NVSWITCH, ElementKind.HCA):
            continue
        yield element.id
