"""``hpcscope traces analyze`` through Typer's CliRunner: the --json contract, the HTML
report, exit codes (0 result, 1 unreadable traces, 2 usage) and clear messages."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hpcscope.analysis.traces.rank_timeline import PHASES
from hpcscope.cli.main import app
from tests.support.paths import FIXTURES

TRACES = FIXTURES / "traces"
HTA_2RANK = TRACES / "hta_trace_filter_2rank"
PARAM = TRACES / "param_dlrm_8rank" / "dlrm_kineto.tar.gz"

runner = CliRunner()

CONTRACT_KEYS = {
    "schema",
    "ranks",
    "steps",
    "step_numbers",
    "partial",
    "notes",
    "phases",
    "step_seconds",
    "per_step",
    "scores",
    "busy_median_seconds",
    "threshold",
    "stragglers",
    "what_if",
    "gpu_time",
    "software",
    "window",
    "collectives",
    "sources",
}


def _run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, ["traces", "analyze", *args], env=env)
    return result.exit_code, result.stdout, result.stderr


def test_json_contract() -> None:
    code, out, _ = _run(str(PARAM), "--json")
    assert code == 0
    doc = json.loads(out)
    assert set(doc) >= CONTRACT_KEYS
    assert doc["schema"] == "hpcscope.traces.analysis/1"
    assert doc["ranks"] == list(range(8)) and doc["steps"] == 1 and doc["step_numbers"] == [10]
    for rank in map(str, doc["ranks"]):
        assert set(doc["phases"][rank]) == set(PHASES)
        assert sum(doc["phases"][rank].values()) == pytest.approx(
            doc["step_seconds"][rank], abs=1e-5
        )
    step = doc["per_step"][0]
    assert {
        "step",
        "slowest_rank",
        "excess_seconds",
        "step_seconds",
        "busy_seconds",
        "ranks",
    } <= set(step)
    assert set(step["ranks"]["0"]) == {"step_seconds", *PHASES}
    [straggler] = doc["stragglers"]
    assert (straggler["rank"], straggler["phase"]) == (7, "forward")
    assert {
        "excess_seconds_per_step",
        "score",
        "phase_excess_seconds_per_step",
        "hint",
        "evidence",
    } <= set(straggler)
    assert all({"kind", "supports", "summary", "figures"} == set(e) for e in straggler["evidence"])
    assert set(doc["what_if"]) == {
        "actual_step_seconds",
        "ideal_step_seconds",
        "slowdown",
        "worst_rank",
        "worst_rank_share",
        "fixed_worst_step_seconds",
    }
    assert doc["what_if"]["slowdown"] == pytest.approx(
        doc["what_if"]["actual_step_seconds"] / doc["what_if"]["ideal_step_seconds"], rel=1e-3
    )
    assert doc["window"] == {
        "start_utc": "2023-09-07T23:10:01.421205Z",
        "end_utc": "2023-09-07T23:10:01.442028Z",
    }


def test_no_straggler_gives_an_empty_list() -> None:
    code, out, _ = _run(str(HTA_2RANK), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["stragglers"] == [] and doc["partial"] is True  # 2 of 128 ranks
    assert any("126 of 128 ranks have no trace" in n for n in doc["notes"])


def test_html_report_is_self_contained(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    code, stdout, _ = _run(str(PARAM), "--html", str(out))
    assert code == 0 and "Straggler: rank 7" in stdout
    html = out.read_text(encoding="utf-8")
    assert html.startswith("<!doctype html>")
    assert "Communication by class" in html and "rank 7 slow in expert all-to-all" in html
    assert not re.search(r"https?://", html), "the report must not reference the network"
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert "Rank 7: forward" in html and "<svg" in html


def test_human_output_honours_no_color() -> None:
    code, out, _ = _run(str(PARAM), env={"NO_COLOR": "1"})
    assert code == 0
    assert "\x1b[" not in out
    assert "Straggler: rank 7 is 4.62 ms/step slower" in out
    assert "What-if:" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["/no/such/trace.json"], "does not exist"),
        ([], "Missing argument"),
        ([str(PARAM), "--threshold", "2"], "threshold"),
        ([str(PARAM), "--workers", "0"], "workers"),
        ([str(PARAM), "--html", str(TRACES)], "html"),
    ],
)
def test_usage_errors_exit_2(args: list[str], message: str) -> None:
    code, out, err = _run(*args)
    assert code == 2
    assert message.lower() in (out + err).lower()


def test_invalid_json_exits_1_naming_file_line_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "rank-0.json"
    bad.write_text('{"traceEvents": [\n  {"ph": "X", "name": "a", "ts": 1, "dur": 2,}\n]}')
    code, out, err = _run(str(bad))
    assert code == 1
    assert re.search(r"rank-0\.json:2:\d+: invalid JSON", err), err
    assert "Traceback" not in out + err
    code, out, _ = _run(str(bad), "--json")
    assert code == 1
    body = json.loads(out)
    assert body["where"]["source"] == str(bad) and body["where"]["line"] == 2
    assert body["error"].startswith(str(bad))


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("empty", None, "no trace files"),
        ("rank-1.json", b"", "empty file"),
        ("rank-2.json", b'{"schemaVersion": 1}', "no traceEvents array"),
        ("notes.json", b'{"traceEvents": []}', "cannot tell which rank"),
    ],
)
def test_runtime_errors_exit_1_with_a_clear_message(
    tmp_path: Path, name: str, content: bytes | None, message: str
) -> None:
    target = tmp_path / name
    if content is None:
        target.mkdir()
    else:
        target.write_bytes(content)
    code, _, err = _run(str(target))
    assert code == 1
    assert message in err and str(target) in err


def test_unwritable_html_exits_1(tmp_path: Path) -> None:
    code, _, err = _run(str(PARAM), "--html", str(tmp_path / "missing" / "r.html"))
    assert code == 1 and "cannot write" in err


def test_truncated_gzip_gives_a_partial_result(tmp_path: Path) -> None:
    source = (HTA_2RANK / "sampled_rank-0.json.gz").read_bytes()
    (tmp_path / "sampled_rank-0.json.gz").write_bytes(source[: len(source) // 2])
    (tmp_path / "sampled_rank-1.json.gz").write_bytes(
        (HTA_2RANK / "sampled_rank-1.json.gz").read_bytes()
    )
    code, out, _ = _run(str(tmp_path), "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["partial"] is True
    assert any("kept the events before byte" in n for n in doc["notes"])
    assert gzip.decompress(source)  # the fixture itself is whole


def test_the_simulator_reads_a_real_report(tmp_path: Path) -> None:
    # the --json document is the input of `hpcscope simulate --calibrate` (docs/simulate.md)
    from hpcscope.service.simulate.measured_job import load_measured_job

    code, out, _ = _run(str(PARAM), "--json")
    assert code == 0
    report = tmp_path / "param.json"
    report.write_text(out)
    job = load_measured_job(report)
    assert job.ranks == tuple(range(8))
    assert [(s.rank, s.phase) for s in job.stragglers] == [(7, "forward")]


def test_communication_classes_in_text_and_json() -> None:
    code, out, _ = _run(str(PARAM), env={"NO_COLOR": "1", "COLUMNS": "160"})
    assert code == 0
    assert "expert all-to-all" in out and "rank 7 slow in expert all-to-all" in out
    code, out, _ = _run(str(PARAM), "--json")
    section = json.loads(out)["comm_classes"]
    assert section["schema"] == "hpcscope.traces.comm-classes/1"
    assert [c["class"] for c in section["classes"]] == ["dp_all_reduce", "ep_all_to_all"]


def test_a_site_class_file_is_used_and_a_bad_one_exits_1_naming_its_line(tmp_path: Path) -> None:
    site = tmp_path / "site.yaml"
    site.write_text(
        "schema: hpcscope.kernel-classes/1\nrules:\n"
        "  - {match: '^ncclKernel_AllReduce', events: gpu, op: all_reduce, dimension: tp}\n"
    )
    code, out, _ = _run(str(PARAM), "--json", "--kernel-classes", str(site))
    assert code == 0
    classes = [c["class"] for c in json.loads(out)["comm_classes"]["classes"]]
    assert classes == ["tp_collective", "ep_all_to_all"]
    site.write_text("schema: hpcscope.kernel-classes/1\nrules:\n  - {match: x, events: tpu}\n")
    code, _, err = _run(str(PARAM), "--kernel-classes", str(site))
    assert code == 1
    assert f"{site}:3" in err and "events" in err
