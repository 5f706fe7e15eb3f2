"""The drawn vocabulary of the cluster diagram: boxes, shapes, links, bands, the layout.

Values only (frozen dataclasses); :mod:`hpcscope.serve.diagram.layout` computes them from a
topology, templates draw them, the service colours them by id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from hpcscope.model.topology import ElementKind, Layer


class View(StrEnum):
    """How the compute layer is drawn."""

    DETAIL = "detail"
    AGGREGATE = "aggregate"
    ZOOM = "zoom"


class Role(StrEnum):
    """What a shape is in the diagram."""

    ELEMENT = "element"  # a topology element drawn in full, focusable, opens its card
    CELL = "cell"  # a GPU drawn as a small cell inside an aggregate node tile
    COLLECTOR = "collector"  # Observe mode overlay item
    VECTOR = "vector"  # Threats mode overlay item


@dataclass(frozen=True, slots=True)
class Box:
    """An axis-aligned rectangle."""

    x: float
    y: float
    width: float
    height: float

    @property
    def right(self) -> float:
        return self.x + self.width

    @property
    def bottom(self) -> float:
        return self.y + self.height

    @property
    def center_x(self) -> float:
        return self.x + self.width / 2

    @property
    def center_y(self) -> float:
        return self.y + self.height / 2

    def overlaps(self, other: Box) -> bool:
        """Whether the interiors intersect (touching edges do not count)."""
        return (
            self.x < other.right
            and other.x < self.right
            and self.y < other.bottom
            and other.y < self.bottom
        )

    def contains(self, other: Box) -> bool:
        return (
            self.x <= other.x
            and self.y <= other.y
            and other.right <= self.right
            and other.bottom <= self.bottom
        )


@dataclass(frozen=True, slots=True)
class Shape:
    """One drawn thing with a stable id.

    Attributes:
        id: the element id (``gpu-gpu01-3``), ``collector-<id>`` or ``vector-<id>``.
        role: element, cell, collector or vector.
        kind: the element kind (None for overlay items).
        layer: the element's layer; for overlay items, the band they sit beside.
        label: the accessible name's core (``GPU 3``), also drawn when it fits.
        sublabel: a second, smaller line (model, rate, versions), drawn when it fits.
        box: where it is drawn.
        parent_id: the containing element (a GPU's node), if any.
        tab_index: position in the keyboard walk; None when not focusable (cells).
        badges: threat-vector numbers drawn on the shape in Threats mode.
        badge_x, badge_y: centre of the rightmost badge; the others follow to its left.
        node: the node this shape belongs to, if any.
    """

    id: str
    role: Role
    kind: ElementKind | None
    layer: Layer | None
    label: str
    sublabel: str
    box: Box
    parent_id: str | None = None
    tab_index: int | None = None
    badges: tuple[int, ...] = ()
    node: str | None = None
    badge_x: float = 0.0
    badge_y: float = 0.0


@dataclass(frozen=True, slots=True)
class Link:
    """A line between two shapes (NVLink, InfiniBand cable, storage path, collector lead)."""

    id: str
    kind: str
    source_id: str
    target_id: str
    x1: float
    y1: float
    x2: float
    y2: float


@dataclass(frozen=True, slots=True)
class Band:
    """A horizontal layer stripe with its title in the left gutter."""

    key: str
    layer: Layer
    number: int | None
    title: str
    subtitle: str
    box: Box
    badges: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class DiagramLayout:
    """Everything the template needs to draw the diagram, in drawing order."""

    topology_name: str
    view: View
    zoom_node: str | None
    width: float
    height: float
    bands: tuple[Band, ...]
    shapes: tuple[Shape, ...]
    links: tuple[Link, ...]
    node_count: int
    gpu_count: int
    _index: dict[str, Shape] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._index.update({shape.id: shape for shape in self.shapes})

    def shape(self, shape_id: str) -> Shape:
        """The shape with this id; KeyError when the view does not draw it."""
        return self._index[shape_id]

    def has(self, shape_id: str) -> bool:
        return shape_id in self._index

    @property
    def focus_order(self) -> tuple[Shape, ...]:
        """Focusable shapes in keyboard (Tab) order."""
        focusable = [s for s in self.shapes if s.tab_index is not None]
        return tuple(sorted(focusable, key=lambda s: s.tab_index or 0))

    def elements(self) -> tuple[Shape, ...]:
        return tuple(s for s in self.shapes if s.role in (Role.ELEMENT, Role.CELL))

    def overlay(self, role: Role) -> tuple[Shape, ...]:
        return tuple(s for s in self.shapes if s.role is role)
