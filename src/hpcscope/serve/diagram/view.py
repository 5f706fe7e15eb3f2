"""From live state to what the SVG shows: CSS classes, text lines, accessible names, JSON.

The layout says where a shape is; :class:`~hpcscope.service.diagram.live.LiveState` says what is
known about it for this viewer. This module joins the two for the template (first render) and
for the polling endpoint (later updates), so both always agree.

Colour buckets follow the app's real-efficiency scale (``eff-0`` < 20 % ... ``eff-4`` >= 80 %
SM active). A GPU is coloured by *real* efficiency only; its text always shows reported
utilisation beside it, never alone.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping
from datetime import datetime
from enum import Enum
from typing import Any, NotRequired, TypedDict

import orjson

from hpcscope.model.timeutil import iso_z
from hpcscope.model.topology import ElementKind
from hpcscope.serve.diagram.shapes import DiagramLayout, Role, Shape
from hpcscope.serve.templating import efficiency_bucket, percent
from hpcscope.service.diagram.collectors import CollectorHealth, CollectorStatus
from hpcscope.service.diagram.live import GpuNow, GpuState, LiveState, NodeLive

_STATE_WORDS = {
    GpuState.ALLOCATED: "allocated",
    GpuState.IDLE: "idle",
    GpuState.STALE: "no recent data",
    GpuState.NODATA: "no data",
}


def gpu_class(gpu: GpuNow) -> str:
    """``st-<state>``, the real-efficiency bucket when shown, ``xid`` and ``v-<verdict>``."""
    classes = [f"st-{gpu.state.value}"]
    if gpu.state is GpuState.ACTIVE:
        classes.append(efficiency_bucket(gpu.sm_active_ratio))
    if gpu.xid_last:
        classes.append("xid")
    if gpu.verdict:
        classes.append(f"v-{gpu.verdict}")
    return " ".join(classes)


def node_class(node: NodeLive, open_alerts: int, worst: str | None = None) -> str:
    """A node tile takes its worst visible GPU's colour (aggregate view)."""
    if node.active:
        classes = ["st-active", efficiency_bucket(node.worst_sm_active_ratio)]
    elif node.allocated_hidden:
        classes = ["st-allocated"]
    elif node.idle:
        classes = ["st-idle"]
    else:
        classes = ["st-stale" if node.stale else "st-nodata"]
    if node.xid_gpus:
        classes.append("xid")
    if open_alerts:
        classes.append("alerted")
        if worst:
            classes.append(f"sev-{worst.lower()}")
    return " ".join(classes)


#: Short words for the analysis' per-GPU verdicts (hpcscope.analysis.jobs.efficiency.GpuVerdict).
VERDICT_WORDS = {
    "straggler": "straggler",
    "waiting_at_barrier": "at barrier",
    "busy_not_computing": "not computing",
    "low_efficiency": "low efficiency",
    "idle": "idle",
    "xid_error": "Xid error",
    "healthy": "healthy",
    "no_data": "",
}


def gpu_lines(gpu: GpuNow, label: str) -> tuple[str, str, str, str, str]:
    """Five text lines of a detailed GPU box: name, real, reported, job tag, verdict."""
    job = f"job {gpu.job_ids[0]}" if gpu.job_ids else ""
    if len(gpu.job_ids) > 1:
        job += f" +{len(gpu.job_ids) - 1}"
    if gpu.state in _STATE_WORDS and not gpu.has_values:
        return label, _STATE_WORDS[gpu.state], "", job, ""
    if gpu.state is GpuState.IDLE:
        return label, "idle", f"rep. {percent(gpu.reported_util_ratio)}", "", ""
    return (
        label,
        f"real {percent(gpu.sm_active_ratio)}",
        f"rep. {percent(gpu.reported_util_ratio)}",
        job,
        VERDICT_WORDS.get(gpu.verdict or "", gpu.verdict or ""),
    )


def gpu_aria(gpu: GpuNow, node: str, label: str) -> str:
    """Accessible name of a GPU: where it is, then what is known, real efficiency first."""
    where = f"{label} of {node}"
    if gpu.state is GpuState.ACTIVE:
        jobs = ", ".join(gpu.job_ids)
        verdict = VERDICT_WORDS.get(gpu.verdict or "", "")
        return (
            f"{where}: job {jobs}, real efficiency {percent(gpu.sm_active_ratio)} SM active, "
            f"reported utilisation {percent(gpu.reported_util_ratio)}"
            + (f", {verdict}" if verdict else "")
            + (f", last Xid {gpu.xid_last}" if gpu.xid_last else "")
        )
    if gpu.state is GpuState.IDLE and gpu.has_values:
        return f"{where}: idle, no job, reported utilisation {percent(gpu.reported_util_ratio)}"
    return f"{where}: {_STATE_WORDS.get(gpu.state, gpu.state.value)}"


def node_aria(node: NodeLive) -> str:
    parts = [f"Node {node.node}: {node.gpus} GPUs"]
    if node.active:
        parts.append(
            f"{node.active} in your view, real efficiency {percent(node.sm_active_ratio)} "
            f"SM active, reported utilisation {percent(node.reported_util_ratio)}"
        )
    if node.allocated_hidden:
        parts.append(f"{node.allocated_hidden} allocated")
    if node.idle:
        parts.append(f"{node.idle} idle")
    if node.stale:
        parts.append(f"{node.stale} without recent data")
    return ", ".join(parts)


#: What a screen reader says before an element's label, by kind (the rest say the label only).
_KIND_WORDS = {
    ElementKind.NVSWITCH: "NVLink switch",
    ElementKind.HCA: "InfiniBand HCA",
    ElementKind.FABRIC: "Fabric",
    ElementKind.STORAGE: "Storage",
    ElementKind.SCHEDULER: "Scheduler",
    ElementKind.SOFTWARE: "Software",
    ElementKind.WEIGHTS: "Asset",
}


def _shape_aria(shape: Shape) -> str:
    if shape.role is Role.COLLECTOR:
        return f"Collector {shape.label}"
    if shape.role is Role.VECTOR:
        return f"Threat vector {shape.label}"
    prefix = _KIND_WORDS.get(shape.kind) if shape.kind is not None else None
    where = f" of {shape.node}" if shape.node and shape.kind is not ElementKind.NODE else ""
    text = f"{prefix}: {shape.label}" if prefix else shape.label
    return f"{text}{where}" + (f", {shape.sublabel}" if shape.sublabel else "")


def plural(count: int, noun: str) -> str:
    """``alert`` for one, ``alerts`` for any other count ("1 open alert", "0 open alerts")."""
    return noun if count == 1 else noun + "s"


def duration(seconds: float | None) -> str:
    """A duration for people: ``4 s``, ``3 min``, ``2 h``, ``5 d``; ``—`` when unknown."""
    if seconds is None:
        return "—"
    seconds = max(0.0, seconds)
    for unit, size, from_seconds in (
        ("d", 86400.0, 172800.0),
        ("h", 3600.0, 7200.0),
        ("min", 60.0, 60.0),
    ):
        if seconds >= from_seconds:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def collector_status_text(health: CollectorHealth) -> str:
    """``ok · 4 s``, ``stale · 3 min``, ``failing · 1 of 2 targets``, ``not configured``."""
    if health.status is CollectorStatus.NOT_CONFIGURED:
        return "not configured"
    if health.status is CollectorStatus.CONFIGURED:
        return "configured · " + (
            f"last event {health.last_event_ts:%H:%M:%S} UTC"
            if health.last_event_ts
            else "no event yet"
        )
    if health.status is CollectorStatus.FAILING:
        return f"failing · {health.failing_targets} of {health.targets} targets"
    return f"{health.status.value} · {duration(health.staleness_seconds)}"


#: One shape live: its classes, its accessible name, and its text lines where it has some
#: (``class`` is a keyword: the functional form).
ShapeLive = TypedDict("ShapeLive", {"class": str, "label": str, "lines": NotRequired[list[str]]})


def shape_view(layout: DiagramLayout, state: LiveState) -> dict[str, ShapeLive]:
    """Per shape id: ``class`` (live classes), ``label`` (accessible name), ``lines`` (GPU text).

    Only shapes drawn in ``layout`` appear. Cells carry a class and a tooltip only.
    """
    out: dict[str, ShapeLive] = {}
    collectors = {f"collector-{c.id}": c for c in state.collectors}
    for shape in layout.shapes:
        entry: ShapeLive = {"class": "", "label": _shape_aria(shape)}
        if shape.kind is ElementKind.GPU and shape.id in state.gpus:
            gpu = state.gpus[shape.id]
            entry["class"] = gpu_class(gpu)
            entry["label"] = gpu_aria(gpu, shape.node or "", shape.label)
            if shape.role is Role.ELEMENT:
                entry["lines"] = list(gpu_lines(gpu, shape.label))
        elif shape.kind is ElementKind.NODE and shape.id in state.nodes:
            node = state.nodes[shape.id]
            alerts = state.alerts.by_node.get(node.node, 0) if state.alerts.shown else 0
            worst = state.alerts.worst_by_node.get(node.node) if alerts else None
            entry["class"] = node_class(node, alerts, worst)
            opened = f"{alerts} open {plural(alerts, 'alert')}"
            entry["label"] = node_aria(node) + (
                f"; {opened}, worst {worst}" if alerts and worst else ""
            )
        elif shape.id in collectors:
            health = collectors[shape.id]
            status = collector_status_text(health)
            entry["class"] = f"cs-{health.status.value}"
            entry["label"] = f"Collector {shape.label}: {status}"
            entry["lines"] = [shape.label, status]
        elif shape.role is Role.VECTOR:
            vector_id = shape.id.removeprefix("vector-")
            if state.alerts.shown and state.alerts.configured:
                count = state.alerts.by_vector.get(vector_id, 0)
                worst = state.alerts.worst_by_vector.get(vector_id)
                entry["class"] = f"alerted sev-{worst.lower()}" if count and worst else ""
                opened = f"{count} open {plural(count, 'alert')}"
                entry["label"] = f"Threat vector {shape.label}: {opened}" + (
                    f", worst {worst}" if count and worst else ""
                )
                entry["lines"] = [shape.label, f"{count} open" if count else ""]
            else:
                entry["lines"] = [shape.label, ""]
        out[shape.id] = entry
    return out


def live_payload(layout: DiagramLayout, state: LiveState, summary: str) -> tuple[bytes, str]:
    """The polling endpoint's body and its ETag (a hash of the body).

    Returns:
        JSON bytes ``{"generated_at", "summary", "elements": {id: {class, label, lines?}}}``
        and a strong ETag; a poller sending it back gets 304 while nothing changed.
    """
    elements = shape_view(layout, state)
    body = {"summary": summary, "elements": elements}
    digest = hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]
    payload = {"generated_at": iso_z(state.generated_at), **body}
    # The contract (DiagramState) is checked by tests/serve/test_diagram_contracts.py on the
    # real output, not here: validating 1,152 elements costs 2.4 ms a poll at 128 nodes, 56x
    # the serialisation, for every viewer every few seconds.
    return orjson.dumps(payload), f'"{digest}"'


def jsonable(value: Any) -> Any:
    """Dataclasses, enums, datetimes, mappings and tuples as plain JSON values (NaN -> None)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: jsonable(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not f.name.startswith("_")
        }
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return iso_z(value)
    if isinstance(value, Mapping):
        return {str(k.value if isinstance(k, Enum) else k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
