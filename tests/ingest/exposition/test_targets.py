"""Reading scrape targets from Prometheus file_sd files."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpcscope.ingest.exposition.scrape import Target, TargetsError, load_file_sd

JSON_SD = """\
[
  {
    "targets": ["gpu01:9400", "gpu02:9400"],
    "labels": {"exporter": "dcgm", "cluster": "demo"}
  },
  {
    "targets": ["login01:9100"],
    "labels": {
      "job": "node",
      "node": "login01",
      "__scheme__": "https",
      "__metrics_path__": "/probe",
      "__param_module": "gpu",
      "__meta_ignored": "x"
    }
  }
]
"""

YAML_SD = """\
- targets: [gpu01:9400]
  labels:
    exporter: dcgm
    node: gpu01
- targets:
    - gpu02:9400
  labels: {exporter: dcgm, node: gpu02}
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_json_file_sd_with_meta_labels(tmp_path: Path) -> None:
    targets = load_file_sd(_write(tmp_path, "targets.json", JSON_SD))
    assert targets == [
        Target(
            "http://gpu01:9400/metrics",
            "dcgm",
            {"instance": "gpu01:9400", "exporter": "dcgm", "cluster": "demo"},
        ),
        Target(
            "http://gpu02:9400/metrics",
            "dcgm",
            {"instance": "gpu02:9400", "exporter": "dcgm", "cluster": "demo"},
        ),
        Target(
            "https://login01:9100/probe?module=gpu",
            "node",
            {"instance": "login01:9100", "job": "node", "node": "login01"},
        ),
    ]
    assert targets[2].node == "login01"
    assert targets[0].node is None
    assert len({*targets, *targets}) == 3  # hashable: the labels take no part in the hash


def test_yaml_file_sd(tmp_path: Path) -> None:
    targets = load_file_sd(_write(tmp_path, "targets.yml", YAML_SD))
    assert [(t.url, t.node) for t in targets] == [
        ("http://gpu01:9400/metrics", "gpu01"),
        ("http://gpu02:9400/metrics", "gpu02"),
    ]


def test_exporter_from_the_caller(tmp_path: Path) -> None:
    path = _write(tmp_path, "t.json", '[{"targets": ["gpu01:9400"]}]')
    with pytest.raises(TargetsError, match="no exporter kind"):
        load_file_sd(path)
    [target] = load_file_sd(path, exporter="dcgm")
    assert target.exporter == "dcgm"


@pytest.mark.parametrize(
    ("name", "text", "line", "column", "words"),
    [
        ("bad.json", '[{"targets": ["a:1"],}]', 1, 22, "not valid JSON"),
        ("bad.yml", "- targets: [a:1\n  labels: {}\n", 2, 9, "not valid YAML"),
        ("obj.json", '{"targets": ["a:1"]}', 1, 1, "expected a list of target groups"),
        ("t.yml", "- targets: []\n  labels: {exporter: dcgm}\n", 1, 12, "non-empty list"),
        ("t.yml", "- labels: {exporter: dcgm}\n", 1, 3, "non-empty list"),
        (
            "t.yml",
            "- targets: [ok:1]\n  labels: {exporter: dcgm}\n- targets: [http://gpu01:9400]\n"
            "  labels: {exporter: dcgm}\n",
            3,
            13,
            "target group 2: target 'http://gpu01:9400' must be host:port",
        ),
        (
            "t.yml",
            "- targets: [a:1]\n  labels: {exporter: dcgm, 1bad: x}\n",
            2,
            11,
            "invalid label",
        ),
        ("t.yml", "- targets: [a:1]\n  labels: {exporter: dcgm, port: 9400}\n", 2, 34, "string"),
        ("t.yml", "- targets: [a:1]\n  lables: {exporter: dcgm}\n", 1, 3, "unknown key 'lables'"),
        (
            "t.yml",
            "- targets: [a:1]\n  labels: {exporter: dcgm, __scheme__: ftp}\n",
            2,
            40,
            "__scheme__",
        ),
    ],
)
def test_errors_name_file_line_and_column(
    tmp_path: Path, name: str, text: str, line: int, column: int, words: str
) -> None:
    path = _write(tmp_path, name, text)
    with pytest.raises(TargetsError) as caught:
        load_file_sd(path)
    error = caught.value
    assert (error.source, error.line, error.column) == (str(path), line, column)
    assert words in error.message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TargetsError, match="cannot read the file") as caught:
        load_file_sd(tmp_path / "nope.json")
    assert caught.value.source.endswith("nope.json")
