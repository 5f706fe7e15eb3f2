"""The streaming Kineto parser on real traces and on broken ones."""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import IO, Any

import pytest

from hpcscope.ingest.traces.kineto import TraceError, rank_from_name, read_kineto
from hpcscope.model.trace_events import EventKind
from tests.support.paths import FIXTURES

TRACES = FIXTURES / "traces"
HTA0 = TRACES / "hta_trace_filter_2rank" / "sampled_rank-0.json.gz"


def test_reads_the_hta_sample() -> None:
    trace = read_kineto(HTA0)
    assert (trace.rank, trace.rank_from, trace.world_size, trace.backend) == (
        0,
        "distributedInfo",
        128,
        "nccl",
    )
    names = set(trace.events.names)
    assert {"ProfilerStep#551", "ProfilerStep#552"} <= names
    assert (trace.events.kind == EventKind.KERNEL).sum() > 1000
    assert trace.problems == ()


@pytest.mark.parametrize("block", [4096, 65536, 1 << 20])
def test_block_size_does_not_change_the_result(block: int) -> None:
    reference = read_kineto(HTA0)
    other = read_kineto(HTA0, block_bytes=block)
    assert len(other.events) == len(reference.events)
    assert other.events.ts_us.tolist() == reference.events.ts_us.tolist()


def test_rank_from_file_name() -> None:
    assert rank_from_name("rank-3.json") == 3
    assert rank_from_name("worker7_step_12.1694128201553.pt.trace.json") == 7
    assert rank_from_name("trace.json") is None


def _raw(path: Path = HTA0) -> bytes:
    return gzip.decompress(path.read_bytes())


def test_truncated_gzip_keeps_the_events_before_the_cut(tmp_path: Path) -> None:
    data = HTA0.read_bytes()
    cut = tmp_path / "rank-0.json.gz"
    cut.write_bytes(data[: len(data) // 2])
    trace = read_kineto(cut)
    assert 0 < len(trace.events) < len(read_kineto(HTA0).events)
    assert any("compressed stream broken" in p for p in trace.problems)


def test_truncated_json_is_partial(tmp_path: Path) -> None:
    raw = _raw()
    cut = tmp_path / "rank-0.json"
    cut.write_bytes(raw[: len(raw) * 2 // 3])
    trace = read_kineto(cut, block_bytes=8192)
    assert len(trace.events) > 100
    assert any("file ends inside the traceEvents array" in p for p in trace.problems)


def test_invalid_json_names_line_and_column(tmp_path: Path) -> None:
    text = '{"traceEvents": [\n  {"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 2},\n'
    text += '  {"ph": "X", "cat": "cpu_op", "name": "b", "ts": 3, "dur": @},\n'
    text += '  {"ph": "X", "cat": "cpu_op", "name": "c", "ts": 5, "dur": 1}\n]}\n'
    bad = tmp_path / "rank-0.json"
    bad.write_text(text)
    with pytest.raises(TraceError) as info:
        read_kineto(bad)
    assert info.value.line == 3
    assert info.value.column is not None and info.value.column > 40
    assert str(bad) in info.value.describe()


def _deep_error_text() -> tuple[str, int, int]:
    """A trace whose invalid value sits on line ~3000, far past the first blocks; returns
    the text, the bad line and its column."""
    good = '  {"ph": "X", "cat": "cpu_op", "name": "op", "tid": 1, "ts": %d, "dur": 1},\n'
    lines = ['{"traceEvents": [\n'] + [good % i for i in range(3000)]
    bad = '  {"ph": "X", "cat": "cpu_op", "name": "op", "tid": 1, "ts": 1, "dur": @},\n'
    lines.append(bad)
    lines.append('  {"ph": "X", "cat": "cpu_op", "name": "op", "tid": 1, "ts": 2, "dur": 1}\n]}\n')
    return "".join(lines), len(lines) - 1, bad.index("@") + 1


class _OneWay(io.RawIOBase):
    """A stream that cannot seek (like a member of a streamed tar archive)."""

    def __init__(self, data: bytes) -> None:
        self.inner = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        chunk = self.inner.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)


@pytest.mark.parametrize("form", ["file", "gzip file", "seekable stream", "one-way stream"])
def test_error_far_into_the_file_names_its_line_and_column(tmp_path: Path, form: str) -> None:
    """Lines are counted only when an error needs them (the input is read again), or as the
    blocks go by when it cannot be read again: the same line and column either way."""
    text, line, column = _deep_error_text()
    data = text.encode()
    path = tmp_path / "rank-0.json"
    stream: IO[bytes] | None = None
    if form == "file":
        path.write_bytes(data)
    elif form == "gzip file":
        path.write_bytes(gzip.compress(data))
    elif form == "seekable stream":
        stream = io.BytesIO(gzip.compress(data))
    else:
        stream = io.BufferedReader(_OneWay(data))
    with pytest.raises(TraceError) as info:
        read_kineto(path, stream=stream, block_bytes=4096)
    assert (info.value.line, info.value.column) == (line, column)


def test_cut_far_into_the_file_names_its_line(tmp_path: Path) -> None:
    text, line, _ = _deep_error_text()
    path = tmp_path / "rank-0.json"
    path.write_bytes(text.encode()[: text.index('"dur": @')])
    trace = read_kineto(path, block_bytes=4096)
    assert len(trace.events) == 3000
    assert f"(line {line})" in trace.problems[0]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file"),
        (b"[1, 2]", "expected a JSON object"),
        (b'{"schemaVersion": 1}', "no traceEvents array"),
    ],
)
def test_not_a_trace(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "rank-0.json"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message):
        read_kineto(path)


def test_no_rank_anywhere(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_bytes(b'{"traceEvents": []}')
    with pytest.raises(TraceError, match="cannot tell which rank"):
        read_kineto(path)


def test_boundary_inside_a_string_is_not_a_cut(tmp_path: Path) -> None:
    tricky = "x}, {y" * 50
    events = ",".join(
        f'{{"ph": "X", "cat": "cpu_op", "name": "{tricky}{i}", "tid": 1, "ts": {i}, "dur": 1}}'
        for i in range(200)
    )
    path = tmp_path / "rank-2.json"
    path.write_text('{"traceEvents": [' + events + "]}")
    trace = read_kineto(path, block_bytes=1024)
    assert len(trace.events) == 200
    assert trace.events.names[0].startswith("x}, {y")


def _events_of(tmp_path: Path, events: list[str]) -> list[tuple[str, float]]:
    path = tmp_path / "rank-0.json"
    path.write_text('{"traceEvents": [\n' + ",\n".join(events) + "\n]}\n")
    trace = read_kineto(path)
    assert trace.problems == ()
    names, times = trace.events.name.tolist(), trace.events.ts_us.tolist()
    return [(trace.events.names[n], t) for n, t in zip(names, times, strict=True)]


ODD = '{"cat": "cpu_op", "name": "odd", "tid": 1, "ts": "100", "dur": 1%s}'


@pytest.mark.parametrize("odd", [None, ODD % "", ODD % ', "ph": "Z"'])
def test_only_complete_events_are_kept_typed_or_converted_one_by_one(
    tmp_path: Path, odd: str | None
) -> None:
    # every phase of the Chrome trace format with a kept category and a duration: only "X"
    # (and an event without a phase) is a complete event; ``odd`` adds an event the typed
    # decoder refuses (a time written as a string; a phase it does not know), so that block
    # is converted event by event, with the same result
    phases = "XBEiICbnestfSTpFPNODMVvRc()"
    events = [
        f'{{"ph": "{p}", "cat": "cpu_op", "name": "op{p}", "tid": 1, "ts": {i}, "dur": 1}}'
        for i, p in enumerate(phases)
    ]
    events.append('{"cat": "cpu_op", "name": "no phase", "tid": 1, "ts": 99, "dur": 1}')
    if odd is not None:
        events.append(odd)
    expected = [("opX", 0.0), ("no phase", 99.0)]
    if odd == ODD % "":
        expected.append(("odd", 100.0))
    assert _events_of(tmp_path, events) == expected


KERNEL = (
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 3, "ts": 5, "dur": 2, '
    '"args": {"correlation": 9, "stream": 7, "device": 0}}'
)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        # a category Kineto never wrote (the known-category decoder refuses the block)
        ('{"ph": "X", "cat": "not_a_kineto_category", "name": "u", "ts": 7, "dur": 1}', []),
        # "args": null (refused too: only the next decoder allows it)
        (
            '{"ph": "X", "cat": "cpu_op", "name": "n", "tid": 1, "ts": 8, "dur": 1, "args": null}',
            [("n", EventKind.CPU_OP, 1, -1)],
        ),
        ('{"ph": "i", "cat": "cpu_instant_event", "name": "i", "ts": 9}', []),
    ],
)
def test_any_category_and_null_args_read_as_the_known_ones(
    tmp_path: Path, extra: str, expected: list[tuple[str, EventKind, int, int]]
) -> None:
    path = tmp_path / "rank-0.json"
    path.write_text('{"traceEvents": [\n' + KERNEL + ",\n" + extra + "\n]}\n")
    events = read_kineto(path).events
    got = [
        (events.names[n], EventKind(k), t, c)
        for n, k, t, c in zip(
            events.name.tolist(),
            events.kind.tolist(),
            events.thread.tolist(),
            events.correlation.tolist(),
            strict=True,
        )
    ]
    assert got == [("k", EventKind.KERNEL, 7, 9), *expected]
