"""File tails (offset, partial lines, rotation), pipes, and the bounded event buffer."""

from __future__ import annotations

import io
import os
from pathlib import Path

import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.ingest.security.exec_cache import ExecJobCache
from hpcscope.ingest.security.falco import parse_falco_lines
from hpcscope.ingest.security.lines import ParseResult
from hpcscope.model.security_events import FALCO_ALERT_SCHEMA
from hpcscope.service.security.buffer import SecurityEventBuffer
from hpcscope.service.security.sources import FalcoSource, LineTail, TetragonSource, pump_stream

PROC = Path(__file__).resolve().parents[2] / "fixtures" / "security" / "proc"


def _alert(n: int) -> bytes:
    return orjson.dumps({"rule": f"r{n}", "priority": "Notice", "output_fields": {"evt.time": n}})


def test_tail_keeps_offset_and_waits_for_the_newline(tmp_path: Path) -> None:
    path = tmp_path / "events.json"
    tail = LineTail(path)
    assert tail.read().lines == []  # not there yet
    path.write_bytes(b"one\ntw")
    first = tail.read()
    assert (first.first_line, first.lines) == (1, [b"one"])
    with path.open("ab") as handle:
        handle.write(b"o\nthree\n")
    second = tail.read()
    assert (second.first_line, second.lines, second.rotated) == (2, [b"two", b"three"], False)
    assert tail.read().lines == []


def test_tail_follows_rotation_by_rename_and_by_truncation(tmp_path: Path) -> None:
    path = tmp_path / "falco.json"
    path.write_bytes(b"a\nb\n")
    tail = LineTail(path)
    assert tail.read().lines == [b"a", b"b"]
    os.rename(path, tmp_path / "falco.json.1")
    path.write_bytes(b"c\n")
    read = tail.read()
    assert (read.first_line, read.lines, read.rotated) == (1, [b"c"], True)
    path.write_bytes(b"")  # copytruncate: the file is now shorter than the offset
    assert tail.read().rotated
    path.write_bytes(b"d\n")
    read = tail.read()
    assert (read.first_line, read.lines, read.rotated) == (1, [b"d"], False)


def test_tail_from_end_skips_the_backlog(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_bytes(b"old\n")
    tail = LineTail(path, from_end=True)
    assert tail.read().lines == []
    with path.open("ab") as handle:
        handle.write(b"new\n")
    assert tail.read().lines == [b"new"]


@settings(max_examples=40, deadline=None)
@given(chunks=st.lists(st.binary(max_size=40), max_size=8))
def test_tail_returns_every_complete_line_once(
    tmp_path_factory: pytest.TempPathFactory, chunks: list[bytes]
) -> None:
    path = tmp_path_factory.mktemp("tail") / "f"
    path.write_bytes(b"")
    tail = LineTail(path)
    seen: list[bytes] = []
    numbers: list[int] = []
    for chunk in chunks:
        with path.open("ab") as handle:
            handle.write(chunk)
        read = tail.read()
        numbers += range(read.first_line, read.first_line + len(read.lines))
        seen += read.lines
    data = b"".join(chunks)
    assert seen == data.split(b"\n")[:-1]
    assert numbers == list(range(1, len(seen) + 1))


def test_falco_source_polls_into_the_buffer_with_line_numbers(tmp_path: Path) -> None:
    path = tmp_path / "falco.json"
    path.write_bytes(_alert(1) + b"\n{broken\n")
    buffer = SecurityEventBuffer()
    source = FalcoSource(path, buffer)
    assert source.poll().table.num_rows == 1
    with path.open("ab") as handle:
        handle.write(_alert(3) + b"\n")
    source.poll()
    drained = buffer.drain()
    assert drained.falco.column("rule").to_pylist() == ["r1", "r3"]
    assert drained.falco.column("source_line").to_pylist() == [1, 3]
    assert [(e.source, e.line) for e in drained.errors] == [(str(path), 2)]
    assert buffer.drain().falco.num_rows == 0


def test_tetragon_source_resolves_jobs_through_the_proc_root(tmp_path: Path) -> None:
    path = tmp_path / "tetragon.log"
    event = {"process_exec": {"process": {"exec_id": "x", "pid": 5151}}, "node_name": "gpu02"}
    path.write_bytes(orjson.dumps(event) + b"\n")
    buffer = SecurityEventBuffer()
    TetragonSource(path, buffer, proc_root=PROC).poll()
    [row] = buffer.drain().tetragon.to_pylist()
    assert (row["job_id"], row["job_step"], row["node_name"]) == ("5151", "batch", "gpu02")


def test_pump_reads_a_pipe_to_its_end_in_batches() -> None:
    stream = io.BytesIO(b"".join(_alert(n) + b"\n" for n in range(1, 8)) + b"garbage\n")
    buffer = SecurityEventBuffer()
    assert pump_stream(stream, "falco", buffer, batch_lines=3) == 8
    drained = buffer.drain()
    assert drained.falco.column("source_line").to_pylist() == list(range(1, 8))
    assert [(e.source, e.line) for e in drained.errors] == [("<stdin>", 8)]
    with pytest.raises(ValueError, match="kind"):
        pump_stream(io.BytesIO(b""), "zeek", buffer)
    tetragon = io.BytesIO(
        orjson.dumps({"process_exec": {"process": {"exec_id": "y", "pid": 4242}}})
    )
    pump_stream(tetragon, "tetragon", buffer, jobs=ExecJobCache(proc_root=PROC))
    assert buffer.drain().tetragon.column("job_id").to_pylist() == ["4242"]


def _result(first: int, count: int) -> ParseResult:
    return parse_falco_lines([_alert(n) for n in range(first, first + count)], source="s")


def test_buffer_is_bounded_and_drops_the_oldest() -> None:
    buffer = SecurityEventBuffer(max_rows=5)
    buffer.put("falco", _result(1, 3))
    buffer.put("falco", _result(4, 4))
    assert len(buffer) == 5
    drained = buffer.drain()
    assert drained.falco.column("event_time_ns").to_pylist() == [3, 4, 5, 6, 7]
    assert drained.dropped_rows == 2
    buffer.put("falco", _result(10, 9))
    drained = buffer.drain()
    assert drained.falco.column("event_time_ns").to_pylist() == [14, 15, 16, 17, 18]
    assert drained.dropped_rows == 4 and drained.tetragon.num_rows == 0


def test_buffer_refuses_wrong_kinds_and_schemas() -> None:
    buffer = SecurityEventBuffer()
    with pytest.raises(ValueError, match="kind"):
        buffer.put("zeek", _result(1, 1))
    with pytest.raises(ValueError, match="schema"):
        buffer.put("tetragon", _result(1, 1))
    with pytest.raises(ValueError, match="max_rows"):
        SecurityEventBuffer(max_rows=0)
    assert buffer.drain().falco.schema == FALCO_ALERT_SCHEMA


@given(batches=st.lists(st.integers(0, 12), max_size=10), bound=st.integers(1, 20))
def test_buffer_keeps_the_newest_rows_up_to_its_bound(batches: list[int], bound: int) -> None:
    buffer = SecurityEventBuffer(max_rows=bound)
    sent: list[int] = []
    for count in batches:
        buffer.put("falco", _result(len(sent) + 1, count))
        sent += range(len(sent) + 1, len(sent) + 1 + count)
    drained = buffer.drain()
    kept = drained.falco.column("event_time_ns").to_pylist()
    assert kept == sent[-bound:] if sent else kept == []
    assert drained.dropped_rows == max(0, len(sent) - bound)
    assert isinstance(drained.falco, pa.Table)
