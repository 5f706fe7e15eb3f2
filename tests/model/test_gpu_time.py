"""The charged GPU-seconds rule (:mod:`hpcscope.model.gpu_time`): its cases, and its Polars and
SQL forms agreeing with it on random values (NaN, nulls, negatives, no allocation)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import datetime

import polars as pl
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcscope.analysis.gpu_time import charged_gpu_seconds_exprs
from hpcscope.analysis.slo.events import efficiency_events
from hpcscope.model.gpu_time import charged_gpu_seconds, charged_gpu_seconds_sql
from hpcscope.model.schemas import JOB_GPU_SUMMARY_SCHEMA, JOB_SUMMARY_SCHEMA
from hpcscope.store import Store
from hpcscope.store.chargeback import seconds_by_account
from hpcscope.store.summaries import write_summaries

NAN = math.nan


@pytest.mark.parametrize(
    ("allocated", "observed", "useful", "expected"),
    [
        (100.0, 80.0, 30.0, (100.0, 30.0)),
        (100.0, 80.0, 130.0, (100.0, 100.0)),  # useful capped at allocated
        (None, 80.0, 30.0, (80.0, 30.0)),  # no allocation: observed
        (NAN, 80.0, 90.0, (80.0, 80.0)),  # NaN is not known either
        (None, None, 30.0, (0.0, 0.0)),  # nothing known: nothing charged
        (-5.0, 80.0, -1.0, (0.0, 0.0)),  # never negative
        (100.0, 80.0, NAN, (100.0, 0.0)),  # unknown useful: none
        (100.0, NAN, None, (100.0, 0.0)),
    ],
)
def test_the_rule(
    allocated: float | None,
    observed: float | None,
    useful: float | None,
    expected: tuple[float, float],
) -> None:
    assert charged_gpu_seconds(allocated, observed, useful) == expected


figure = st.one_of(
    st.none(),
    st.just(NAN),
    st.just(math.inf),
    st.floats(-1e3, 1e7, allow_nan=False),
    st.sampled_from([0.0, -0.0, 1.0]),
)
row = st.tuples(figure, figure, figure)


@given(st.lists(row, max_size=40))
def test_the_polars_form_agrees(
    rows: list[tuple[float | None, float | None, float | None]],
) -> None:
    frame = pl.DataFrame(
        rows, schema={"a": pl.Float64, "o": pl.Float64, "u": pl.Float64}, orient="row"
    )
    allocated, useful = charged_gpu_seconds_exprs("a", "o", "u")
    got = frame.select(allocated.alias("a"), useful.alias("u")).rows()
    assert got == [charged_gpu_seconds(*r) for r in rows]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with Store(tmp_path_factory.mktemp("gpu_time") / "s.duckdb") as store:
        yield store


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(row, max_size=30))
def test_the_sql_form_agrees(
    stores: Store, rows: list[tuple[float | None, float | None, float | None]]
) -> None:
    allocated, useful = charged_gpu_seconds_sql("a", "o", "u")
    columns = [[r[i] for r in rows] for i in range(3)]
    got = stores.query(
        f"SELECT {allocated} AS a, {useful} AS u FROM (SELECT unnest(?::DOUBLE[]) AS a, "
        "unnest(?::DOUBLE[]) AS o, unnest(?::DOUBLE[]) AS u, unnest(range(?)) AS i) ORDER BY i",
        [*columns, len(rows)],
    ).to_pylist()
    assert [(g["a"], g["u"]) for g in got] == [charged_gpu_seconds(*r) for r in rows]


def _summary(job: int, account: str, a: float | None, o: float, u: float) -> dict[str, object]:
    return {
        "job_id": str(job), "summarised_at": datetime(2026, 1, 2), "account": account,
        "exit_cause": "success", "end_time": datetime(2026, 1, 1), "gpus_observed": 1,
        "allocated_gpu_seconds": a, "observed_gpu_seconds": o, "useful_gpu_seconds": u,
        "verdict": "healthy",
    }  # fmt: skip


finite_or_nan = st.one_of(st.just(NAN), st.floats(-1e3, 1e7, allow_nan=False))


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),
            st.one_of(st.none(), finite_or_nan),
            finite_or_nan,
            finite_or_nan,
        ),
        min_size=1,
        max_size=12,
    )
)
def test_metrics_per_account_and_the_slo_charge_what_chargeback_charges(
    tmp_path_factory: pytest.TempPathFactory,
    jobs: list[tuple[str, float | None, float, float]],
) -> None:
    """``/metrics``' per-account sums (SQL over the store) and the efficiency SLO's events
    (Polars) use the rule on kept summaries with NaN and no allocation."""
    rows = [_summary(i, acc, a, o, u) for i, (acc, a, o, u) in enumerate(jobs)]
    expected: dict[str, list[float]] = {}
    for acc, a, o, u in jobs:
        charged = charged_gpu_seconds(a, o, u)
        sums = expected.setdefault(acc, [0.0, 0.0])
        sums[0] += charged[0]
        sums[1] += charged[1]
    with Store(tmp_path_factory.mktemp("metrics") / "s.duckdb") as store:
        summaries = pa.Table.from_pylist(rows, schema=JOB_SUMMARY_SCHEMA)
        write_summaries(store, summaries, JOB_GPU_SUMMARY_SCHEMA.empty_table()).result()
        got = {r["account"]: r for r in seconds_by_account(store)}
    assert set(got) == set(expected)
    for acc, (a, u) in expected.items():
        assert got[acc]["allocated_gpu_seconds"] == pytest.approx(a)
        assert got[acc]["useful_gpu_seconds"] == pytest.approx(u)
    frame = pl.from_arrow(summaries)
    assert isinstance(frame, pl.DataFrame)
    events = efficiency_events(frame.with_columns(pl.lit(None, dtype=pl.String).alias("qos")))
    per_job = [charged_gpu_seconds(a, o, u) for _, a, o, u in jobs]
    assert events.select("total", "good").rows() == [c for c in per_job if c[0] > 0]
