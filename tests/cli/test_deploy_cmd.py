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


#: The five static policies and the rendered one: what a site installs.
EXPECTED = [
    "hpcscope-credentials.yaml",
    "hpcscope-modules.yaml",
    "hpcscope-namespaces.yaml",
    "hpcscope-network.yaml",
    "hpcscope-sensitive-files.yaml",
    "hpcscope-weights.yaml",
]


def test_writes_every_shipped_policy(tmp_path: Path) -> None:
    """Every policy the node and job rules read, byte for byte what the repository ships (the
    rendered one equal to the default topology's), each valid; nothing else."""
    result = runner.invoke(app, ["deploy", "tetragon", "--out", str(tmp_path / "tp")])
    assert result.exit_code == 0, result.output
    written = sorted((tmp_path / "tp").iterdir())
    assert [p.name for p in written] == EXPECTED
    assert result.stdout.split() == [str(p) for p in written]
    shipped = sorted(SHIPPED.parent.glob("hpcscope-*.yaml"))
    assert [p.name for p in shipped] == EXPECTED
    for mine, theirs in zip(written, shipped, strict=True):
        assert mine.read_bytes() == theirs.read_bytes(), mine.name
        doc = yaml.safe_load(mine.read_text())
        assert validate_tracing_policy(doc) == [], mine.name
        assert doc["metadata"]["name"] == mine.stem


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
    assert doc["written"] == [str(tmp_path / name) for name in EXPECTED]
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
        [
            "deploy", "prometheus-rules", "--scrape-interval", "30", "--delay", "45",
            "--out", str(tmp_path), "--json",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc == {
        "written": [str(tmp_path / "hpcscope-engine-rules.yml")],
        "scrape_interval_seconds": 30,
        "window": 60,
        "delay_seconds": 45,
    }
    groups = yaml.safe_load((tmp_path / "hpcscope-engine-rules.yml").read_text())["groups"]
    observed = next(
        r for g in groups for r in g["rules"] if r["record"].endswith(":observed_seconds1m")
    )
    assert observed["expr"].endswith("[59s999ms] offset 45s)) * 30")
    bad = runner.invoke(
        app, ["deploy", "prometheus-rules", "--window", "10", "--scrape-interval", "15"]
    )
    assert bad.exit_code == 2 and "at least one scrape interval" in bad.output
