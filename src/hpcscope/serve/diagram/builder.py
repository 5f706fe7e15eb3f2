"""Building blocks of the diagram layout: sizes, the shape builder, how a node is drawn.

Pure geometry, no I/O; :mod:`hpcscope.serve.diagram.layout` assembles the whole diagram.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from hpcscope.model.catalog import Catalog
from hpcscope.model.topology import ElementKind, Layer, Node
from hpcscope.serve.diagram.shapes import Box, Link, Role, Shape

# --------------------------------------------------------------------------------------------
# Geometry constants (SVG user units, 1 unit = 1 CSS px at scale 1).

LABEL_WIDTH = 132.0  # left gutter: band titles and owners
GUTTER_WIDTH = 224.0  # right gutter: collectors and threat vectors
GUTTER_GAP = 22.0
MARGIN = 8.0
BAND_GAP = 8.0
BAND_PAD = 10.0
PILL_HEIGHT = 24.0  # a threat vector: one line
COLLECTOR_HEIGHT = 32.0  # a collector: its name, then its health
PILL_GAP = 5.0

GPU_WIDTH = 92.0
GPU_HEIGHT = 88.0
GPU_GAP = 10.0
NODE_PAD = 14.0
NODE_HEADER = 26.0
NVSWITCH_HEIGHT = 22.0
HCA_HEIGHT = 22.0
HCA_GAP = 4.0
HCA_PER_ROW = 8
NODE_GAP = 24.0
MIN_NODE_WIDTH = 300.0

TILE_WIDTH = 52.0
TILE_HEIGHT = 46.0
TILE_GAP = 5.0
TILE_COLUMNS = 16
CELL_GAP = 2.0

BAR_HEIGHT = 38.0
BADGE_SIZE = 14.0
BADGE_MIN_WIDTH = 40.0


def fit(text: str, width: float, *, char_width: float = 6.6) -> str:
    """Cut ``text`` with an ellipsis so that it fits ``width`` units at ~11 px type."""
    limit = max(1, int(width / char_width))
    return text if len(text) <= limit else text[: max(1, limit - 1)].rstrip() + "…"


def badge_anchor(kind: ElementKind | None, box: Box, count: int) -> tuple[float, float]:
    """Where the rightmost threat badge goes: clear of the label each kind draws."""
    half = BADGE_SIZE / 2 + 2
    if kind is ElementKind.GPU:  # bottom right: the value lines are hidden in Threats mode
        return box.right - half - 2, box.bottom - half - 2
    if kind is ElementKind.HCA:  # centred: the device name is hidden in Threats mode
        return box.center_x + (count - 1) * (BADGE_SIZE + 2) / 2, box.center_y
    if kind is ElementKind.NODE:  # the header line, right
        return box.right - half, box.y + 13
    return box.right - half - 4, box.center_y  # bars: right end


class Builder:
    """Accumulates shapes and links; keeps the tab counter."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.shapes: list[Shape] = []
        self.links: list[Link] = []
        self._tab = 0

    def vector_numbers(self, kind: ElementKind) -> tuple[int, ...]:
        return tuple(sorted(v.number for v in self.catalog.vectors_for(kind)))

    def add(
        self,
        *,
        id: str,
        kind: ElementKind | None,
        layer: Layer | None,
        label: str,
        sublabel: str,
        box: Box,
        role: Role = Role.ELEMENT,
        parent_id: str | None = None,
        node: str | None = None,
        badges: bool = True,
    ) -> Shape:
        focusable = role is not Role.CELL
        tab_index = None
        if focusable:
            self._tab += 1
            tab_index = self._tab
        numbers: tuple[int, ...] = ()
        if badges and kind is not None and role is Role.ELEMENT and box.width >= BADGE_MIN_WIDTH:
            numbers = self.vector_numbers(kind)
        badge_x, badge_y = badge_anchor(kind, box, len(numbers))
        # label and sublabel share one line: the sublabel gets what the label and badges leave
        room = box.width - 24 - len(label) * 7.6 - len(numbers) * (BADGE_SIZE + 2)
        shape = Shape(
            id=id,
            role=role,
            kind=kind,
            layer=layer,
            label=label,
            sublabel=fit(sublabel, room) if sublabel and room > 20 else "",
            box=box,
            parent_id=parent_id,
            tab_index=tab_index,
            badges=numbers,
            node=node,
            badge_x=round(badge_x, 1),
            badge_y=round(badge_y, 1),
        )
        self.shapes.append(shape)
        return shape

    def link(self, kind: str, source: Shape, target: Shape, points: Sequence[float]) -> None:
        x1, y1, x2, y2 = points
        self.links.append(
            Link(f"link-{kind}-{source.id}-{target.id}", kind, source.id, target.id, x1, y1, x2, y2)
        )


# --------------------------------------------------------------------------------------------
# Node geometry.


def gpu_columns(gpu_count: int) -> int:
    return max(1, math.ceil(gpu_count / 2)) if gpu_count > 1 else 1


def hca_rows(hca_count: int) -> int:
    return math.ceil(hca_count / HCA_PER_ROW) if hca_count else 0


def node_width(node: Node) -> float:
    columns = gpu_columns(len(node.gpus))
    return max(MIN_NODE_WIDTH, 2 * NODE_PAD + columns * GPU_WIDTH + (columns - 1) * GPU_GAP)


@dataclass(frozen=True, slots=True)
class NodeGeometry:
    """Vertical positions inside a detailed node, relative to the node's top."""

    rows: int
    row1_y: float
    switch_y: float
    row2_y: float
    hca_y: float
    height: float


def node_geometry(node: Node) -> NodeGeometry:
    """GPU rows (two, as on an HGX board), the NVSwitch bar between them, HCAs below."""
    rows = 2 if len(node.gpus) > 1 else 1
    row1_y = NODE_HEADER + 6
    switch_y = row1_y + GPU_HEIGHT + 8
    row2_y = switch_y + NVSWITCH_HEIGHT + 8
    bottom = row2_y + GPU_HEIGHT if rows == 2 else switch_y + NVSWITCH_HEIGHT
    rows_of_hcas = hca_rows(len(node.hcas))
    hca_y = bottom + 10
    if rows_of_hcas:
        bottom = hca_y + rows_of_hcas * HCA_HEIGHT + (rows_of_hcas - 1) * HCA_GAP
    return NodeGeometry(rows, row1_y, switch_y, row2_y, hca_y, bottom + NODE_PAD - 4)


def draw_node_detail(
    b: Builder, node: Node, x: float, y: float, width: float
) -> tuple[Shape, list[Shape]]:
    """Draw one node in full; return its frame and its HCAs (for the fabric links)."""
    geometry = node_geometry(node)
    frame = b.add(
        id=node.element_id,
        kind=ElementKind.NODE,
        layer=Layer.COMPUTE,
        label=node.name,
        sublabel=f"{len(node.gpus)} × {node.gpus[0].model.name}" if node.gpus else node.cpu_model,
        box=Box(x, y, width, geometry.height),
        node=node.name,
    )
    columns = gpu_columns(len(node.gpus))
    grid_width = columns * GPU_WIDTH + (columns - 1) * GPU_GAP
    gx = x + (width - grid_width) / 2
    switch_y = y + geometry.switch_y
    switch: Shape | None = None
    if node.nvlink is not None:
        switch = b.add(
            id=f"nvswitch-{node.name}",
            kind=ElementKind.NVSWITCH,
            layer=Layer.INTERCONNECT,
            label=f"NVLink {node.nvlink.generation} / {node.nvlink.switch}",
            sublabel=f"{node.nvlink.bandwidth_per_direction_bytes_per_second / 1e9:g} GB/s "
            "per direction per GPU",
            box=Box(gx, switch_y, grid_width, NVSWITCH_HEIGHT),
            parent_id=frame.id,
            node=node.name,
        )
    for gpu in node.gpus:
        row, column = divmod(gpu.index, columns) if geometry.rows == 2 else (0, gpu.index)
        top = y + (geometry.row1_y if row == 0 else geometry.row2_y)
        box = Box(gx + column * (GPU_WIDTH + GPU_GAP), top, GPU_WIDTH, GPU_HEIGHT)
        shape = b.add(
            id=gpu.element_id,
            kind=ElementKind.GPU,
            layer=Layer.COMPUTE,
            label=f"GPU {gpu.index}",
            sublabel=gpu.model.name.replace("NVIDIA ", ""),
            box=box,
            parent_id=frame.id,
            node=node.name,
        )
        if switch is not None:
            if row == 0:
                points = (box.center_x, box.bottom, box.center_x, switch_y)
            else:
                points = (box.center_x, box.y, box.center_x, switch_y + NVSWITCH_HEIGHT)
            b.link("nvlink", shape, switch, points)
    hca_shapes: list[Shape] = []
    per_row = min(HCA_PER_ROW, max(1, len(node.hcas)))
    hca_width = (width - 2 * NODE_PAD - (per_row - 1) * HCA_GAP) / per_row
    for i, hca in enumerate(node.hcas):
        row, column = divmod(i, per_row)
        box = Box(
            x + NODE_PAD + column * (hca_width + HCA_GAP),
            y + geometry.hca_y + row * (HCA_HEIGHT + HCA_GAP),
            hca_width,
            HCA_HEIGHT,
        )
        pair = f" · GPU {hca.gpu_index}" if hca.gpu_index is not None else ""
        hca_shapes.append(
            b.add(
                id=hca.element_id,
                kind=ElementKind.HCA,
                layer=Layer.INTERCONNECT,
                label=hca.device,
                sublabel=f"{hca.rate_bits_per_second / 1e9:g} Gb/s{pair}",
                box=box,
                parent_id=frame.id,
                node=node.name,
            )
        )
    return frame, hca_shapes


def draw_node_tile(b: Builder, node: Node, x: float, y: float) -> Shape:
    """Draw one node as a tile with its GPUs as cells (aggregate view)."""
    tile = b.add(
        id=node.element_id,
        kind=ElementKind.NODE,
        layer=Layer.COMPUTE,
        label=node.name,
        sublabel="",
        box=Box(x, y, TILE_WIDTH, TILE_HEIGHT),
        node=node.name,
        badges=False,
    )
    count = len(node.gpus)
    if count:
        columns = gpu_columns(count)
        rows = 2 if count > 1 else 1
        area_x, area_y = x + 4, y + 16
        area_w, area_h = TILE_WIDTH - 8, TILE_HEIGHT - 20
        cell_w = (area_w - (columns - 1) * CELL_GAP) / columns
        cell_h = (area_h - (rows - 1) * CELL_GAP) / rows
        for gpu in node.gpus:
            row, column = divmod(gpu.index, columns) if count > 1 else (0, 0)
            b.add(
                id=gpu.element_id,
                kind=ElementKind.GPU,
                layer=Layer.COMPUTE,
                label=f"GPU {gpu.index}",
                sublabel="",
                box=Box(
                    area_x + column * (cell_w + CELL_GAP),
                    area_y + row * (cell_h + CELL_GAP),
                    cell_w,
                    cell_h,
                ),
                role=Role.CELL,
                parent_id=tile.id,
                node=node.name,
            )
    return tile
