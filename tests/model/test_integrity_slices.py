"""Witness slices of a bucket: a partition into whole sketch rows, each slice witnessed twice."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from hpcscope.model.integrity import slice_bounds, witnessed_slices


@given(
    world=st.integers(1, 64),
    step=st.integers(0, 10_000),
    numel=st.integers(1, 100_000),
    k=st.integers(1, 256),
)
def test_every_part_of_a_bucket_has_two_witnesses(
    world: int, step: int, numel: int, k: int
) -> None:
    witnessed = [witnessed_slices(rank, step, world, numel, k) for rank in range(world)]
    [of] = {w[0] for w in witnessed}
    counts = [0] * of
    for w in witnessed:
        assert len(set(w[1:])) == len(w[1:])
        for index in w[1:]:
            counts[index] += 1
    assert counts == [min(2, world)] * of
    bounds = [slice_bounds(numel, k, of, i) for i in range(of)]
    assert bounds[0][0] == 0 and bounds[-1][1] == numel
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
    assert all(start % k == 0 and start <= stop for start, stop in bounds)
    if of > 1:  # sliced: every rank takes two slices, none of them empty
        assert all(len(w) == 3 for w in witnessed)
        assert all(stop > start for start, stop in bounds)
