"""Golden JSON reports of ``hpcscope nccl analyze`` on real inputs (the documented contract).

Regenerate after an intended change with ``HPCSCOPE_UPDATE_GOLDEN=1 pytest tests/service``,
then review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from hpcscope.service.nccl.contracts import NcclReport
from hpcscope.service.nccl.pipeline import SCHEMA, analyze, report
from tests.ingest.nccl.nccl_fixtures import FR_CASES, NCCL

GOLDEN = NCCL / "golden"
CASES = {
    "rings_trees_16rank": ["nccl_rings_trees_16rank_2node.log"],
    "ib_completion_status12": ["nccl_warn_ib_completion_error_status12.log"],
    "socket_fallback": ["nccl_init_no_ib_socket_fallback.log"],
    "watchdog_desync": ["pytorch_watchdog_mixed_optypes_broadcast_allgather.log"],
    "watchdog_torch26": ["pytorch_watchdog_timeout_allreduce_default_pg_torch2.6.log"],
    "nccl_tests_h100": ["nccl_tests_all_reduce_perf_h100_2node_16gpu.log"],
    "fr_gpu_error_1st": ["nvrx_fr_traces/gpu_error_1st"],
}


def _normalised(report: dict[str, Any]) -> Any:
    text = json.dumps(report, indent=2, sort_keys=True)
    return json.loads(text.replace(str(NCCL), "<fixtures>"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_report(name: str) -> None:
    report = _normalised(analyze([NCCL / f for f in CASES[name]]))
    path = GOLDEN / f"{name}.json"
    if os.environ.get("HPCSCOPE_UPDATE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    assert report == json.loads(path.read_text())


def test_report_shape() -> None:
    report = analyze([FR_CASES / "lock_gil_2nd", NCCL / "nccl_warn_misc_oneliners.log"])
    assert report["schema"] == SCHEMA
    assert list(report) == [
        "schema",
        "inputs",
        "errors",
        "nccl",
        "findings",
        "watchdog",
        "hang",
        "nccl_tests",
        "stragglers",
    ]
    assert report["hang"]["verdict"] == "hang_localized"
    kinds = [i["kind"] for i in report["inputs"]]
    # the case folder also holds fault_injection.log and reference_output.txt (text)
    assert kinds.count("flight_recorder") == 16 and kinds.count("log") == 3
    codes = {f["code"] for f in report["findings"]}
    assert {"ib_completion_error", "ib_async_event", "ib_qp_transition_failed"} <= codes


def test_world_size_comes_from_nccl_init_lines(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(
        (NCCL / "nccl_init_complete_32rank.log").read_text()
        + (NCCL / "pytorch_watchdog_timeout_legacy_format.log").read_text()
    )
    hang = analyze([log])["hang"]
    assert (hang["world_size"], hang["world_size_source"]) == (32, "nccl_init")
    assert hang["verdict"] == "hang_localized"
    assert 0 in hang["hung"][0]["missing_ranks"] and 31 in hang["hung"][0]["missing_ranks"]


def test_unreadable_inputs_are_errors_and_the_rest_is_kept(tmp_path: Path) -> None:
    bad = tmp_path / "_dump_1"
    bad.write_bytes(b"\x80\x04\x95garbage")
    report = analyze([bad, tmp_path / "missing.log", NCCL / "nccl_init_timings_2.22.log"])
    sources = [e["source"] for e in report["errors"]]
    assert sources == [str(bad), str(tmp_path / "missing.log")]
    assert len(report["nccl"]["init_timings"]) == 6


def test_every_golden_report_is_a_valid_contract() -> None:
    """The committed golden documents are what :class:`NcclReport` describes (no unknown
    field, no missing one, no changed type)."""
    goldens = sorted(GOLDEN.glob("*.json"))
    assert goldens
    for golden in goldens:
        document = json.loads(golden.read_text(encoding="utf-8"))
        assert NcclReport.model_validate(document).model_dump(mode="json") == document, golden


def test_the_typed_report_serialises_to_the_plain_one() -> None:
    paths = [NCCL / "nccl_init_timings_2.22.log", FR_CASES / "lock_gil_2nd"]
    assert report(paths).model_dump(mode="json") == json.loads(json.dumps(analyze(paths)))
