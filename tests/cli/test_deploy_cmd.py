"""``hpcscope deploy tetragon`` through typer's CliRunner: the file, the JSON, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from hpcscope.cli.main import app
from hpcscope.service.security.tetragon_policy import validate_tracing_policy

runner = CliRunner(env={"NO_COLOR": "1"})
SHIPPED = Path(__file__).resolve().parents[2] / "deploy" / "tetragon" / "hpcscope-weights.yaml"


def test_writes_the_default_policy(tmp_path: Path) -> None:
    result = runner.invoke(app, ["deploy", "tetragon", "--out", str(tmp_path / "tp")])
    assert result.exit_code == 0, result.output
    written = tmp_path / "tp" / "hpcscope-weights.yaml"
    assert result.stdout.strip() == str(written)
    assert written.read_text() == SHIPPED.read_text()


def test_json_names_roots_of_another_topology(tmp_path: Path) -> None:
    topology = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "topologies" / "2x8-h100.yaml").read_text()
    )
    topology["storage"]["datasets_root"] = "/gpfs/data"
    topology["model_weights"] = {"checkpoint_root": "/gpfs/ckpt/", "formats": ["gguf"]}
    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump(topology))
    result = runner.invoke(
        app, ["deploy", "tetragon", "--topology", str(site), "--out", str(tmp_path), "--json"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["roots"] == ["/gpfs/ckpt/", "/gpfs/data/", "/lustre/scratch/checkpoints/"]
    assert ".gguf" in doc["weight_suffixes"]
    policy = yaml.safe_load((tmp_path / "hpcscope-weights.yaml").read_text())
    assert validate_tracing_policy(policy) == []


def test_bad_topology_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n")
    result = runner.invoke(
        app, ["deploy", "tetragon", "--topology", str(bad), "--out", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "bad.yaml" in result.stderr


ENGINE_RULES = SHIPPED.parents[1] / "prometheus" / "hpcscope-engine-rules.yml"


def test_the_shipped_engine_rules_are_the_generated_ones(tmp_path: Path) -> None:
    result = runner.invoke(app, ["deploy", "prometheus-rules", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    written = tmp_path / "hpcscope-engine-rules.yml"
    assert result.stdout.strip() == str(written)
    assert written.read_text() == ENGINE_RULES.read_text()


def test_engine_rules_for_another_interval(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        ["deploy", "prometheus-rules", "--scrape-interval", "30", "--out", str(tmp_path), "--json"],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc == {
        "written": [str(tmp_path / "hpcscope-engine-rules.yml")],
        "scrape_interval_seconds": 30,
        "window": 60,
    }
    groups = yaml.safe_load((tmp_path / "hpcscope-engine-rules.yml").read_text())["groups"]
    observed = next(
        r for g in groups for r in g["rules"] if r["record"].endswith(":observed_seconds1m")
    )
    assert observed["expr"].endswith("* 30")
    bad = runner.invoke(
        app, ["deploy", "prometheus-rules", "--window", "10", "--scrape-interval", "15"]
    )
    assert bad.exit_code == 2 and "at least one scrape interval" in bad.output
