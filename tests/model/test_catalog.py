from __future__ import annotations

from hpcscope.model.catalog import default_catalog
from hpcscope.model.topology import ElementKind


def test_every_element_kind_has_a_card_with_tools_and_threats() -> None:
    catalog = default_catalog()
    for kind in ElementKind:
        card = catalog.card(kind)
        assert card.what
        assert card.observe and all(o.tool and o.signal for o in card.observe)
        assert card.threats


def test_six_threat_vectors_numbered_one_to_six() -> None:
    vectors = default_catalog().threat_vectors
    assert [v.number for v in vectors] == [1, 2, 3, 4, 5, 6]
    assert [v.id for v in vectors] == [
        "supply-chain",
        "data-poisoning",
        "rdma-blind-spot",
        "gradient-injection",
        "gpu-memory-leakage",
        "container-escape",
    ]


def test_collectors_sit_where_the_seed_places_them() -> None:
    catalog = default_catalog()
    placed = {c.id: set(c.observes) for c in catalog.collectors}
    assert placed["dcgm-exporter"] == {ElementKind.GPU}
    assert placed["slurm-exporter"] == {ElementKind.SCHEDULER}
    assert ElementKind.HCA in placed["ib-counters"]
    assert placed["ebpf-checkpoints"] == {ElementKind.WEIGHTS}
    assert {"node-exporter", "falco", "tetragon"} <= {
        c.id for c in catalog.collectors_for(ElementKind.NODE)
    }


def test_all_six_vectors_converge_on_the_weights() -> None:
    catalog = default_catalog()
    assert len(catalog.vectors_for(ElementKind.WEIGHTS)) == 6
    assert len(catalog.try_this) == 4
    assert {b.id for b in catalog.bridges} == {
        "business",
        "organization",
        "people",
        "business_lines",
    }
