"""The element catalog: cards, collectors, threat vectors, bridges, as data.

The text lives in ``model/data/catalog.yaml`` (written from the reference course the explorable
diagram comes from) so that writers can edit it without touching code; this module validates it
once and exposes frozen types. Every :class:`~hpcscope.model.topology.ElementKind` must have a
card, and every collector and threat vector must point at kinds that exist: a test checks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

from hpcscope.model import bounded_yaml
from hpcscope.model.topology import ElementKind, Layer


@dataclass(frozen=True, slots=True)
class Observation:
    """One thing to observe on an element, and the tool that observes it."""

    signal: str
    tool: str


@dataclass(frozen=True, slots=True)
class Card:
    """What an element is, what to observe there and with which tool, what threatens it."""

    kind: ElementKind
    title: str
    what: str
    observe: tuple[Observation, ...]
    threats: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Collector:
    """A collector of Observe mode and the element kinds it sits on."""

    id: str
    name: str
    observes: tuple[ElementKind, ...]
    signals: str


@dataclass(frozen=True, slots=True)
class ThreatVector:
    """One of the six HPC-AI threat vectors of Threats mode."""

    id: str
    number: int
    name: str
    targets: tuple[ElementKind, ...]
    summary: str
    signals: tuple[str, ...]
    rules: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Bridge:
    """A "bridge" of the decision-maker reading mode: what the page changes beyond the tech."""

    id: str
    title: str
    subtitle: str
    text: str


@dataclass(frozen=True, slots=True)
class Catalog:
    """Everything the diagram says about the cluster's parts, independent of any topology."""

    cards: dict[ElementKind, Card]
    collectors: tuple[Collector, ...]
    threat_vectors: tuple[ThreatVector, ...]
    bridges: tuple[Bridge, ...]
    layer_owners: dict[Layer, str]
    try_this: tuple[str, ...]

    def card(self, kind: ElementKind) -> Card:
        return self.cards[kind]

    def vector(self, vector_id: str) -> ThreatVector:
        for vector in self.threat_vectors:
            if vector.id == vector_id:
                return vector
        raise KeyError(vector_id)

    def collectors_for(self, kind: ElementKind) -> tuple[Collector, ...]:
        return tuple(c for c in self.collectors if kind in c.observes)

    def vectors_for(self, kind: ElementKind) -> tuple[ThreatVector, ...]:
        return tuple(v for v in self.threat_vectors if kind in v.targets)


def parse_catalog(text: str) -> Catalog:
    """Validate catalog YAML text into a :class:`Catalog`.

    Raises:
        ValueError: a missing card, an unknown element kind or threat id.
    """
    raw = bounded_yaml.safe_load(text, source="<element catalog>")
    cards: dict[ElementKind, Card] = {}
    vector_ids = {v["id"] for v in raw["threat_vectors"]}
    for kind_name, card in raw["cards"].items():
        kind = ElementKind(kind_name)
        unknown = set(card["threats"]) - vector_ids
        if unknown:
            raise ValueError(f"card {kind_name}: unknown threat vectors {sorted(unknown)}")
        cards[kind] = Card(
            kind=kind,
            title=card["title"],
            what=card["what"],
            observe=tuple(Observation(o["signal"], o["tool"]) for o in card["observe"]),
            threats=tuple(card["threats"]),
        )
    missing = set(ElementKind) - set(cards)
    if missing:
        raise ValueError(f"catalog has no card for {sorted(missing)}")
    return Catalog(
        cards=cards,
        collectors=tuple(
            Collector(
                c["id"], c["name"], tuple(ElementKind(k) for k in c["observes"]), c["signals"]
            )
            for c in raw["collectors"]
        ),
        threat_vectors=tuple(
            ThreatVector(
                v["id"],
                int(v["number"]),
                v["name"],
                tuple(ElementKind(k) for k in v["targets"]),
                v["summary"],
                tuple(v["signals"]),
                tuple(v["rules"]),
            )
            for v in raw["threat_vectors"]
        ),
        bridges=tuple(
            Bridge(key, b["title"], b["subtitle"], b["text"]) for key, b in raw["bridges"].items()
        ),
        layer_owners={Layer(k): v for k, v in raw["layer_owners"].items()},
        try_this=tuple(raw["try_this"]),
    )


@cache
def default_catalog() -> Catalog:
    """The catalog shipped with hpcscope (read once per process)."""
    text = resources.files("hpcscope.model").joinpath("data/catalog.yaml").read_text("utf-8")
    return parse_catalog(text)
