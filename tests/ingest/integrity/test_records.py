"""Parsing the hook's JSON lines: good lines kept, bad ones named by file, line and field."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hpcscope.ingest.integrity.records import IntegrityRecordError, parse_lines, parse_record
from tests.support.integrity_records import K, gradients, step_lines


def test_a_line_round_trips() -> None:
    grads = gradients(4, seed=1)
    line = step_lines(grads, step=5)[2]
    record = parse_record(line, source="rank-2.jsonl", line_number=6)
    assert (record.rank, record.step, record.world_size, record.node, record.gpu) == (
        2, 5, 4, "node1", 0,
    )  # fmt: skip
    assert record.norm() == pytest.approx(float(np.linalg.norm(grads[2])))
    assert record.sketch().shape == (K,)
    # the whole-bucket form: witnesses of step 5 are 5 mod 4 = 1 and 2
    assert [(p.slice, p.of) for p in record.buckets[0].reduced] == [(0, 1)]
    assert (
        parse_record(step_lines(grads, step=5)[0], source="x", line_number=1).buckets[0].reduced
        == ()
    )


def test_sliced_witness_reports_round_trip() -> None:
    grads = gradients(4, seed=1)
    record = parse_record(step_lines(grads, step=5, sliced=True)[2], source="x", line_number=1)
    # rank 2 at step 5 witnesses slices (2 - 5) mod 4 = 1 and the one before it, 0
    assert [(p.slice, p.of) for p in record.buckets[0].reduced] == [(0, 4), (1, 4)]
    assert all(p.sketch.shape == (K,) for p in record.buckets[0].reduced)


@pytest.mark.parametrize(
    ("reduced", "message"),
    [
        ({"reduced_slices": {"slice": 0}}, "reduced_slices: expected a list"),
        ({"reduced_slices": [{"slice": 4, "of": 4, "sketch": [0.0] * K}]}, "slice 4 of 4"),
        ({"reduced_slices": [{"slice": 0, "of": 0, "sketch": [0.0] * K}]}, "of: expected"),
        ({"reduced_slices": [{"slice": 1, "of": 4, "sketch": [0.0]}]}, "sketch: expected 16"),
        (
            {"reduced_slices": [{"slice": 1, "of": 4, "sketch": [0.0] * K}] * 2},
            "slice 1 twice",
        ),
        ({"reduced_sketch": [0.0] * K, "reduced_slices": []}, "give one, not both"),
    ],
)
def test_bad_witness_reports_are_named(reduced: dict[str, object], message: str) -> None:
    raw = json.loads(step_lines(gradients(4, seed=1), step=5, sliced=True)[2])
    bucket = raw["buckets"][0]
    bucket.pop("reduced_slices")
    bucket.update(reduced)
    with pytest.raises(IntegrityRecordError, match=message):
        parse_record(json.dumps(raw), source="x.jsonl", line_number=3)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": "other/1"}, "x.jsonl:3: format: format 'other/1'"),
        ({"rank": 9}, "x.jsonl:3: rank: 9 is not below world_size 4"),
        ({"sketch_dim": 3}, "x.jsonl:3: sketch: expected 3 numbers, got 16"),
        ({"gpu": "zero"}, "x.jsonl:3: gpu: expected an integer >= 0 or null"),
        ({"buckets": []}, "x.jsonl:3: buckets: expected a non-empty list"),
        ({"ts": "yesterday"}, "x.jsonl:3: ts: expected epoch seconds"),
    ],
)
def test_bad_fields_are_named(change: dict[str, object], message: str) -> None:
    raw = json.loads(step_lines(gradients(4, seed=1), step=0)[1])
    raw.update(change)
    with pytest.raises(IntegrityRecordError) as info:
        parse_record(json.dumps(raw), source="x.jsonl", line_number=3)
    assert info.value.describe().startswith(message)


def test_bad_lines_are_reported_and_good_ones_kept() -> None:
    lines = step_lines(gradients(4, seed=1), step=0)
    batch = [(1, lines[0]), (2, "{not json"), (3, ""), (4, lines[1])]
    parsed = parse_lines(batch, source="rank.jsonl")
    assert [r.rank for r in parsed.records] == [0, 1]
    assert [e.line for e in parsed.errors] == [2]
    assert parsed.errors[0].describe().startswith("rank.jsonl:2: not JSON")


def test_nonfinite_values_written_as_null_read_as_nonfinite() -> None:
    import orjson

    raw = json.loads(step_lines(gradients(4, seed=1), step=0)[1])
    raw["buckets"][0].update(norm=float("nan"), nonfinite=3)
    raw["buckets"][0]["sketch"][0] = float("inf")
    line = orjson.dumps(raw)  # what the hook writes: NaN and Inf become null
    assert b'"norm":null' in line
    record = parse_record(line, source="x", line_number=1)
    assert record.norm() == float("inf") and record.nonfinite() == 3
    assert np.isnan(record.sketch()[0])
