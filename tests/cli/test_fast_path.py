"""The light path of ``traces analyze`` and ``traces merge``: the options Typer's commands
declare, the values Typer would pass, the bytes Typer prints, and Typer for the rest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from typer.testing import CliRunner

import hpcscope
from hpcscope.cli import fast_path, traces_run
from hpcscope.cli.main import app, load_command
from hpcscope.service.traces.contracts import TraceAnalysisDocument
from hpcscope.service.traces.document import AnalysisJson
from hpcscope.service.traces.html import render_report
from hpcscope.service.traces.kernel_classes import load_class_table
from hpcscope.service.traces.pipeline import analyze, to_json
from hpcscope.service.traces.summaries import merge_summaries
from tests.support.paths import FIXTURES

TRACES = FIXTURES / "traces"
HTA_2RANK = TRACES / "hta_trace_filter_2rank"
PARAM = TRACES / "param_dlrm_8rank" / "dlrm_kineto.tar.gz"
CLASSES = Path(hpcscope.__file__).parents[2] / "deploy" / "kernels" / "classes.yaml"


def _typer_params(name: str) -> dict[str, Any]:
    command = load_command("traces").commands[name]
    return {p.name: p for p in command.params if p.name != "help"}


@pytest.mark.parametrize("name", list(fast_path.COMMANDS))
def test_the_options_are_those_of_the_typer_command(name: str) -> None:
    fast = fast_path.COMMANDS[name]
    params = _typer_params(name)
    options = {p.name: p for p in params.values() if p.param_type_name == "option"}
    assert [p.name for p in params.values() if p.param_type_name == "argument"] == ["paths"]
    assert {o.dest for o in fast.options.values()} == set(options) == set(fast.defaults)
    for flag, option in fast.options.items():
        param = options[option.dest]
        assert param.opts == [flag]
        assert param.multiple == option.multiple
        assert param.is_flag == (option.kind == "flag")
        default = list(param.default or []) if option.multiple else param.default
        assert default == fast.defaults[option.dest], option.dest


def _typer_arguments(monkeypatch: pytest.MonkeyPatch, name: str, args: list[str]) -> Any:
    """The keyword arguments the Typer command passes to its body (recorded, not run)."""
    seen: list[dict[str, Any]] = []

    def record(paths: list[Path], **kwargs: Any) -> None:
        seen.append({"paths": paths, **kwargs})

    monkeypatch.setattr(traces_run, fast_path.COMMANDS[name].runner, record)
    result = CliRunner().invoke(app, ["traces", name, *args])
    assert result.exit_code == 0, result.output
    return seen[0]


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("analyze", [str(HTA_2RANK)]),
        ("analyze", [str(PARAM), str(HTA_2RANK), "--json"]),
        (
            "analyze",
            [
                "--threshold=0.5",
                str(PARAM),
                "--workers",
                "3",
                "--world-size",
                "8",
                "--html",
                "out/report.html",
                "--kernel-classes",
                str(CLASSES),
                f"--kernel-classes={CLASSES}",
                "--json",
            ],
        ),
        ("analyze", [str(PARAM), "--threshold", "1", "--workers=12"]),
        ("merge", [str(HTA_2RANK), "--threshold", "0", "--world-size=2", "--html", "r.html"]),
    ],
)
def test_it_passes_what_typer_passes(
    monkeypatch: pytest.MonkeyPatch, name: str, args: list[str]
) -> None:
    expected = _typer_arguments(monkeypatch, name, args)
    assert fast_path.parse(fast_path.COMMANDS[name], args) == expected


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--help"],
        [str(PARAM), "--help"],
        ["/no/such/trace.json"],
        [""],
        [str(PARAM), "--threshold", "2"],
        [str(PARAM), "--threshold", "1e-1"],
        [str(PARAM), "--threshold", "-0.5"],
        [str(PARAM), "--threshold"],
        [str(PARAM), "--threshold", "0.5", "--threshold", "0.6"],
        [str(PARAM), "--workers", "0"],
        [str(PARAM), "--workers", "+3"],
        [str(PARAM), "--json=yes"],
        [str(PARAM), "--html", str(TRACES)],
        [str(PARAM), "--html", "--json"],
        [str(PARAM), "--kernel-classes", str(TRACES)],
        [str(PARAM), "--kernel-classes", "/no/such.yaml"],
        [str(PARAM), "--no-such-option"],
        [str(PARAM), "-"],
        [str(PARAM), "--", "x"],
    ],
)
def test_what_it_is_not_sure_of_goes_to_typer(args: list[str]) -> None:
    assert fast_path.parse(fast_path.COMMANDS["analyze"], args) is None


def test_other_commands_go_to_typer() -> None:
    assert fast_path.run(["traces", "summarize", str(PARAM), "--out", "x"]) is None
    assert fast_path.run(["traces", "--help"]) is None
    assert fast_path.run(["jobs", "--json"]) is None
    assert fast_path.run(["traces"]) is None


def _process(args: list[str], env: dict[str, str]) -> tuple[int, bytes, bytes]:
    result = subprocess.run(
        [sys.executable, "-m", "hpcscope", *args],
        capture_output=True,
        env={
            **os.environ,
            "PYTHONPATH": str(Path(hpcscope.__file__).parents[1]),
            **env,
        },
        timeout=120,
        check=False,
    )
    return result.returncode, result.stdout, result.stderr


def _typer(args: list[str], env: dict[str, str]) -> tuple[int, bytes, bytes]:
    result = CliRunner().invoke(app, args, env=env)
    return result.exit_code, result.stdout_bytes, result.stderr_bytes


def _summaries(tmp_path: Path) -> Path:
    out = tmp_path / "summaries"
    result = CliRunner().invoke(app, ["traces", "summarize", str(PARAM), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize(
    "case",
    ["json", "text", "two sets", "site classes", "bad trace", "bad trace json", "merge", "html"],
)
def test_a_process_prints_what_typer_prints(tmp_path: Path, case: str) -> None:
    env = {"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}
    bad = tmp_path / "rank-0.json"
    bad.write_text('{"traceEvents": [\n  {"ph": "X", "name": "a", "ts": 1, "dur": 2,}\n]}')
    site = tmp_path / "site.yaml"
    site.write_text(
        "schema: hpcscope.kernel-classes/1\nrules:\n"
        "  - {match: '^ncclDevKernel_AllGather', events: gpu, op: all_gather, dimension: tp}\n"
    )
    args = {
        "json": ["traces", "analyze", str(HTA_2RANK), "--json"],
        "text": ["traces", "analyze", str(PARAM)],
        "two sets": ["traces", "analyze", str(PARAM), "--threshold", "0.9", "--json"],
        "site classes": ["traces", "analyze", str(PARAM), "--kernel-classes", str(site)],
        "bad trace": ["traces", "analyze", str(bad)],
        "bad trace json": ["traces", "analyze", str(bad), "--json"],
        "merge": ["traces", "merge", str(_summaries(tmp_path)), "--json"],
        "html": ["traces", "analyze", str(PARAM), "--html", str(tmp_path / "r.html"), "--json"],
    }[case]
    fast = _process(args, env)
    if case == "html":
        fast_html = (tmp_path / "r.html").read_bytes()
    typer = _typer(args, env)
    assert fast == typer
    if case == "html":
        assert (tmp_path / "r.html").read_bytes() == fast_html


def _print_json_bytes(document: Any) -> bytes:
    return orjson.dumps(
        document,
        option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS,
    )


@pytest.mark.parametrize("case", ["2-rank", "param", "param, site classes", "merge"])
def test_the_printed_document_is_the_contracts_dump(tmp_path: Path, case: str) -> None:
    # the CLI prints to_json's dict without validating it (no pydantic at start-up): it must
    # be what validating it and dumping the contract gave, byte for byte, HTML included
    if case == "merge":
        result = merge_summaries([_summaries(tmp_path)])
    else:
        site = tmp_path / "site.yaml"
        site.write_text(
            "schema: hpcscope.kernel-classes/1\nrules:\n"
            "  - {match: '^ncclDevKernel_AllGather', events: gpu, op: all_gather, dimension: tp}\n"
        )
        classes = load_class_table([site]) if "site" in case else None
        result = analyze([HTA_2RANK if case == "2-rank" else PARAM], classes=classes)
    document = to_json(result)
    dumped = TraceAnalysisDocument.of(document).model_dump(mode="json", exclude_unset=True)
    assert _print_json_bytes(document) == _print_json_bytes(dumped)
    assert render_report(document) == render_report(cast("AnalysisJson", dumped))


@pytest.mark.parametrize("enabled", [True, False])
def test_the_imports_run_without_collections_and_are_frozen(enabled: bool) -> None:
    import gc

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        gc.unfreeze()
        fast_path._import_quietly()
        assert gc.get_freeze_count() > 1_000  # what is alive by then is frozen
        assert gc.isenabled() is enabled  # and the collector is as it was
    finally:
        gc.unfreeze()
        (gc.enable if was else gc.disable)()
