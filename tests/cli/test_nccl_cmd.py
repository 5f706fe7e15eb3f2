"""``hpcscope nccl analyze`` through typer's CliRunner: output, JSON, exit codes."""

from __future__ import annotations

import json
import os
import pickle
import time
from pathlib import Path

from fuzz import hostile
from typer.testing import CliRunner

from hpcscope.cli.main import app
from tests.ingest.nccl.nccl_fixtures import FR_CASES, NCCL

runner = CliRunner(env={"NO_COLOR": "1", "COLUMNS": "160"})


def test_human_summary_of_a_hang() -> None:
    result = runner.invoke(app, ["nccl", "analyze", str(FR_CASES / "gpu_error_1st")])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Hang verdict: hang_localized" in out
    assert "PG 74 (EXPERT_MODEL_PARALLEL_GROUP) nccl:all_to_all seq 20537" in out
    assert "rank 12: never_entered (high confidence)" in out
    assert "rank 14: completion_stalled (medium confidence)" in out
    assert "\x1b[" not in out  # NO_COLOR
    assert result.stderr == ""


def test_human_summary_of_nccl_setup_and_errors() -> None:
    files = [
        NCCL / "nccl_rings_trees_16rank_2node.log",
        NCCL / "nccl_warn_ib_completion_error_status12.log",
        NCCL / "nccl_init_bootstrap_netib_roce_dgxh100.log",
        NCCL / "nccl_tests_all_reduce_perf_h100_2node_16gpu.log",
    ]
    result = runner.invoke(app, ["nccl", "analyze", *map(str, files)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "NCCL 2.19.3 (CUDA 12.3)" in out
    assert "Topology: 16 ranks on 2 nodes, 8 per node" in out
    assert "Ring channel 0: 0 -> 5 -> 4 -> 7" in out
    assert "IB completion error status=12 (IBV_WC_RETRY_EXC_ERR)" in out
    assert "NCCL returned ncclRemoteError (6)" in out
    assert "peak bus bandwidth 338.82 GB/s at 8589934592 B; average 70.742 GB/s" in out
    assert "mlx5_10:1/RoCE" in out


def test_json_contract() -> None:
    log = NCCL / "pytorch_watchdog_timeout_legacy_format.log"
    result = runner.invoke(app, ["nccl", "analyze", "--json", str(log), "--world-size", "8"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["schema"] == "hpcscope.nccl.analyze/1"
    hang = report["hang"]
    assert (hang["verdict"], hang["world_size"], hang["world_size_source"]) == (
        "hang_localized",
        8,
        "given",
    )
    assert hang["hung"][0]["missing_ranks"] == [0, 4, 5]


def test_unreadable_input_exits_1_and_still_reports_the_rest(tmp_path: Path) -> None:
    missing = tmp_path / "nope.log"
    result = runner.invoke(
        app, ["nccl", "analyze", str(missing), str(NCCL / "nccl_init_timings_2.22.log")]
    )
    assert result.exit_code == 1
    assert f"hpcscope: {missing}: cannot read" in result.stderr
    assert "Init timings: 6 ranks, slowest rank" in result.stdout
    assert "Traceback" not in result.output


def test_unsafe_pickle_is_refused_with_exit_1(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {marker}",))

    dump = tmp_path / "_dump_0"
    dump.write_bytes(pickle.dumps({"entries": [Payload()]}, protocol=2))
    result = runner.invoke(app, ["nccl", "analyze", "--json", str(dump)])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert "refused pickle opcode GLOBAL" in report["errors"][0]["message"]
    assert "refused pickle opcode GLOBAL" in result.stderr
    assert not marker.exists()


def test_invalid_json_dump_names_line_and_column(tmp_path: Path) -> None:
    dump = tmp_path / "dump_3.json"
    dump.write_text('{"pg_config": {}, "entries": [\n  {,}\n]}')
    result = runner.invoke(app, ["nccl", "analyze", str(dump)])
    assert result.exit_code == 1
    assert f"{dump}:2:4: invalid JSON" in result.stderr


def test_usage_errors_exit_2() -> None:
    assert runner.invoke(app, ["nccl", "analyze"]).exit_code == 2
    bad = runner.invoke(app, ["nccl", "analyze", "--world-size", "0", str(NCCL)])
    assert bad.exit_code == 2
    assert runner.invoke(app, ["nccl", "analyze", "--bogus", str(NCCL)]).exit_code == 2


def test_whole_fixture_directory() -> None:
    result = runner.invoke(app, ["nccl", "analyze", "--json", str(NCCL)])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["errors"] == []
    assert len([i for i in report["inputs"] if i["kind"] == "flight_recorder"]) == 65


def test_a_self_referencing_dump_exits_2_within_seconds_naming_the_byte(tmp_path: Path) -> None:
    dump = tmp_path / "_dump_0"
    dump.write_bytes(hostile.pickle_cycle(0))  # 37 bytes: PyTorch's shape, holding itself
    good = NCCL / "pytorch_watchdog_timeout_legacy_format.log"
    started = time.monotonic()
    result = runner.invoke(app, ["nccl", "analyze", "--json", str(dump), str(good)])
    assert time.monotonic() - started < 10
    assert result.exit_code == 2, result.output
    document = json.loads(result.stdout)
    (error,) = document["errors"]
    assert error["bound"] == "cycle" and error["source"] == str(dump)
    assert error["field"].startswith("byte ")
    assert [i["path"] for i in document["inputs"]] == [str(good)]  # the other file is analysed
