"""The bounds of a read: cycles, shared references, depth, values, expansion, time."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.model.bounds import (
    BoundExceeded,
    Deadline,
    ReadBounds,
    check_expansion,
    check_graph,
    loads_json,
)


def _tree_size(value: object) -> int:
    """Values as a consumer walks them (the reference check_graph must agree with)."""
    if isinstance(value, dict):
        return 1 + sum(_tree_size(k) + _tree_size(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return 1 + sum(_tree_size(v) for v in value)
    return 1


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=4), inner, max_size=5)
    ),
    max_leaves=60,
)


@settings(max_examples=200, deadline=None)
@given(_JSONISH)
def test_the_count_is_what_a_walk_meets(value: object) -> None:
    assert check_graph(value, source="x") == _tree_size(value)


@settings(max_examples=100, deadline=None)
@given(_JSONISH, st.integers(1, 40))
def test_a_document_within_or_past_the_bound_returns_or_raises_the_typed_error(
    value: object, limit: int
) -> None:
    bounds = ReadBounds(max_objects=limit)
    if _tree_size(value) > limit:
        with pytest.raises(BoundExceeded, match="values"):
            check_graph(value, source="x", bounds=bounds)
    else:
        assert check_graph(value, source="x", bounds=bounds) == _tree_size(value)


def test_shared_references_count_each_time_without_walking_them_again() -> None:
    level: list[object] = [1]
    for _ in range(40):
        level = [level, level]  # 2**41 values as walked, 41 lists
    started = time.monotonic()
    with pytest.raises(BoundExceeded) as refused:
        check_graph(level, source="shared.pkl")
    assert refused.value.bound == "objects" and time.monotonic() - started < 1
    small: list[object] = [1]
    for _ in range(10):
        small = [small, small]
    assert check_graph(small, source="x") == 2**11 - 1 + 2**10


def test_a_cycle_is_refused_naming_where_the_input_made_it() -> None:
    loop: list[object] = [1, 2]
    loop.append({"back": loop})
    with pytest.raises(BoundExceeded, match="reference cycle") as refused:
        check_graph(loop, source="loop.pkl", where=lambda c: "byte 7" if c is loop else None)
    assert refused.value.bound == "cycle" and refused.value.field == "byte 7"


def test_nesting_past_the_depth_is_refused_without_recursion() -> None:
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(BoundExceeded) as refused:
        check_graph(deep, source="deep.json")
    assert refused.value.bound == "depth"
    assert check_graph(deep, source="x", bounds=ReadBounds(max_depth=200_000)) == 100_001


def test_json_nested_past_the_interpreter_is_a_typed_error() -> None:
    with pytest.raises(BoundExceeded) as refused:
        loads_json("[" * 100_000 + "]" * 100_000, source="deep.json")
    assert refused.value.bound == "depth" and refused.value.source == "deep.json"
    assert loads_json('{"a": [1]}', source="x") == {"a": [1]}
    with pytest.raises(json.JSONDecodeError):
        loads_json("{", source="x")


def test_expansion_is_judged_past_the_floor_on_size_and_ratio() -> None:
    check_expansion(900_000, 10, source="x")  # under the floor: a small file of spaces
    with pytest.raises(BoundExceeded, match="200 times") as refused:
        check_expansion(3 << 20, 10_000, source="bomb.gz")
    assert (
        refused.value.bound == "ratio"
        and refused.value.field == "byte 10000 of the compressed input"
    )
    with pytest.raises(BoundExceeded) as too_big:
        check_expansion(
            5 << 20, 1 << 20, source="x", bounds=ReadBounds(max_decompressed_bytes=4 << 20)
        )
    assert too_big.value.bound == "bytes"


def test_the_deadline_raises_once_its_time_has_passed() -> None:
    now = [0.0]
    deadline = Deadline(10.0, source="slow.json", clock=lambda: now[0])
    deadline.check()
    now[0] = 10.5
    with pytest.raises(BoundExceeded, match="10 s") as refused:
        deadline.check("line 4")
    assert refused.value.bound == "seconds" and refused.value.field == "line 4"
