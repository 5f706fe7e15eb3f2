"""The training recorder's lines: every field checked; a bad line is an error naming the file
and line, and the lines around it are kept; no input makes the parser raise."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.ingest.integrity.training_events import TrainingEventError, parse_event_lines
from hpcscope.model.training_events import FORMAT

LOAD = {"format": FORMAT, "kind": "load", "job_id": "4242", "node": "gpu01", "gpu": 3,
        "rank": 0, "pid": 5120, "ts": 1796126400.5, "path": "/lustre/ckpt/a.pt",
        "weights_only": False, "owner": "bob"}  # fmt: skip
WINDOW = {"format": FORMAT, "kind": "shard_loss", "job_id": "4242", "node": "gpu01", "gpu": 3,
          "rank": 0, "pid": 5120, "ts": 1796126460.0, "window": 7,
          "shards": {"shard-0001": [2.31, 64], "shard-0002": [2.29, 64]}}  # fmt: skip


def _lines(*records: object) -> list[tuple[int, bytes]]:
    return [(i + 1, (r if isinstance(r, bytes) else json.dumps(r).encode()))
            for i, r in enumerate(records)]  # fmt: skip


def test_both_kinds_parse() -> None:
    parsed = parse_event_lines(_lines(LOAD, WINDOW), source="training-0.jsonl")
    assert parsed.errors == []
    load, window = parsed.events
    assert (load.path, load.weights_only, load.owner, load.line) == ("/lustre/ckpt/a.pt", False,
                                                                     "bob", 1)  # fmt: skip
    assert window.window == 7 and dict(window.shards)["shard-0002"] == (2.29, 64)


def test_bad_lines_are_named_and_skipped() -> None:
    bad = [
        b"{not json",
        LOAD | {"format": "hpcscope-integrity/1"},
        LOAD | {"weights_only": "no"},
        LOAD | {"ts": -1},
        WINDOW | {"shards": {"s": [float("nan"), 3]}},
        WINDOW | {"shards": {"s": [1.0, 0]}},
        LOAD | {"kind": "exec"},
    ]
    parsed = parse_event_lines(_lines(LOAD, *bad, WINDOW), source="/spool/7/training-0.jsonl")
    assert [e.line for e in parsed.events] == [1, 9]
    assert [e.line for e in parsed.errors] == list(range(2, 9))
    assert all(isinstance(e, TrainingEventError) for e in parsed.errors)
    assert all(e.describe().startswith("/spool/7/training-0.jsonl:") for e in parsed.errors)
    assert "weights_only" in parsed.errors[2].describe()


_values = st.one_of(st.none(), st.integers(), st.text(max_size=5), st.floats(), st.booleans())
_mutated = st.dictionaries(
    st.sampled_from([*sorted(LOAD), "shards", "window"]), _values, max_size=12
).map(lambda d: json.dumps(LOAD | d).encode())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=80), _mutated), max_size=6))
def test_no_input_makes_the_parser_raise(lines: list[bytes]) -> None:
    parsed = parse_event_lines(_lines(*lines), source="f")
    assert len(parsed.events) + len(parsed.errors) <= len(lines)
