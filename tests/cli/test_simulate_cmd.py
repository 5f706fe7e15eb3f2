"""``hpcscope simulate``: JSON schema, tables, usage errors (exit 2), the what-if curve."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from hpcscope.cli.main import app
from tests.support.paths import FIXTURES

HERE = FIXTURES / "simulate"
runner = CliRunner()

#: The documented keys of every element of the ``--json`` list (docs/simulate.md).
POINT_KEYS = {
    "gpus", "steps", "step_seconds", "step_seconds_p05", "step_seconds_p50", "step_seconds_p95",
    "step_seconds_p99", "ideal_step_seconds", "compute_seconds", "allreduce_seconds",
    "optimizer_seconds", "efficiency", "efficiency_p05", "efficiency_p95", "scaling_efficiency",
    "barrier_wait_seconds", "barrier_wait_ratio", "hiccup_step_ratio", "gpu_hours_per_day",
    "lost_gpu_hours_per_day", "lost_cost_per_day", "currency", "allreduce_algorithm",
    "allreduce_model_seconds", "allreduce_bus_bandwidth_bytes_per_second", "nodes",
    "expert_parallel_ranks", "alltoall_seconds", "alltoall_hidden_seconds",
    "alltoall_exposed_seconds", "pipeline_bubble_seconds", "pipeline_bubble_ratio",
}  # fmt: skip
WHAT_IF_KEYS = POINT_KEYS | {
    "measured_scale", "fixed_step_seconds", "fixed_efficiency", "speedup_if_fixed",
    "lost_gpu_hours_per_day_to_stragglers",
}  # fmt: skip


def test_json_is_a_list_with_the_documented_schema() -> None:
    result = runner.invoke(app, ["simulate", "--gpus", "8,64,1024", "--steps", "500", "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert isinstance(body, list) and [item["gpus"] for item in body] == [8, 64, 1024]
    for item in body:
        assert set(item) == POINT_KEYS
        assert 0 < item["efficiency"] <= 1
    assert body[0]["efficiency"] > body[-1]["efficiency"]


def test_the_seeds_step_on_the_command_line() -> None:
    result = runner.invoke(
        app,
        ["simulate", "--gpus", "16", "--steps", "20", "--straggler-gpus", "2", "--jitter-cv", "0",
         "--hiccup-prob", "0", "--allreduce-ms", "6", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    [point] = json.loads(result.stdout)
    assert point["step_seconds"] == pytest.approx(0.062)
    assert point["efficiency"] == pytest.approx(42 / 62)


def test_table_says_what_each_number_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    result = runner.invoke(app, ["simulate", "--gpus", "8,1024", "--steps", "300"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    for header in ("GPUs", "step ms", "p5-p95 ms", "AllReduce ms", "efficiency", "barrier wait",
                   "lost GPU-h/d", "lost USD/d"):  # fmt: skip
        assert header in out
    assert "1,024" in out and " %" in out
    assert "\x1b[" not in out  # NO_COLOR


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--gpus", "0"], "--gpus"),
        (["--gpus", "8,x"], "--gpus"),
        (["--gpus", "99999"], "--gpus"),
        (["--backward-ms", "-20"], "--backward-ms"),
        (["--model-params", "-5"], "--model-params"),
        (["--model-params", "0"], "--model-params"),
        (["--hiccup-prob", "1.5"], "--hiccup-prob"),
        (["--hiccup-prob", "-0.1"], "--hiccup-prob"),
        (["--jitter-cv", "2"], "--jitter-cv"),
        (["--straggler-factor", "0.5"], "--straggler-factor"),
        (["--straggler-phase", "allreduce"], "--straggler-phase"),
        (["--precision", "int4"], "--precision"),
        (["--steps", "0"], "--steps"),
        (["--price", "-1"], "--price"),
        (["--bucket-mib", "-25"], "--bucket-mib"),
        (["--data-ms", "0", "--forward-ms", "0", "--backward-ms", "0"], "--data-ms"),
    ],
)
def test_bad_parameters_are_usage_errors_naming_the_option(args: list[str], option: str) -> None:
    result = runner.invoke(app, ["simulate", *args])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith(f"hpcscope: {option}")
    assert "Traceback" not in result.output
    as_json = runner.invoke(app, ["simulate", *args, "--json"])
    assert as_json.exit_code == 2
    assert json.loads(as_json.stdout)["error"].startswith(option)


def test_type_errors_are_usage_errors_too() -> None:
    result = runner.invoke(app, ["simulate", "--steps", "many"])
    assert result.exit_code == 2
    assert "--steps" in result.output


def test_bad_files_name_the_file(tmp_path: object) -> None:
    result = runner.invoke(app, ["simulate", "--topology", "/nonexistent/topo.yaml"])
    assert result.exit_code == 2 and "/nonexistent/topo.yaml" in "".join(result.stderr.split())
    result = runner.invoke(app, ["simulate", "--calibrate", str(HERE / "a3-mega-2x8-h100.yaml")])
    message = "".join(result.stderr.split())  # Rich wraps long lines
    assert result.exit_code == 2 and "notvalidJSON" in message
    assert "a3-mega-2x8-h100.yaml:1:1" in message


def test_topology_sets_the_fabric_and_the_price() -> None:
    result = runner.invoke(
        app,
        ["simulate", "--topology", str(HERE / "a3-mega-2x8-h100.yaml"), "--gpus", "16",
         "--model-params", "4294967296", "--precision", "fp16", "--steps", "10", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    [point] = json.loads(result.stdout)
    # 8 GiB AllReduce on A3 Mega: the model's 43.0 ms (nccl-tests measured 47.5 ms)
    assert point["allreduce_seconds"] == pytest.approx(0.0430, rel=0.01)
    faster = runner.invoke(
        app,
        ["simulate", "--topology", str(HERE / "a3-mega-2x8-h100.yaml"), "--gpus", "16",
         "--model-params", "4294967296", "--precision", "fp16", "--steps", "10", "--json",
         "--nic-rate-gbps", "400", "--price", "4"],
    )  # fmt: skip
    [fast] = json.loads(faster.stdout)
    assert fast["allreduce_seconds"] == pytest.approx(0.0406, rel=0.01)  # NVLink-bound now
    assert fast["lost_cost_per_day"] == pytest.approx(4 * fast["lost_gpu_hours_per_day"])


def test_what_if_curve_from_a_trace_report() -> None:
    result = runner.invoke(
        app,
        ["simulate", "--calibrate", str(HERE / "traces_analyze_straggler.json"),
         "--gpus", "64,1024", "--steps", "300", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert [item["gpus"] for item in body] == [8, 64, 1024]
    for item in body:
        assert set(item) == WHAT_IF_KEYS
        assert item["speedup_if_fixed"] > 1.3
    text = runner.invoke(
        app,
        ["simulate", "--calibrate", str(HERE / "traces_analyze_straggler.json"),
         "--gpus", "64", "--steps", "200"],
    )  # fmt: skip
    assert text.exit_code == 0, text.output
    assert re.search(r"straggler: GPU 2 backward x(1\.99|2\.00|2\.01)", text.stdout)
    assert "(measured)" in text.stdout and "speed-up if fixed" in text.stdout


def test_expert_and_pipeline_options() -> None:
    args = ["simulate", "--gpus", "16", "--steps", "50", "--jitter-cv", "0", "--hiccup-prob", "0"]
    moe = ["--alltoall-mib", "672", "--expert-ranks", "16", "--moe-layers", "4"]
    piped = ["--pipeline-stages", "4", "--microbatches", "8"]
    result = runner.invoke(app, [*args, *moe, *piped, "--json"])
    assert result.exit_code == 0, result.output
    (point,) = json.loads(result.stdout)
    assert point["pipeline_bubble_ratio"] == pytest.approx(3 / 11)
    assert point["pipeline_bubble_seconds"] == pytest.approx(3 / 8 * 0.030)
    assert point["alltoall_exposed_seconds"] > 0 and point["expert_parallel_ranks"] == 16
    serial = runner.invoke(app, [*args, *moe, "--no-alltoall-overlap", "--json"])
    (off,) = json.loads(serial.stdout)
    assert off["alltoall_hidden_seconds"] == 0
    assert off["alltoall_exposed_seconds"] == pytest.approx(off["alltoall_seconds"])
    text = runner.invoke(app, [*args, *moe, *piped])
    assert text.exit_code == 0, text.output
    assert "expert all-to-all" in text.stdout and "pipeline bubble" in text.stdout
    bad = runner.invoke(app, [*args, "--microbatches", "0"])
    assert bad.exit_code == 2 and "--microbatches" in bad.stderr
