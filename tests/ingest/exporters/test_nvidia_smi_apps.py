"""``nvidia-smi --query-compute-apps`` and ``--query-gpu=index,uuid`` CSV."""

from __future__ import annotations

from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcscope.ingest.exporters.nvidia_smi_apps import (
    ComputeAppsFormatError,
    parse_compute_apps,
    parse_gpu_index,
)

UUID = "GPU-6f1c0b5e-2d63-4a3b-9d3e-1f6a1e0b9a01"
APPS = f"""\
timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]
2026/12/01 12:00:05.123, {UUID}, 31337, python3, 30720 MiB
2026/12/01 12:00:05.123, {UUID}, 31338, /usr/bin/ncu, [N/A]
2026/12/01 12:00:05.123, GPU-unknown, 1, x, 1 MiB
2026/12/01 12:00:05.123, {UUID}, abc, x, 1 MiB
"""


def test_processes_with_units_and_not_available() -> None:
    parsed = parse_compute_apps(APPS, node="gpu01", source="apps.csv", gpu_index={UUID: 3})
    rows = parsed.table.to_pylist()
    assert [(r["gpu"], r["pid"], r["process_name"], r["used_memory_bytes"]) for r in rows] == [
        (3, 31337, "python3", 30720 * 2**20),
        (3, 31338, "/usr/bin/ncu", None),
    ]
    assert rows[0]["ts"] == datetime(2026, 12, 1, 12, 0, 5, 123000)
    assert [(e.line, e.field) for e in parsed.errors] == [(4, "gpu_uuid"), (5, "pid")]


def test_noheader_nounits_needs_the_fields() -> None:
    text = f"{UUID}, 7, python3, 512\n"
    parsed = parse_compute_apps(
        text, node="n", source="s", gpu_index={UUID: 0},
        fields=["gpu_uuid", "pid", "process_name", "used_memory"], ts=datetime(2026, 1, 1),
    )  # fmt: skip
    assert parsed.table.to_pylist()[0]["used_memory_bytes"] == 512 * 2**20


def test_gpu_index() -> None:
    assert parse_gpu_index(f"index, uuid\n0, {UUID}\n", source="g") == {UUID: 0}
    with pytest.raises(ComputeAppsFormatError) as err:
        parse_gpu_index("index, name\n0, H100\n", source="g.csv")
    assert err.value.line == 1


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=80), max_size=6))
def test_any_rows_give_processes_or_typed_errors(lines: list[str]) -> None:
    text = APPS.splitlines()[0] + "\n" + "\n".join(x.replace("\r", "") for x in lines)
    parsed = parse_compute_apps(text, node="n", source="s", gpu_index={UUID: 0})
    assert all(isinstance(e, ComputeAppsFormatError) for e in parsed.errors)
    assert all(r["gpu"] == 0 and r["pid"] >= 0 for r in parsed.table.to_pylist())
