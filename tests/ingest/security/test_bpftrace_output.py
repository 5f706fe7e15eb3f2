"""The sensor's bpftrace output parser: every kind, the byte maps, and typed errors."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcscope.ingest.security.bpftrace import PRINTF_FIELDS, parse_sensor_line
from hpcscope.ingest.security.lines import SecurityEventError


def _printf(text: str) -> bytes:
    return json.dumps({"type": "printf", "data": text}).encode()


def test_each_kind_parses() -> None:
    (opened,) = parse_sensor_line(
        _printf("O\t10\t7\t42\t1000\t6\t3\t524288\tpython3\t/ckpt/a b\tc.pt\n"),
        source="s", line_number=2,
    )  # fmt: skip
    assert (opened.kind, opened.pid, opened.ppid, opened.fd, opened.flags, opened.comm) == (
        "open", 7, 6, 3, 524288, "python3")  # fmt: skip
    assert opened.path == "/ckpt/a b\tc.pt"  # the last field may hold tabs
    (connect,) = parse_sensor_line(
        _printf("C\t1\t7\t7\t0\t1\t2\t4444\tcurl\t10.9.8.7\n"), source="s", line_number=3
    )
    assert (connect.family, connect.port, connect.address) == (2, 4444, "10.9.8.7")
    assert parse_sensor_line(b'{"type": "attached_probes", "data": {"probes": 49}}',
                             source="s", line_number=4)[0].count == 49  # fmt: skip
    assert parse_sensor_line(b'{"type": "time", "data": "x"}', source="s", line_number=5) == []


def test_byte_maps_give_one_record_per_pid_and_fd() -> None:
    line = json.dumps({"type": "map", "data": {"@rb": {"7,3": 4096, "8,5": 1}}}).encode()
    records = parse_sensor_line(line, source="s", line_number=1)
    assert [(r.pid, r.fd, r.read_bytes, r.written_bytes) for r in records] == [
        (7, 3, 4096, None), (8, 5, 1, None)]  # fmt: skip
    line = json.dumps({"type": "map", "data": {"@wb": {"7,3": 12}}}).encode()
    assert parse_sensor_line(line, source="s", line_number=1)[0].written_bytes == 12


@pytest.mark.parametrize(
    ("line", "field"),
    [
        (b"not json", None),
        (_printf("Z\t1\n"), "data"),
        (_printf("O\t1\t2\n"), "data"),
        (_printf("O\tx\t7\t42\t1000\t6\t3\t0\tpython3\t/p\n"), "data.ns"),
        (json.dumps({"type": "map", "data": {"@rb": {"7": 1}}}).encode(), "data.@rb"),
    ],
)
def test_bad_lines_are_typed_errors_naming_the_field(line: bytes, field: str | None) -> None:
    with pytest.raises(SecurityEventError) as caught:
        parse_sensor_line(line, source="bpftrace", line_number=9)
    assert (caught.value.source, caught.value.line, caught.value.field) == ("bpftrace", 9, field)


@given(
    st.sampled_from(sorted(PRINTF_FIELDS)),
    st.lists(st.integers(-(2**40), 2**40), min_size=12, max_size=12),
    st.text(max_size=20),
)
def test_any_well_formed_line_round_trips(kind: str, numbers: list[int], text: str) -> None:
    name, fields = PRINTF_FIELDS[kind]
    text = text.replace("\n", " ").replace("\t", " ")
    values = [text if f in ("comm", "path", "address") else str(n)
              for f, n in zip(fields, numbers, strict=False)]  # fmt: skip
    (record,) = parse_sensor_line(_printf(kind + "\t" + "\t".join(values) + "\n"),
                                  source="s", line_number=1)  # fmt: skip
    assert record.kind == name
    for field, value in zip(fields, values, strict=True):
        got = getattr(record, field)
        assert got == (value if isinstance(got, str) or got is None else int(value))
