"""Properties of the log parsers: never crash; a line's parse does not depend on its prefix."""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.analysis.hangs.localize import localize_hang
from hpcscope.ingest.nccl.flight_recorder import parse_flight_recorder
from hpcscope.ingest.nccl.log_prefix import strip_launcher_prefix
from hpcscope.ingest.nccl.logs import NcclLogParse, parse_nccl_log_bytes, parse_nccl_log_text
from hpcscope.model.errors import SourceError
from tests.ingest.nccl.nccl_fixtures import NOT_LOGS, log_files

SAMPLE_LINES = sorted(
    {
        line
        for path in log_files()
        if path.name not in NOT_LOGS
        for line in path.read_text().splitlines()
        if line.strip()
    }
)

LAUNCHER_PREFIX = st.one_of(
    st.integers(0, 4096).map(lambda n: f"{n}: "),
    st.tuples(st.integers(0, 9), st.integers(0, 4096)).map(lambda t: f"[{t[0]},{t[1]}]<stdout>:"),
    st.tuples(st.integers(0, 9), st.integers(0, 4096)).map(lambda t: f"[{t[0]},{t[1]}]<stderr>: "),
    st.integers(1, 4_000_000).map(lambda n: f"[{n}] "),
    st.sampled_from(
        [
            "2025-02-18 12:54 ",
            "[2026-02-02 12:15:56] ",
            "2024-10-23T01:29:30.123456Z ",
            " 2025-02-18 12:54:07,123 ",
            "2024-10-23T01:29:30+02:00 ",
        ]
    ),
)


def _records(result: NcclLogParse) -> tuple[object, ...]:
    tests = tuple(
        (t.has_root, tuple(r.size_bytes for r in t.rows), len(t.devices)) for t in result.nccl_tests
    )
    return (
        tuple(result.nccl),
        tuple(result.watchdog),
        tuple(result.stragglers),
        tests,
        result.unknown_lines,
    )


@settings(max_examples=300, deadline=None)
@given(line=st.sampled_from(SAMPLE_LINES), prefixes=st.lists(LAUNCHER_PREFIX, max_size=3))
def test_parse_does_not_depend_on_launcher_prefix(line: str, prefixes: list[str]) -> None:
    plain = parse_nccl_log_text(line, source="s.log")
    prefixed = parse_nccl_log_text("".join(prefixes) + line, source="s.log")
    assert _records(prefixed) == _records(plain)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=400))
def test_never_crashes_on_arbitrary_text(text: str) -> None:
    result = parse_nccl_log_text(text, source="fuzz.log")
    assert result.lines == result.blank_lines + result.unknown_lines + result.parsed_lines


@settings(max_examples=200, deadline=None)
@given(
    line=st.sampled_from(SAMPLE_LINES),
    cut=st.integers(0, 300),
    junk=st.text(max_size=12).filter(lambda s: "\n" not in s),
    prefix=st.lists(LAUNCHER_PREFIX, max_size=2),
)
def test_never_crashes_on_garbled_sample_lines(
    line: str, cut: int, junk: str, prefix: list[str]
) -> None:
    garbled = "".join(prefix) + line[:cut] + junk + line[cut:]
    result = parse_nccl_log_text(garbled, source="g.log")
    assert result.lines == 1


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=300))
def test_bytes_never_crash_the_log_parser(data: bytes) -> None:
    parse_nccl_log_bytes(data, source="b.log")


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=300))
def test_bytes_never_crash_the_dump_parser(data: bytes) -> None:
    """Any bytes: a dump, or a SourceError naming the file; never another exception."""
    error: SourceError | None = None
    try:
        parse_flight_recorder(data, source="b.pkl", rank=0)
    except SourceError as exc:
        error = exc
    assert error is None or error.source == "b.pkl"


@given(rank=st.integers(0, 99999))
def test_launcher_rank_is_read_from_the_prefix(rank: int) -> None:
    assert strip_launcher_prefix(f"{rank}: NCCL WARN x").launcher_rank == rank
    assert strip_launcher_prefix(f"[1,{rank}]<stdout>:x").launcher_rank == rank


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=12,
)
_ENTRY_KEYS = st.sampled_from(
    ["record_id", "pg_id", "process_group", "collective_seq_id", "p2p_seq_id", "profiling_name",
     "time_created_ns", "input_sizes", "input_dtypes", "state", "is_p2p", "timeout_ms"]
)  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(
    entries=st.lists(st.dictionaries(_ENTRY_KEYS, _JSONISH, max_size=8), max_size=4),
    pg_config=st.dictionaries(st.text(max_size=4), _JSONISH, max_size=3),
    pg_status=st.dictionaries(st.text(max_size=4), _JSONISH, max_size=3),
    version=_JSONISH,
)
def test_malformed_dump_documents_never_crash(
    entries: list[dict[str, object]], pg_config: object, pg_status: object, version: object
) -> None:
    """Wrong types anywhere in a dump: skipped with a warning, never an exception."""
    document = {"version": version, "pg_config": pg_config, "pg_status": pg_status}
    document["entries"] = entries
    dump = parse_flight_recorder(json.dumps(document).encode(), source="m.json", rank=1)
    assert len(dump.entries) <= len(entries)
    # and the analysis takes whatever the parser let through
    localize_hang(dumps=[dump, replace(dump, rank=2, source="n.json")])
