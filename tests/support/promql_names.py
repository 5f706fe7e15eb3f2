"""The metric names a PromQL expression reads, and the names hpcscope's sources really export.

Used by the lint tests of the shipped Prometheus rules and Grafana dashboards: every series an
expression names must be one that the twin's dcgm-exporter and node_exporter pages (with
hpcscope's dcgm-exporter counters file), hpcscope's own ``/metrics`` (its golden page) or a
shipped recording rule produce, or Prometheus' own ``ALERTS``.
"""

from __future__ import annotations

import re
import time
from functools import cache
from pathlib import Path

import yaml

from hpcscope.model.topology import load_topology
from hpcscope.service.settings import bundled_topology
from hpcscope.twin.dcgm import FAMILIES
from hpcscope.twin.node_exporter import InfinibandEndpoint, PortTraffic

ROOT = Path(__file__).resolve().parents[2]
COUNTERS_CSV = ROOT / "deploy" / "dcgm-exporter" / "hpcscope-counters.csv"
METRICS_GOLDEN = ROOT / "tests" / "serve" / "golden" / "metrics.txt"
RULES_DIR = ROOT / "deploy" / "prometheus"
#: Series Prometheus writes itself.
PROMETHEUS_OWN = frozenset({"ALERTS", "ALERTS_FOR_STATE", "up"})

_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless"}
    | {"offset", "bool", "inf", "nan", "Inf", "NaN"}
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_VARIABLE = re.compile(r"\$\{?\w+\}?")
_OFFSET = re.compile(r"\boffset\s+-?(?:\d+(?:ms|[smhdwy]))+")
_NUMBER = re.compile(r"(?<![\w:])\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_IDENTIFIER = re.compile(r"(?<![\w:])[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects (functions, keywords, labels and variables left out)."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _OFFSET.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = _VARIABLE.sub(" ", text)
    text = _NUMBER.sub(" ", text)
    found = set()
    for match in _IDENTIFIER.finditer(text):
        name = match.group(0)
        rest = text[match.end() :].lstrip()
        if name in _KEYWORDS or rest.startswith("("):
            continue
        found.add(name)
    return found


def recorded_names() -> set[str]:
    """Every series a shipped recording rule writes."""
    names: set[str] = set()
    for path in sorted(RULES_DIR.glob("*.yml")):
        if path.name.endswith(".test.yml"):
            continue
        for group in yaml.safe_load(path.read_text())["groups"]:
            names.update(rule["record"] for rule in group["rules"] if "record" in rule)
    return names


@cache
def exported_names() -> frozenset[str]:
    """What the exporters hpcscope is deployed with, and hpcscope itself, really export."""
    enabled = {
        line.split(",", 1)[0].strip()
        for line in COUNTERS_CSV.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    dcgm = {family.name for family in FAMILIES if family.name in enabled}
    dcgm |= {"DCGM_EXP_XID_ERRORS_COUNT"} & enabled  # printed only while a GPU has an Xid
    topology = load_topology(bundled_topology())
    page = InfinibandEndpoint(
        topology.nodes[0].hcas, traffic=lambda hca: PortTraffic(0.0, 0.0), clock=time.time, seed=1
    ).collect()
    node = set(re.findall(r"^# TYPE (\S+)", page, flags=re.MULTILINE))
    hpcscope = set(re.findall(r"^# TYPE (hpcscope_\w+)", METRICS_GOLDEN.read_text(), re.MULTILINE))
    return frozenset(dcgm | node | hpcscope | PROMETHEUS_OWN)


def known_names() -> frozenset[str]:
    """Exported series and recorded series together."""
    return exported_names() | frozenset(recorded_names())
