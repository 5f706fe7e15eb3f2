"""NCCL's AllReduce latency table, as data.

NCCL predicts the time of a collective as ``latency + bytes / algorithm bandwidth``; the
latency part is a base cost per algorithm and protocol plus a cost per hop, which depends on
the link the hop crosses (NVLink, PCIe, network). The figures live in
``model/data/nccl_latency.yaml`` (transcribed from ``NVIDIA/nccl src/graph/tuning.cc``) so that
a site can recalibrate them from its own nccl-tests runs without touching code: pass another
file with the same shape to :func:`load_nccl_latencies`.

Latencies are stored in microseconds (NCCL's unit) and handed out in seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Literal

import yaml

from hpcscope.model import bounded_yaml
from hpcscope.model.bounds import read_text
from hpcscope.model.errors import SourceError

Algorithm = Literal["ring", "tree"]
Protocol = Literal["LL", "LL128", "Simple"]
Link = Literal["nvlink", "pci", "network"]

ALGORITHMS: tuple[Algorithm, ...] = ("ring", "tree")
PROTOCOLS: tuple[Protocol, ...] = ("LL", "LL128", "Simple")
LINKS: tuple[Link, ...] = ("nvlink", "pci", "network")


class NcclTableError(SourceError):
    """A latency table file that does not have the expected shape."""


@dataclass(frozen=True, slots=True)
class NcclLatencies:
    """Base and per-hop latencies of NCCL's cost model, in microseconds.

    Attributes:
        source: where the table came from (bundled file or a site's file).
        base_us: ``base_us[algorithm][protocol]``.
        hop_us: ``hop_us[link][algorithm][protocol]``.
    """

    source: str
    base_us: Mapping[str, Mapping[str, float]]
    hop_us: Mapping[str, Mapping[str, Mapping[str, float]]]

    def base_seconds(self, algorithm: Algorithm, protocol: Protocol) -> float:
        """Fixed cost of one collective call."""
        return self.base_us[algorithm][protocol] * 1e-6

    def hop_seconds(self, link: Link, algorithm: Algorithm, protocol: Protocol) -> float:
        """Cost of one step of the algorithm across ``link``."""
        return self.hop_us[link][algorithm][protocol] * 1e-6


def _number(value: object, *, source: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise NcclTableError(
            f"expected a number of microseconds, got {value!r}", source=source, field=field
        )
    if value < 0:
        raise NcclTableError(f"latency cannot be negative ({value})", source=source, field=field)
    return float(value)


def _mapping(value: object, *, source: str, field: str) -> Mapping[str, object]:
    if not isinstance(value, dict):
        raise NcclTableError("expected a mapping", source=source, field=field)
    return value


def parse_nccl_latencies(text: str, *, source: str = "<nccl latency table>") -> NcclLatencies:
    """Parse and validate a latency table (the shape of ``model/data/nccl_latency.yaml``).

    Raises:
        NcclTableError: bad YAML or a missing/negative entry, naming the field.
    """
    try:
        raw = bounded_yaml.safe_load(text, source=source)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        raise NcclTableError(
            f"not valid YAML: {exc.problem}",
            source=source,
            line=mark.line + 1 if mark else None,
            column=mark.column + 1 if mark else None,
        ) from None
    except yaml.YAMLError as exc:  # a character YAML refuses (ReaderError): no mark
        raise NcclTableError(f"not valid YAML: {exc}", source=source) from None
    document = _mapping(raw, source=source, field="(document)")
    base_raw = _mapping(document.get("base_us"), source=source, field="base_us")
    hop_raw = _mapping(document.get("hop_us"), source=source, field="hop_us")
    base: dict[str, Mapping[str, float]] = {}
    for algorithm in ALGORITHMS:
        row = _mapping(base_raw.get(algorithm), source=source, field=f"base_us.{algorithm}")
        base[algorithm] = MappingProxyType(
            {
                p: _number(row.get(p), source=source, field=f"base_us.{algorithm}.{p}")
                for p in PROTOCOLS
            }
        )
    hops: dict[str, Mapping[str, Mapping[str, float]]] = {}
    for link in LINKS:
        per_link = _mapping(hop_raw.get(link), source=source, field=f"hop_us.{link}")
        rows: dict[str, Mapping[str, float]] = {}
        for algorithm in ALGORITHMS:
            where = f"hop_us.{link}.{algorithm}"
            row = _mapping(per_link.get(algorithm), source=source, field=where)
            rows[algorithm] = MappingProxyType(
                {p: _number(row.get(p), source=source, field=f"{where}.{p}") for p in PROTOCOLS}
            )
        hops[link] = MappingProxyType(rows)
    return NcclLatencies(
        source=source, base_us=MappingProxyType(base), hop_us=MappingProxyType(hops)
    )


def default_nccl_latencies() -> NcclLatencies:
    """The bundled table (NCCL ~2.19/2.20 figures)."""
    text = resources.files("hpcscope.model").joinpath("data/nccl_latency.yaml").read_text("utf-8")
    return parse_nccl_latencies(text, source="hpcscope/model/data/nccl_latency.yaml")


def load_nccl_latencies(path: str | Path) -> NcclLatencies:
    """Read a site's latency table.

    Raises:
        NcclTableError: unreadable file or a bad table.
    """
    return parse_nccl_latencies(read_text(path, error=NcclTableError), source=str(path))
