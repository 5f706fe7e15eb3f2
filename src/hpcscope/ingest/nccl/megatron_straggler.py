"""Megatron-LM ``StragglerDetector`` lines (``--log-straggler``): min/max per metric and rank.

``| MnRtt/Rnk: 3453.08ms/8 | MxRtt/Rnk: 3468.20ms/0 | ...`` names, for each metric, the lowest
and highest value over ranks and the rank that holds it; ``Bottom/Top N Ranks with lowest/
highest Etpt(TF): 296.02/0, ...`` lists throughput extremes. Values are converted to base
units (ms -> seconds, % -> ratio, MHz -> hertz, TF -> FLOP/s); ``Pwr`` is printed with a ``W``
unit and kept as published.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hpcscope.model.nccl import LineRef

MEGA = re.compile(
    r"(?P<which>Mn|Mx)(?P<metric>Rtt|Pwr|Tmp|Utl|Clk|DRtt|Etpt)/Rnk: "
    r"(?P<value>(?:\d+(?:\.\d*)?|\.\d+))(?P<unit>ms|W|C|%|MHz|TF)/(?P<rank>\d+)"
)
EXTREMES = re.compile(
    r"(?P<side>Bottom|Top)\s+(?P<n>\d+) Ranks with (?:lowest|highest)\s+Etpt\(TF\):\s*"
    r"(?P<pairs>(?:(?:\d+(?:\.\d*)?|\.\d+)/\d+,?\s*)+)"
)
PAIR = re.compile(r"(?P<value>(?:\d+(?:\.\d*)?|\.\d+))/(?P<rank>\d+)")

#: metric -> (what it measures, base-unit name, factor from the printed unit)
METRICS: dict[str, tuple[str, str, float]] = {
    "Rtt": ("iteration round-trip time", "seconds", 1e-3),
    "DRtt": ("data-loader round-trip time", "seconds", 1e-3),
    "Pwr": ("GPU power as printed", "watts", 1.0),
    "Tmp": ("GPU temperature", "celsius", 1.0),
    "Utl": ("GPU utilization", "ratio", 0.01),
    "Clk": ("SM clock", "hertz", 1e6),
    "Etpt": ("estimated throughput", "flops_per_second", 1e12),
}


@dataclass(frozen=True, slots=True)
class StragglerExtreme:
    """One ``MnX/Rnk`` or ``MxX/Rnk`` pair, in base units (``unit`` names them)."""

    at: LineRef
    metric: str
    which: str
    value: float
    unit: str
    rank: int


@dataclass(frozen=True, slots=True)
class ThroughputRanking:
    """``Bottom 4 Ranks with lowest Etpt(TF): 296.02/0, ...`` in FLOP/s per rank."""

    at: LineRef
    side: str
    ranks: tuple[tuple[int, float], ...]


def parse_straggler_line(text: str, at: LineRef) -> list[StragglerExtreme | ThroughputRanking]:
    """Every min/max pair or ranking on the line (empty when it is not a StragglerDetector line)."""
    found: list[StragglerExtreme | ThroughputRanking] = []
    for m in MEGA.finditer(text):
        _, unit, factor = METRICS[m["metric"]]
        found.append(
            StragglerExtreme(
                at,
                metric=m["metric"],
                which="min" if m["which"] == "Mn" else "max",
                value=float(m["value"]) * factor,
                unit=unit,
                rank=int(m["rank"]),
            )
        )
    if not found and (ranking := EXTREMES.search(text)):
        pairs = tuple(
            (int(p["rank"]), float(p["value"]) * 1e12) for p in PAIR.finditer(ranking["pairs"])
        )
        found.append(ThroughputRanking(at, side=ranking["side"].lower(), ranks=pairs))
    return found
