"""The column-wise decoding of instant vectors makes the table the per-series one makes."""

from __future__ import annotations

import json
from random import Random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.ingest.promql import PromqlResponseError, decode_answer
from hpcscope.ingest.promql.aggregates import gpu_key, gpu_table
from hpcscope.ingest.promql.matrix import dcgm_instant_to_samples, dcgm_series_to_samples
from hpcscope.model.backends import GPU_AGGREGATE_SCHEMA
from hpcscope.service.backends.vectors import decode_vector, gpu_columns

COLUMNS = [f.name for f in GPU_AGGREGATE_SCHEMA][4:]
FACTORS = {"energy_joules": 0.001, "max_fb_used_bytes": 1_048_576.0}

labels = st.fixed_dictionaries(
    {"gpu": st.sampled_from(["0", "1", "7"])},
    optional={
        "node": st.sampled_from(["gpu001", "gpu002"]),
        "hostname": st.sampled_from(["gpu001", "gpu003"]),
        "hpc_job": st.sampled_from(["", "0", "42", "43"]),
        "GPU_I_ID": st.sampled_from(["", "1", "2"]),
        "UUID": st.sampled_from(["GPU-a", "GPU-b"]),
    },
)
value = st.one_of(
    st.sampled_from(["NaN", "+Inf", "-Inf", "0", "1e3"]),
    st.floats(min_value=0, max_value=1e12, allow_nan=False).map(repr),
)
answer = st.lists(st.tuples(labels, value), max_size=12)


def _body(series: list[tuple[dict[str, str], str]]) -> bytes:
    result = [{"metric": m, "value": [1_764_633_600.125, v]} for m, v in series]
    return json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": result}}
    ).encode()


def _fitting(
    column: str, series: list[tuple[dict[str, str], str]]
) -> list[tuple[dict[str, str], str]]:
    """Integer and timestamp columns hold finite values in their range (or NaN)."""
    if column == "xid":
        return [(m, "NaN" if v == "NaN" else "79") for m, v in series]
    if column.endswith("_ts"):
        return [(m, "NaN" if v == "NaN" else "1764633541.25") for m, v in series]
    return series


@settings(max_examples=150, deadline=None)
@given(st.lists(answer, min_size=1, max_size=5), st.randoms(use_true_random=False))
def test_the_same_table_as_per_series(
    answers: list[list[tuple[dict[str, str], str]]], rng: Random
) -> None:
    # answers naming the same GPUs in the same order, in another, and other GPUs
    answers = [*answers, answers[0], rng.sample(answers[0], len(answers[0]))]
    chosen = rng.sample(COLUMNS, len(answers))
    bodies = {c: _body(_fitting(c, a)) for c, a in zip(chosen, answers, strict=True)}
    expected = gpu_table(
        {c: decode_answer(b, source="t").series for c, b in bodies.items()},
        schema=GPU_AGGREGATE_SCHEMA,
        factors=FACTORS,
        source="t",
    )
    found = gpu_columns(
        {c: decode_vector(b, source="t") for c, b in bodies.items()},
        schema=GPU_AGGREGATE_SCHEMA,
        factors=FACTORS,
        source="t",
    )
    assert found.schema == expected.schema
    assert found.to_pylist() == expected.to_pylist()


def test_a_bad_gpu_label_is_named() -> None:
    body = _body([({"node": "gpu001", "gpu": "0"}, "1"), ({"node": "gpu001", "gpu": "x"}, "1")])
    with pytest.raises(PromqlResponseError, match=r"'x' is not a GPU index") as caught:
        gpu_columns(
            {"observed_seconds": decode_vector(body, source="http://p q")},
            schema=GPU_AGGREGATE_SCHEMA,
            source="http://p q",
        )
    assert "observed_seconds[1].metric.gpu" in str(caught.value)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"status": "error", "errorType": "bad_data", "error": "parse"}', "bad_data: parse"),
        (b'{"status": "success", "data": {"resultType": "matrix", "result": []}}', "matrix"),
        (b'{"status": "success", "data": {"resultType": "vector", "result": [1]}}', "bad vector"),
        (
            b'{"status": "success", "data": {"resultType": "vector", "result": '
            b'[{"metric": {}, "value": [1, "one"]}]}}',
            "not a number",
        ),
        (b"<html>", "not an answer of the Prometheus API"),
    ],
)
def test_a_bad_answer_is_named(body: bytes, message: str) -> None:
    with pytest.raises(PromqlResponseError, match=message) as caught:
        decode_vector(body, source="http://prom/api/v1/query 'q'")
    assert "http://prom/api/v1/query 'q'" in str(caught.value)


def test_an_empty_answer_is_an_empty_table() -> None:
    table = gpu_columns(
        {"observed_seconds": decode_vector(_body([]), source="t")},
        schema=GPU_AGGREGATE_SCHEMA,
        source="t",
    )
    assert table.num_rows == 0 and table.schema == GPU_AGGREGATE_SCHEMA
    assert isinstance(table["first_ts"], pa.ChunkedArray)


named = st.tuples(
    labels,
    st.sampled_from(
        ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_FB_USED", "OTHER"]
    ),
).map(lambda pair: {**pair[0], "__name__": pair[1]})


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(named, value), max_size=16), st.randoms(use_true_random=False))
def test_newest_samples_the_same_rows_as_per_series(
    series: list[tuple[dict[str, str], str]], rng: Random
) -> None:
    body = _body(series)
    decoded = decode_answer(body, source="t").series
    keys = [gpu_key(s.labels, source="t", where="") for s in decoded]
    at = {
        k: 1_764_633_600.0 + rng.choice([0.0, 0.5, 15.0]) for k in keys if k and rng.random() < 0.8
    }
    expected = dcgm_series_to_samples(decoded, source="t", at=at)
    vector = decode_vector(body, source="t")
    found = dcgm_instant_to_samples(vector.labels, vector.values.tolist(), source="t", at=at)
    assert found.to_pylist() == expected.to_pylist()
