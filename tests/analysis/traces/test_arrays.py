"""The array helpers are numpy's own functions without ``numpy.ma``: the same answers."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hpcscope.analysis.traces.arrays import distinct, median, member_of

_INTS = hnp.arrays(np.int64, st.integers(0, 40), elements=st.integers(-5, 30))
_FLOATS = hnp.arrays(np.float64, st.integers(0, 40), elements=st.floats(-1e3, 1e3, allow_nan=False))


@given(values=st.one_of(_INTS, _FLOATS))
def test_distinct_is_np_unique(values: npt.NDArray[Any]) -> None:
    ours = distinct(values)
    assert ours.dtype == values.dtype
    assert ours.tolist() == np.unique(values).tolist()


@given(values=_INTS, members=_INTS)
def test_member_of_is_np_isin(values: npt.NDArray[Any], members: npt.NDArray[Any]) -> None:
    ours = member_of(values, members)
    assert ours.dtype == np.bool_ and ours.shape == values.shape
    assert ours.tolist() == np.isin(values, members).tolist()


@given(values=_FLOATS, members=_FLOATS)
def test_member_of_is_np_isin_on_floats(
    values: npt.NDArray[Any], members: npt.NDArray[Any]
) -> None:
    assert member_of(values, members).tolist() == np.isin(values, members).tolist()


_GRIDS = hnp.arrays(
    np.float64,
    hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=6),
    elements=st.one_of(st.floats(-1e6, 1e6, allow_nan=False), st.just(np.nan)),
)


@given(values=_GRIDS, data=st.data())
def test_median_is_np_median_bit_for_bit(values: npt.NDArray[Any], data: st.DataObject) -> None:
    axis = data.draw(st.one_of(st.none(), st.integers(0, values.ndim - 1)))
    ours, theirs = median(values, axis), np.median(values, axis=axis)
    assert type(ours) is type(theirs)
    assert np.asarray(ours).tobytes() == np.asarray(theirs).tobytes() or (
        np.array_equal(ours, theirs, equal_nan=True)
        and np.array_equal(np.isnan(ours), np.isnan(theirs))
    )


def test_median_of_a_list_and_of_integers() -> None:
    assert median([3.0, 1.0, 2.0, 10.0]) == np.median([3.0, 1.0, 2.0, 10.0]) == 2.5
    assert median(np.array([1, 2, 4])) == np.median(np.array([1, 2, 4]))  # np.median's own
