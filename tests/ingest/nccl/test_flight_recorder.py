"""Flight-recorder dumps: JSON and original pickles; the restricted unpickler refuses code."""

from __future__ import annotations

import json
import os
import pickle
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from fuzz import hostile
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.ingest.nccl.flight_recorder import (
    FlightRecorderError,
    looks_like_flight_recorder,
    parse_flight_recorder,
    rank_from_name,
    read_flight_recorder,
)
from hpcscope.ingest.nccl.safe_pickle import UnsafePickleError, restricted_loads
from hpcscope.model.bounds import BoundExceeded
from tests.ingest.nccl.nccl_fixtures import FR_CASES, NCCL
from tests.support.paths import REPO_ROOT

JSON_DUMP = NCCL / "pytorch_flight_recorder_dump_rank12.json"
PICKLE_DUMP = FR_CASES / "gpu_error_1st" / "_dump_12"


def test_json_dump_schema_29() -> None:
    dump = read_flight_recorder(JSON_DUMP)
    assert (dump.rank, dump.version, dump.nccl_version) == (12, "2.9", "2.27.3")
    assert len(dump.pg_configs) == 13 and len(dump.entries) == 27
    tp = dump.config("41")
    assert tp is not None and (tp.desc, tp.ranks) == ("TENSOR_MODEL_PARALLEL_GROUP", (12, 13))
    assert {e.state for e in dump.entries} == {"scheduled"}
    first = dump.entries[0]
    assert (first.pg_local_id, first.pg_name, first.pg_desc) == (
        5,
        "41",
        "TENSOR_MODEL_PARALLEL_GROUP",
    )
    assert (first.collective_seq_id, first.op, first.input_sizes) == (
        42806,
        "_all_gather_base",
        ((4096, 1, 5120),),
    )
    assert first.timeout_seconds == pytest.approx(180.0)
    send = next(e for e in dump.entries if e.is_p2p)
    assert send.seq == send.p2p_seq_id == 11977 and send.op == "recv"
    by_id = {s.local_id: s for s in dump.pg_status}
    assert (by_id["5"].name, by_id["5"].name_inferred) == ("41", False)
    assert (by_id["5"].last_enqueued, by_id["5"].last_completed) == (42817, 42805)
    assert (by_id["0"].name, by_id["0"].name_inferred) == ("0", True)
    assert dump.warnings == ()


def test_original_pickle_holds_the_same_data_as_the_json() -> None:
    from_pickle = read_flight_recorder(PICKLE_DUMP)
    from_json = read_flight_recorder(JSON_DUMP)
    assert from_pickle.entries == from_json.entries
    assert from_pickle.pg_configs == from_json.pg_configs
    assert from_pickle.pg_status == from_json.pg_status
    assert from_pickle.rank == 12


@pytest.mark.parametrize("case", sorted(p.name for p in FR_CASES.iterdir()))
def test_every_nvrx_pickle_reads(case: str) -> None:
    dumps = [read_flight_recorder(p) for p in sorted((FR_CASES / case).glob("_dump_*"))]
    assert sorted(d.rank for d in dumps if d.rank is not None) == list(range(16))
    for dump in dumps:
        assert dump.version == "2.9" and dump.pg_status and dump.warnings == ()
    # a rank whose GIL is held enqueues nothing: its buffer can be empty
    assert sum(len(d.entries) for d in dumps) > 100


def test_rank_from_name() -> None:
    assert rank_from_name(Path("/tmp/_dump_7")) == 7
    assert rank_from_name(Path("nccl_trace_rank_15.pkl")) == 15
    assert rank_from_name(Path("dump.json")) is None


def test_unknown_keys_are_warned_once_and_read_around() -> None:
    document = json.loads(JSON_DUMP.read_text())
    document["future_field"] = 1
    for entry in document["entries"]:
        entry["new_timing_ns"] = 5
    dump = parse_flight_recorder(json.dumps(document).encode(), source="d.json", rank=3)
    assert dump.rank == 3 and len(dump.entries) == 27
    assert dump.warnings == (
        "unknown top-level keys read around: future_field",
        "unknown entry keys read around: new_timing_ns",
    )


def test_older_schema_with_seq_id_and_no_p2p_fields() -> None:
    document = {
        "version": "1.5",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
        "entries": [
            {
                "record_id": 0,
                "pg_id": 0,
                "process_group": ["0", "default_pg"],
                "seq_id": 4,
                "profiling_name": "nccl:all_reduce",
                "time_created_ns": 1,
                "input_sizes": [[8]],
                "input_dtypes": ["Float"],
                "output_sizes": [[8]],
                "output_dtypes": ["Float"],
                "state": "started",
            },
            {"record_id": 1, "profiling_name": "nccl:broadcast"},
        ],
    }
    dump = parse_flight_recorder(json.dumps(document).encode(), source="old.json", rank=0)
    assert len(dump.entries) == 1 and dump.entries[0].seq == 4 and not dump.entries[0].is_p2p
    assert dump.warnings == ("entries[1] skipped: missing field 'collective_seq_id'",)


def test_invalid_json_names_line_and_column() -> None:
    with pytest.raises(FlightRecorderError) as info:
        parse_flight_recorder(b'{"entries": [\n  {"a": }\n]}', source="bad.json", rank=0)
    assert (info.value.line, info.value.column) == (2, 9)
    assert info.value.describe().startswith("bad.json:2:9: invalid JSON")


def test_json_that_is_not_a_dump() -> None:
    with pytest.raises(FlightRecorderError, match="not a flight-recorder dump"):
        parse_flight_recorder(b'{"entries": 3, "pg_config": {}}', source="x.json", rank=0)
    assert not looks_like_flight_recorder(b'{"traceEvents": []}')
    assert looks_like_flight_recorder(PICKLE_DUMP.read_bytes())


# ----------------------------------------------------------------- restricted unpickler


class _Payload:
    """Unpickling this would run ``os.system`` (the classic ``__reduce__`` attack)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


@dataclass
class _Plain:
    value: int


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_reduce_payload_is_refused_and_nothing_runs(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "pwned"
    data = pickle.dumps({"entries": [_Payload(marker)]}, protocol=protocol)
    with pytest.raises(UnsafePickleError, match=r"refused pickle opcode (STACK_)?GLOBAL"):
        restricted_loads(data, source="evil.pkl")
    assert not marker.exists()


def test_reduce_payload_in_a_dump_file_is_refused_with_the_file_named(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "_dump_3"
    path.write_bytes(pickle.dumps({"entries": [], "x": _Payload(marker)}, protocol=2))
    with pytest.raises(UnsafePickleError) as info:
        read_flight_recorder(path)
    assert str(path) in info.value.describe() and "nothing was executed" in info.value.message
    assert not marker.exists()


def test_class_instance_set_and_bytes_are_refused() -> None:
    for value, opcode in (
        (_Plain(1), "GLOBAL"),
        ({1, 2}, "SET"),
        (b"raw", "BYTES"),
        (frozenset({1}), "FROZENSET"),
    ):
        with pytest.raises(UnsafePickleError, match=rf"refused pickle opcode .*{opcode}"):
            restricted_loads(pickle.dumps(value, protocol=4), source="x.pkl")


def test_truncated_pickle_is_a_clear_error() -> None:
    data = PICKLE_DUMP.read_bytes()[:200]
    with pytest.raises(UnsafePickleError, match="truncated or corrupt"):
        restricted_loads(data, source="cut.pkl")


def test_no_module_uses_the_default_unpickler() -> None:
    """The only unpickling in src/ goes through the restricted class."""
    offenders = []
    for path in (REPO_ROOT / "src").rglob("*.py"):
        text = path.read_text()
        for needle in ("pickle.load(", "pickle.loads(", "pickle.Unpickler(", "import dill"):
            if needle in text:
                offenders.append(f"{path.name}: {needle}")
    assert offenders == []


_PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=8) | st.integers(), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(value=_PLAIN, protocol=st.integers(0, pickle.HIGHEST_PROTOCOL))
def test_plain_data_round_trips_at_every_protocol(value: object, protocol: int) -> None:
    assert restricted_loads(pickle.dumps(value, protocol=protocol), source="p") == value


# ----------------------------------------------------------------- bounds of what a pickle holds


@pytest.mark.parametrize(
    ("data", "bound"),
    [
        (hostile.pickle_cycle(0), "cycle"),  # 37 bytes: its entries list holds the dump itself
        (hostile.pickle_cycle(40), "cycle"),
        (hostile.pickle_shared(60), "objects"),  # 2**60 values as walked, 500 bytes
        (hostile.pickle_deep(100_000), "depth"),
    ],
)
def test_a_hostile_pickle_is_refused_fast_naming_the_bound(data: bytes, bound: str) -> None:
    started = time.monotonic()
    with pytest.raises(BoundExceeded) as refused:
        parse_flight_recorder(data, source="_dump_3", rank=3)
    assert time.monotonic() - started < 2.0
    assert refused.value.bound == bound and refused.value.source == "_dump_3"


def test_a_cycle_is_named_by_the_byte_that_refers_back() -> None:
    # PROTO 4 | EMPTY_LIST at 2 | MEMOIZE | BINGET 0 at 4 | APPEND | STOP
    with pytest.raises(BoundExceeded, match="reference cycle") as refused:
        restricted_loads(b"\x80\x04]\x94h\x00a.", source="x.pkl")
    assert refused.value.field == "byte 4"


def test_shared_references_within_the_bounds_still_read() -> None:
    shared = {"profiling_name": "nccl:all_reduce", "collective_seq_id": 1, "time_created_ns": 5}
    data = pickle.dumps({"entries": [shared, shared], "pg_config": {}}, protocol=4)
    assert len(parse_flight_recorder(data, source="x.pkl", rank=0).entries) == 2


def test_an_integer_of_a_million_digits_is_refused_at_its_opcode() -> None:
    with pytest.raises(UnsafePickleError, match="integer of"):
        restricted_loads(pickle.dumps({"entries": [], "version": 10**100_000}), source="x.pkl")
