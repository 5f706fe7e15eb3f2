"""The WHERE builder: clauses and parameters in order, values never formatted into the SQL."""

from __future__ import annotations

from datetime import datetime

from hpcscope.store.filters import Where


def test_no_filter_is_no_where() -> None:
    where = Where().equals("node", None).among("job_id", None).window(None, None)
    assert (where.sql(), where.params) == ("", [])


def test_filters_in_order_with_bound_values() -> None:
    since, until = datetime(2026, 1, 1), datetime(2026, 1, 2)
    where = Where().equals("node", "gpu01").among("job_id", ["1'; DROP", "2"]).window(since, until)
    assert where.sql() == "WHERE node = ? AND job_id IN (?, ?) AND ts >= ? AND ts <= ?"
    assert where.params == ["gpu01", "1'; DROP", "2", since, until]


def test_an_empty_list_matches_nothing() -> None:
    assert Where().among("job_id", []).sql() == "WHERE FALSE"
