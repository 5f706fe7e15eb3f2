"""Scrape targets, and reading them from Prometheus ``file_sd`` files (JSON or YAML).

A file_sd file is a list of target groups (prometheus.io/docs/prometheus/latest/configuration/
configuration/#file_sd_config)::

    [{"targets": ["gpu01:9400", "gpu02:9400"], "labels": {"exporter": "dcgm", "node": "gpu01"}}]

Prometheus' meta labels are honoured: ``__scheme__`` (default ``http``), ``__metrics_path__``
(default ``/metrics``) and ``__param_<name>`` (a URL query parameter); other labels starting
with ``__`` are dropped, as relabelling would. ``instance`` defaults to the address. The
exporter kind comes from the ``exporter`` label, else the ``job`` label, else the caller.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import urlencode

import yaml

from hpcscope.model import bounded_yaml
from hpcscope.model.bounds import loads_json
from hpcscope.model.errors import SourceError

__all__ = ["Target", "TargetsError", "load_file_sd", "parse_file_sd"]

_LABEL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ADDRESS_RE = re.compile(r"[^\s/?#@]+")


class TargetsError(SourceError):
    """A file_sd file that does not describe targets."""


@dataclass(frozen=True, slots=True)
class Target:
    """One ``/metrics`` endpoint: its URL, the exporter that serves it, and its labels.

    ``labels`` (e.g. ``{"node": "gpu01"}``) take no part in hashing: a target is identified
    by its URL and exporter.
    """

    url: str
    exporter: str
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))

    @property
    def node(self) -> str | None:
        """The ``node`` label: the cluster node this target reports on, if known."""
        return self.labels.get("node")


class _Positions:
    """Line and column (1-based) of the target groups in a YAML/JSON document."""

    def __init__(self, text: str, source: str) -> None:
        try:
            self.root: yaml.Node | None = bounded_yaml.compose(text, source=source)[0]
        except (yaml.YAMLError, SourceError):  # the data was read: only positions are lost
            self.root = None

    def of(self, *path: int | str) -> tuple[int | None, int | None]:
        """Position of the node at ``path``, or of its deepest ancestor present."""
        node = self.root
        for step in path:
            child: yaml.Node | None = None
            if isinstance(node, yaml.SequenceNode) and isinstance(step, int):
                child = node.value[step] if step < len(node.value) else None
            elif isinstance(node, yaml.MappingNode) and isinstance(step, str):
                child = next((v for k, v in node.value if k.value == step), None)
            if child is None:
                break
            node = child
        if node is None:
            return None, None
        return node.start_mark.line + 1, node.start_mark.column + 1


def load_file_sd(path: str | Path, *, exporter: str | None = None) -> list[Target]:
    """Targets of a Prometheus file_sd file (``.json``, ``.yml`` or ``.yaml``).

    Args:
        path: the file.
        exporter: exporter kind for groups that carry no ``exporter`` or ``job`` label.

    Raises:
        TargetsError: the file is unreadable or not a list of target groups; the message
            names the file, line and column.
    """
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TargetsError(f"cannot read the file: {exc}", source=source) from exc
    return parse_file_sd(text, source=source, exporter=exporter)


def parse_file_sd(text: str, *, source: str, exporter: str | None = None) -> list[Target]:
    """Targets of file_sd content (see :func:`load_file_sd`)."""
    data = _load(text, source)
    positions = _Positions(text, source)
    if not isinstance(data, list):
        line, column = positions.of()
        raise TargetsError(
            "expected a list of target groups ({targets: [...], labels: {...}})",
            source=source,
            line=line,
            column=column,
        )
    targets: list[Target] = []
    for index, group in enumerate(data):
        targets.extend(_group_targets(group, index, source, positions, exporter))
    return targets


def _load(text: str, source: str) -> Any:
    if source.endswith(".json"):
        try:
            return loads_json(text, source=source)
        except json.JSONDecodeError as exc:
            raise TargetsError(
                f"not valid JSON: {exc.msg}", source=source, line=exc.lineno, column=exc.colno
            ) from exc
    try:
        return bounded_yaml.safe_load(text, source=source)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or "syntax error"
        raise TargetsError(
            f"not valid YAML: {problem}",
            source=source,
            line=None if mark is None else mark.line + 1,
            column=None if mark is None else mark.column + 1,
        ) from exc


def _group_targets(
    group: Any, index: int, source: str, positions: _Positions, exporter: str | None
) -> list[Target]:
    def fail(message: str, *path: int | str, field: str | None = None) -> TargetsError:
        line, column = positions.of(index, *path)
        return TargetsError(
            f"target group {index + 1}: {message}",
            source=source,
            line=line,
            column=column,
            field=field,
        )

    if not isinstance(group, dict):
        raise fail("expected a mapping with 'targets' and 'labels'")
    unknown = set(group) - {"targets", "labels"}
    if unknown:
        raise fail(f"unknown key {sorted(unknown)[0]!r} (expected 'targets' and 'labels')")
    addresses = group.get("targets")
    if not isinstance(addresses, list) or not addresses:
        raise fail("'targets' must be a non-empty list of host:port", "targets", field="targets")
    labels = group.get("labels") or {}
    if not isinstance(labels, dict):
        raise fail("'labels' must be a mapping of label names to strings", "labels", field="labels")
    for name, value in labels.items():
        if not isinstance(name, str) or _LABEL_NAME_RE.fullmatch(name) is None:
            raise fail(f"invalid label name {name!r}", "labels", field="labels")
        if not isinstance(value, str):
            raise fail(
                f"the value of label {name!r} must be a string (quote it)",
                "labels",
                name,
                field=name,
            )
    scheme = labels.get("__scheme__", "http")
    if scheme not in ("http", "https"):
        raise fail(f"__scheme__ must be http or https, not {scheme!r}", "labels", "__scheme__")
    path = labels.get("__metrics_path__", "/metrics")
    if not path.startswith("/"):
        raise fail(f"__metrics_path__ must start with '/', not {path!r}", "labels")
    params = {
        name[len("__param_") :]: value
        for name, value in labels.items()
        if name.startswith("__param_")
    }
    query = f"?{urlencode(params)}" if params else ""
    kept = {name: value for name, value in labels.items() if not name.startswith("__")}
    kind = kept.get("exporter") or kept.get("job") or exporter
    if not kind:
        raise fail(
            "no exporter kind: add an 'exporter' (or 'job') label, e.g. exporter: dcgm", "labels"
        )
    targets = []
    for position, address in enumerate(addresses):
        if not isinstance(address, str) or _ADDRESS_RE.fullmatch(address) is None:
            raise fail(
                f"target {address!r} must be host:port, without scheme or path "
                "(use __scheme__ and __metrics_path__ labels)",
                "targets",
                position,
                field="targets",
            )
        target_labels = {"instance": address, **kept}
        targets.append(Target(f"{scheme}://{address}{path}{query}", kind, target_labels))
    return targets
