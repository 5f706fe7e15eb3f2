"""YAML within bounds: alias cycles, alias bombs and deep nesting are typed errors, fast."""

from __future__ import annotations

import time

import pytest
import yaml
from fuzz import hostile
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.model import bounded_yaml
from hpcscope.model.bounds import BoundExceeded


@pytest.mark.parametrize("variant", range(4))
def test_a_self_referencing_anchor_is_refused_at_its_alias(variant: int) -> None:
    text = hostile.yaml_cycle(variant).decode()
    with pytest.raises(BoundExceeded, match=r"alias \*\w+ refers to the node it is in") as refused:
        bounded_yaml.safe_load(text, source="site.yaml")
    assert refused.value.bound == "cycle" and refused.value.source == "site.yaml"
    assert refused.value.line is not None and refused.value.column is not None


def test_aliases_doubling_are_counted_as_walked_and_refused_before_construction() -> None:
    started = time.monotonic()
    with pytest.raises(BoundExceeded) as refused:
        bounded_yaml.safe_load(hostile.yaml_laughs(9).decode(), source="lol.yaml")  # 9**10
    assert refused.value.bound == "objects" and time.monotonic() - started < 2


@pytest.mark.parametrize("text", [hostile.yaml_deep(100_000).decode(), "- " * 5000 + "x\n"])
def test_deep_nesting_is_refused_with_its_line(text: str) -> None:
    with pytest.raises(BoundExceeded) as refused:
        bounded_yaml.safe_load(text, source="deep.yaml")
    assert refused.value.bound == "depth" and refused.value.line == 1


def test_merge_keys_and_shared_anchors_within_the_bounds_read_as_pyyaml_reads_them() -> None:
    text = "base: &b {x: 1, y: [1, 2]}\nuse: *b\nmerged:\n  <<: *b\n  z: 3\n"
    assert bounded_yaml.safe_load(text, source="x") == yaml.safe_load(text)
    node, data = bounded_yaml.compose_and_load(text, source="x")
    assert isinstance(node, yaml.MappingNode) and data == yaml.safe_load(text)


def test_not_yaml_is_pyyamls_error_and_empty_is_none() -> None:
    with pytest.raises(yaml.YAMLError):
        bounded_yaml.safe_load("a: [1, 2\n", source="x")
    assert bounded_yaml.safe_load("", source="x") is None


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=2048) | st.text(alphabet="[]{}&*ab: -\n,", max_size=400).map(str.encode))
def test_any_input_reads_or_raises_a_typed_error_quickly(data: bytes) -> None:
    started = time.monotonic()
    try:
        bounded_yaml.safe_load(data.decode("utf-8", errors="replace"), source="x")
    except (BoundExceeded, yaml.YAMLError):
        pass
    assert time.monotonic() - started < 2
