""":class:`LustreAt` (by bisection) answers what :func:`lustre_at` (a scan) answers, to the
bit, for intervals of any lengths and overlaps and any time asked."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.telemetry_rules.residual import LustreAt, LustreInterval, lustre_at

T0 = datetime(2026, 12, 1)

intervals = st.lists(
    st.builds(
        lambda start, length, read, write: LustreInterval(
            T0 + timedelta(seconds=start), T0 + timedelta(seconds=start + length), read, write
        ),
        st.integers(0, 120),
        st.one_of(st.integers(0, 10), st.integers(0, 400)),  # a few long: the first snapshot
        st.floats(0, 1e9, allow_nan=False),
        st.floats(0, 1e9, allow_nan=False),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(items=intervals, asked=st.lists(st.integers(-10, 200), max_size=20))
def test_bisection_equals_the_scan(items: list[LustreInterval], asked: list[int]) -> None:
    at = LustreAt(items)
    for seconds in asked:
        ts = T0 + timedelta(seconds=seconds)
        assert at(ts) == lustre_at(items, ts)
