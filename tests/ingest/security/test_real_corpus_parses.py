"""Every line of the real corpus (tests/fixtures/security/real/) parses, and the fields the node
rules read come out of Tetragon's and Falco's own shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hpcscope.ingest.security.falco import parse_falco_lines
from hpcscope.ingest.security.tetragon import parse_tetragon_lines

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "security" / "real"


@pytest.mark.parametrize("path", sorted(REAL.glob("*/*.jsonl")), ids=lambda p: p.name)
def test_every_real_line_parses(path: Path) -> None:
    parse = parse_falco_lines if path.parent.name == "falco" else parse_tetragon_lines
    with path.open("rb") as stream:
        result = parse(stream, source=path.name)
    assert result.errors == ()
    assert result.table.num_rows == result.lines == len(path.read_bytes().splitlines())


def _tetragon(name: str) -> list[dict[str, Any]]:
    with (REAL / "tetragon" / name).open("rb") as stream:
        rows: list[dict[str, Any]] = parse_tetragon_lines(stream, source=name).table.to_pylist()
    return rows


def test_tetragon_kprobe_arguments_of_the_node_rules() -> None:
    rows = _tetragon("docs-use-cases.jsonl")
    by_function = {row["function_name"]: row for row in rows}
    setns = by_function["__x64_sys_setns"]
    assert (setns["int_args"], setns["policy_name"]) == ([3, 134217728], "namespace-access")
    module = by_function["do_init_module"]
    assert module["module_name"] == "kernel_module_hello"
    assert module["module_tainted"] == ["TAINT_OUT_OF_TREE_MODULE", "TAINT_UNSIGNED_MODULE"]
    assert by_function["security_kernel_module_request"]["string_arg"] == "fs-xfs"
    creds = by_function["commit_creds"]
    assert (creds["uid"], creds["cred_uid"], creds["cred_euid"]) == (11, 0, 0)
    assert creds["binary"] == "/tmp/su" and creds["container_name"] == "spaceship"
    insmod, modprobe = (r for r in rows if r["function_name"] == "security_kernel_read_file")
    assert insmod["file_path"].endswith("/kernel_module_hello.ko") and insmod["int_args"] == [2]
    assert modprobe["file_path"].startswith("/usr/lib/modules/")


def test_legacy_connect_and_listen_events_fill_the_socket_columns() -> None:
    rows = _tetragon("observability-book.jsonl")
    connect = next(r for r in rows if r["event_type"] == "process_connect")
    assert (connect["sock_daddr"], connect["sock_dport"], connect["sock_protocol"]) == (
        "142.250.180.196",
        80,
        "TCP",
    )
    assert connect["sock_saddr"] == "10.88.0.7" and connect["exec_id"]
    listen = next(r for r in rows if r["event_type"] == "process_listen")
    assert listen["sock_daddr"] is None and listen["sock_sport"] is not None


def test_falco_context_fields_for_node_scoped_alerts() -> None:
    path = REAL / "falco" / "event-generator-run-lab9.jsonl"
    with path.open("rb") as stream:
        rows = parse_falco_lines(stream, source=path.name).table.to_pylist()
    drop = next(r for r in rows if r["rule"] == "Drop and execute new binary in container")
    assert drop["container_name"] == "lab9-helper" and drop["proc_anames"] == [
        "containerd-shim",
        "initd",
    ]
    assert drop["evt_flags"] == "EXE_WRITABLE|EXE_UPPER_LAYER"
    memfd = next(r for r in rows if r["rule"] == "Fileless execution via memfd_create")
    assert memfd["proc_exe"] == "memfd:program"


def test_the_row_types_are_the_schemas() -> None:
    """The rules read rows as FalcoRow and TetragonRow: their keys are the schemas' columns."""
    from hpcscope.model.security_events import (
        FALCO_ALERT_SCHEMA,
        TETRAGON_EVENT_SCHEMA,
        FalcoRow,
        TetragonRow,
    )

    assert list(FalcoRow.__annotations__) == FALCO_ALERT_SCHEMA.names
    assert list(TetragonRow.__annotations__) == TETRAGON_EVENT_SCHEMA.names
