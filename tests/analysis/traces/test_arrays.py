"""The array helpers are numpy's own functions without ``numpy.ma``: the same answers."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hpcscope.analysis.traces.arrays import distinct, member_of

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
