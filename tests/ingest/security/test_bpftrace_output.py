"""The sensor's bpftrace output parser: every kind, the byte maps, and typed errors."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcscope.ingest.security.bpftrace import (
    PRINTF_FIELDS,
    SensorRecord,
    parse_sensor_line,
    unescape_buffer,
)
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
        _printf("C\t1\t7\t7\t0\t1\t2\t4444\t1\t6\tcurl\t10.9.8.7\n"), source="s", line_number=3
    )
    assert (connect.family, connect.port, connect.address) == (2, 4444, "10.9.8.7")
    assert (connect.sock_type, connect.protocol, connect.comm) == (1, 6, "curl")
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
        (_printf("W\t1\n"), "data"),
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


def test_an_exec_with_its_argv_credentials_and_the_syscall_kinds() -> None:
    def one(text: str) -> SensorRecord:
        (record,) = parse_sensor_line(_printf(text), source="s", line_number=1)
        return record

    chunk = one("A\t5\t7\t0\tnsenter\\x00-t\\x001\\x00-m\\x00a\\x5cb\n")
    assert (chunk.kind, chunk.tid, chunk.index) == ("argv", 7, 0)
    assert unescape_buffer(chunk.data or "") == b"nsenter\0-t\x001\0-m\0a\\b"
    execed = one("E\t5\t7\t7\t0\t1\t1000\t1000\t0\t20\t/usr/bin/nsenter\n")
    assert (execed.kind, execed.old_uid, execed.old_euid, execed.uid, execed.euid) == (
        "exec", 1000, 1000, 0, 0)  # fmt: skip
    assert (execed.length, execed.path) == (20, "/usr/bin/nsenter")
    setuid = one("U\t5\t7\t7\t1000\t1\tsetresuid\t-1\t0\t-1\tx\n")
    assert (setuid.call, setuid.ruid, setuid.euid, setuid.suid) == ("setresuid", -1, 0, -1)
    creds = one("K\t5\t7\t7\t0\t1\t1000\t0\t0\t0\t0\t0\tx\n")
    assert (creds.old_uid, creds.old_euid, creds.new_uid, creds.euid) == (1000, 0, 0, 0)
    raw = one("R\t5\t7\t7\t0\t1\t17\t3\t768\ttcpdump\n")
    assert (raw.kind, raw.family, raw.sock_type, raw.protocol) == ("socket", 17, 3, 768)
    module = one("L\t5\t7\t7\t0\t1\tfinit_module\t3\t0\tinsmod\thello.ko\n")
    assert (module.call, module.fd, module.path) == ("finit_module", 3, "hello.ko")
    assert one("l\t6\t7\t7\t0\n").ret == 0
    unlink = one("Z\t5\t7\t7\t0\t1\tunlinkat\t-100\t0\trm\t/data/a b\n")
    assert (unlink.call, unlink.fd, unlink.flags, unlink.path) == ("unlinkat", -100, 0, "/data/a b")
