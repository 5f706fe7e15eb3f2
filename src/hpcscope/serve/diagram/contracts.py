"""Documents of the cluster diagram's JSON endpoints.

``GET /api/diagram/state`` (polled) is a :class:`DiagramState`, ``GET /api/diagram`` a
:class:`DiagramPage`; ``GET /api/diagram/elements/{id}`` is the service's
:class:`~hpcscope.service.diagram.cards.ElementCard`, a frozen dataclass whose JSON Schema
pydantic derives directly.

The diagram's values are frozen dataclasses of the service (``GpuNow``, ``NodeLive``,
``CollectorHealth``, the catalog's ``Card``...): :class:`DiagramPage` names them as field types
instead of copying their fields, so their schema follows the code. They reach the wire through
:func:`hpcscope.serve.diagram.view.jsonable` (enums as values, datetimes as ISO 8601 UTC with
``Z``, NaN as null).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from hpcscope.model.catalog import Card, ThreatVector
from hpcscope.serve.diagram.shapes import Band, Box, Link
from hpcscope.service.contract import Contract, Number, UtcText
from hpcscope.service.diagram.collectors import CollectorHealth
from hpcscope.service.diagram.cost import DecisionView
from hpcscope.service.diagram.live import ClusterHealth, GpuNow, NodeLive

_BY_ALIAS = ConfigDict(serialize_by_alias=True, validate_by_name=True)


class ShapeState(Contract):
    """A drawn shape's live state: its CSS classes, accessible name, GPU text lines."""

    class_: str = Field(alias="class")
    label: str
    lines: list[str] = Field(default_factory=list, description="GPU shapes only")

    model_config = Contract.model_config | _BY_ALIAS


class DiagramState(Contract):
    """The polled live state of every drawn shape (ETag: a hash of summary and elements)."""

    generated_at: UtcText
    summary: str
    elements: dict[str, ShapeState]


class _Page(BaseModel):
    # The page nests the service's dataclasses, which arrive as JSON values (enums as
    # strings, datetimes as text): validated lax, but still no unknown field at this level.
    model_config = ConfigDict(extra="forbid", frozen=True)


class DiagramTopology(_Page):
    """The cluster drawn."""

    name: str
    description: str
    nodes: int
    gpus: int


class DiagramViewer(_Page):
    """Who looks (an anonymous visitor sees no job data)."""

    anonymous: bool
    user: str | None
    role: str | None


class DiagramShape(_Page):
    """A drawn shape: its element, box, keyboard order, threat badges and live classes."""

    id: str
    role: str
    kind: str | None
    layer: str | None
    label: str
    sublabel: str
    box: Box
    parent_id: str | None
    tab_index: int | None
    badges: list[int]
    node: str | None
    badge_x: Number
    badge_y: Number
    class_: str = Field(alias="class")

    model_config = _Page.model_config | _BY_ALIAS


class DiagramLayoutDocument(_Page):
    """The layout: view, size, bands, shapes and links, in SVG user units."""

    view: str
    zoom_node: str | None
    width: Number
    height: Number
    bands: list[Band]
    shapes: list[DiagramShape]
    links: list[Link]


class DiagramLive(_Page):
    """Live values of every GPU and node the viewer may see, and the cluster's health."""

    fresh_seconds: Number
    gpus: dict[str, GpuNow]
    nodes: dict[str, NodeLive]
    cluster: ClusterHealth


class DiagramDetections(_Page):
    """Open security alerts by threat vector and by node (null: not shown to the viewer), and
    the severity of the worst open alert of each (Threats mode's colours)."""

    configured: bool
    shown: bool
    open_by_vector: dict[str, int] | None
    open_by_node: dict[str, int] | None
    worst_by_vector: dict[str, str] | None
    worst_by_node: dict[str, str] | None


class DiagramPage(_Page):
    """The diagram page as JSON: structure, layout, cards, live values, collectors, threats,
    cost."""

    topology: DiagramTopology
    viewer: DiagramViewer
    generated_at: UtcText
    summary: str
    layout: DiagramLayoutDocument
    live: DiagramLive
    collectors: list[CollectorHealth]
    detections: DiagramDetections
    cards: dict[str, Card]
    threat_vectors: list[ThreatVector]
    decision: DecisionView
    try_this: list[str]
