"""Element cards of the cluster diagram: the catalog's text plus the element's live values.

One card per element id of the diagram (topology elements, ``collector-<id>``,
``vector-<id>``). The static part comes from the catalog (what it is, what to observe and with
which tool, what threatens it); the live part is a kind-specific value object, constrained by
the viewer exactly like :func:`hpcscope.service.diagram.live.live_state`. Where hpcscope does not
collect a source (not configured here: node-exporter's InfiniBand counters, the Lustre job_stats
spool; not collected yet: Falco and Tetragon events, checkpoint access events, profiler traces on
the diagram), the card carries a :class:`NotCollected` naming the collector that would provide
it, never a number.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from hpcscope.analysis.jobs.report import GpuReport
from hpcscope.model.catalog import Card, ThreatVector
from hpcscope.model.errors import InputError
from hpcscope.model.timeutil import utcnow
from hpcscope.model.topology import Element, ElementKind, Layer
from hpcscope.service.core import Service
from hpcscope.service.diagram.alert_counts import AlertSummary, alert_summary
from hpcscope.service.diagram.collectors import CollectorHealth, CollectorStatus, collector_health
from hpcscope.service.diagram.live import GpuNow, NodeLive, gpu_views
from hpcscope.service.diagram.ports import PortNow, port_now
from hpcscope.service.diagram.viewer import Viewer
from hpcscope.store import diagram as queries


class UnknownElement(InputError, KeyError):
    """No element of the diagram has this id."""


@dataclass(frozen=True, slots=True)
class NotCollected:
    """A source the card would show, and why it is absent."""

    what: str
    collector_id: str
    collector_name: str
    status: CollectorStatus

    @property
    def message(self) -> str:
        if self.status is CollectorStatus.NOT_CONFIGURED:
            return (
                f"{self.what}: not collected here. The {self.collector_name} collector would "
                "provide it; it is not configured in this hpcscope installation."
            )
        return (
            f"{self.what}: {self.collector_name} is reporting, but hpcscope does not store "
            "these values yet."
        )


@dataclass(frozen=True, slots=True)
class JobBrief:
    """A job the viewer may see (others never reach a card)."""

    job_id: str
    name: str | None
    user: str | None
    account: str | None
    state: str | None
    submit_time: datetime | None
    start_time: datetime | None
    gpus: int | None
    nodes: str | None


@dataclass(frozen=True, slots=True)
class GpuInJob:
    """This GPU over a job's whole run, and the job's own figures: the job report's numbers."""

    job_id: str
    gpu: GpuReport | None
    job_verdict: str
    explanation: str
    job_reported_util_ratio: float | None
    job_sm_active_ratio: float | None
    gpus_observed: int
    cost_lost: float | None
    currency: str


@dataclass(frozen=True, slots=True)
class GpuCardLive:
    gpu: GpuNow
    jobs: tuple[JobBrief, ...]
    over_job: tuple[GpuInJob, ...]
    paired_hca: str | None


@dataclass(frozen=True, slots=True)
class NodeCardLive:
    node: NodeLive
    gpus: tuple[GpuNow, ...]
    jobs: tuple[JobBrief, ...]
    not_collected: tuple[NotCollected, ...]


@dataclass(frozen=True, slots=True)
class NvswitchCardLive:
    nvlink_tx_bytes_per_second: float | None
    nvlink_rx_bytes_per_second: float | None
    gpus_counted: int
    gpus_hidden: int


@dataclass(frozen=True, slots=True)
class PortCardLive:
    """An HCA or the fabric: its port figures, or why they are not shown."""

    paired_gpu: str | None
    not_collected: tuple[NotCollected, ...]
    port: PortNow | None = None
    hidden: str | None = None  # why the viewer may not see this node's port figures


@dataclass(frozen=True, slots=True)
class SchedulerCardLive:
    pending: int
    running: int
    oldest_pending_wait_seconds: float | None
    started_last_day: int
    wait_median_seconds: float | None
    wait_p90_seconds: float | None
    eligible_wait_median_seconds: float | None
    jobs: tuple[JobBrief, ...]


@dataclass(frozen=True, slots=True)
class SourcesCardLive:
    """Storage, software stack, weights: what would feed them, and what is there."""

    facts: tuple[tuple[str, str], ...]
    not_collected: tuple[NotCollected, ...]


@dataclass(frozen=True, slots=True)
class CollectorCardLive:
    health: CollectorHealth
    targets: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class VectorCardLive:
    vector: ThreatVector
    target_kinds: tuple[str, ...]
    alerts: AlertSummary
    open_alerts: int | None


CardLive = (
    GpuCardLive
    | NodeCardLive
    | NvswitchCardLive
    | PortCardLive
    | SchedulerCardLive
    | SourcesCardLive
    | CollectorCardLive
    | VectorCardLive
)


@dataclass(frozen=True, slots=True)
class ElementCard:
    """Everything a card shows for one element and one viewer."""

    id: str
    kind: str
    label: str
    layer: Layer | None
    owner: str | None
    card: Card | None
    collectors: tuple[CollectorHealth, ...]
    vectors: tuple[ThreatVector, ...]
    live: CardLive
    generated_at: datetime
    anonymous: bool


def _element_index(service: Service) -> dict[str, Element]:
    return {element.id: element for element in service.topology.elements()}


def _jobs(service: Service, viewer: Viewer, job_ids: list[str]) -> tuple[JobBrief, ...]:
    rows = queries.visible_jobs(service.store, scope=viewer.scope(), job_ids=job_ids)
    return tuple(
        JobBrief(
            job_id=str(r["job_id"]),
            name=r["name"],
            user=r["user"],
            account=r["account"],
            state=r["state"],
            submit_time=r["submit_time"],
            start_time=r["start_time"],
            gpus=r["gpus"],
            nodes=r["nodes"],
        )
        for r in rows
    )


def _not_collected(
    health: dict[str, CollectorHealth], *pairs: tuple[str, str]
) -> tuple[NotCollected, ...]:
    return tuple(
        NotCollected(what, cid, health[cid].name, health[cid].status) for what, cid in pairs
    )


def _gpu_card(service: Service, viewer: Viewer, element: Element, now: datetime) -> GpuCardLive:
    node_name = element.parent_id.removeprefix("node-") if element.parent_id else ""
    node = service.topology.node(node_name)
    index = int(element.id.rsplit("-", 1)[1])
    gpus, _, _ = gpu_views(service, viewer, now=now, nodes=[node_name])
    gpu = gpus[element.id]
    over: list[GpuInJob] = []
    if viewer.principal is not None:
        for job_id in gpu.job_ids:
            report = service.job_report(viewer.principal, job_id, now=now)
            if report is None:
                continue
            mine = next((g for g in report.gpus if g.node == node_name and g.gpu == index), None)
            over.append(
                GpuInJob(
                    job_id=job_id,
                    gpu=mine,
                    job_verdict=report.verdict,
                    explanation=report.explanation,
                    job_reported_util_ratio=report.reported_util_ratio,
                    job_sm_active_ratio=report.sm_active_ratio,
                    gpus_observed=report.gpus_observed,
                    cost_lost=report.cost_lost,
                    currency=report.currency,
                )
            )
    hca = next((h.element_id for h in node.hcas if h.gpu_index == index), None)
    return GpuCardLive(gpu, _jobs(service, viewer, list(gpu.job_ids)), tuple(over), hca)


def _node_card(
    service: Service,
    viewer: Viewer,
    element: Element,
    now: datetime,
    health: dict[str, CollectorHealth],
) -> NodeCardLive:
    node_name = element.id.removeprefix("node-")
    gpu_map, nodes, _ = gpu_views(service, viewer, now=now, nodes=[node_name])
    live = nodes[element.id]
    gpus = tuple(gpu_map.values())
    missing = [
        (what, cid)
        for what, cid in (
            ("Host CPU, memory, filesystem and network", "node-exporter"),
            ("Syscall-level security events", "falco"),
            ("Process and file events in job cgroups", "tetragon"),
        )
        if health[cid].status is CollectorStatus.NOT_CONFIGURED
    ]
    return NodeCardLive(
        live, gpus, _jobs(service, viewer, list(live.job_ids)), _not_collected(health, *missing)
    )


def _hca_card(
    service: Service,
    viewer: Viewer,
    element: Element,
    now: datetime,
    health: dict[str, CollectorHealth],
) -> PortCardLive:
    node = service.topology.node((element.parent_id or "").removeprefix("node-"))
    hca = next(h for h in node.hcas if h.element_id == element.id)
    paired = f"gpu-{hca.node}-{hca.gpu_index}" if hca.gpu_index is not None else None
    port, hidden = port_now(service, viewer, hca, now=now)
    missing = _not_collected(
        health, ("Port throughput, packets, errors and link state", "ib-counters")
    )
    return PortCardLive(paired, () if port is not None else missing, port=port, hidden=hidden)


def _nvswitch_card(
    service: Service, viewer: Viewer, element: Element, now: datetime
) -> NvswitchCardLive:
    node_name = element.id.removeprefix("nvswitch-")
    gpus, _, _ = gpu_views(service, viewer, now=now, nodes=[node_name])
    seen = [g for g in gpus.values() if g.nvlink_tx_bytes_per_second is not None]
    return NvswitchCardLive(
        nvlink_tx_bytes_per_second=sum(g.nvlink_tx_bytes_per_second or 0.0 for g in seen)
        if seen
        else None,
        nvlink_rx_bytes_per_second=sum(g.nvlink_rx_bytes_per_second or 0.0 for g in seen)
        if seen
        else None,
        gpus_counted=len(seen),
        gpus_hidden=sum(1 for g in gpus.values() if g.hidden_jobs and not g.job_ids),
    )


def _scheduler_card(service: Service, viewer: Viewer, now: datetime) -> SchedulerCardLive:
    summary = queries.scheduler_summary(service.store, now=now, since=now - timedelta(days=1))
    oldest = summary["oldest_pending_submit"]
    rows = queries.active_jobs(service.store, scope=viewer.scope())
    jobs = tuple(
        JobBrief(
            str(r["job_id"]),
            r["name"],
            r["user"],
            r["account"],
            r["state"],
            r["submit_time"],
            r["start_time"],
            r["gpus"],
            r["nodes"],
        )
        for r in rows
    )
    return SchedulerCardLive(
        pending=int(summary["pending"]),
        running=int(summary["running"]),
        oldest_pending_wait_seconds=(now - oldest).total_seconds() if oldest else None,
        started_last_day=int(summary["started_since"]),
        wait_median_seconds=summary["wait_median_seconds"],
        wait_p90_seconds=summary["wait_p90_seconds"],
        eligible_wait_median_seconds=summary["eligible_wait_median_seconds"],
        jobs=jobs,
    )


def _sources_card(
    service: Service, kind: ElementKind, health: dict[str, CollectorHealth]
) -> SourcesCardLive | PortCardLive:
    topology = service.topology
    if kind is ElementKind.FABRIC:
        return PortCardLive(
            None,
            _not_collected(
                health, ("Switch port throughput, congestion and errors", "ib-counters")
            ),
        )
    if kind is ElementKind.STORAGE:
        storage = topology.storage
        facts = (
            ("Mount point", str(storage["mount_point"])),
            ("Metadata targets (MDT)", str(storage["metadata_targets"])),
            ("Object storage targets (OST)", str(storage["object_targets"])),
            ("Datasets", str(storage["datasets_root"])),
            ("Checkpoints", str(storage["checkpoints_root"])),
        )
        if health["lustre-metrics"].status is CollectorStatus.NOT_CONFIGURED:
            return SourcesCardLive(
                facts,
                _not_collected(
                    health,
                    ("Read and write bytes and operations per job (job_stats)", "lustre-metrics"),
                ),
            )
        # collected: the spool's job_stats are stored (lustre_job_stats) and are evidence in
        # trace analyses linked to a job (service/traces/job_evidence.py)
        stored = (
            "Lustre job_stats",
            "stored per job (lustre_job_stats); evidence in trace analyses",
        )
        return SourcesCardLive((*facts, stored), ())
    if kind is ElementKind.SOFTWARE:
        return SourcesCardLive(
            tuple(topology.software),
            _not_collected(
                health,
                ("Per-rank, per-step phase times", "pytorch-profiler"),
                ("Collective hangs and transport errors", "nccl-logs"),
            ),
        )
    return SourcesCardLive(
        (
            ("Checkpoint root", topology.checkpoint_root),
            ("Formats", ", ".join(topology.weight_formats)),
        ),
        _not_collected(
            health, ("Who opened or read the weights last, by job and account", "ebpf-checkpoints")
        ),
    )


def element_card(
    service: Service, viewer: Viewer, element_id: str, *, now: datetime | None = None
) -> ElementCard:
    """The card of ``element_id`` for ``viewer``.

    Raises:
        UnknownElement: no element, collector or vector has this id.
    """
    now = now if now is not None else utcnow()
    catalog = service.catalog
    health_list = collector_health(service, now=now)
    health = {h.id: h for h in health_list}
    if element_id.startswith("collector-"):
        cid = element_id.removeprefix("collector-")
        if cid not in health:
            raise UnknownElement(element_id)
        targets = tuple(
            k.value for k in next(c for c in catalog.collectors if c.id == cid).observes
        )
        return ElementCard(
            element_id,
            "collector",
            health[cid].name,
            None,
            None,
            None,
            (health[cid],),
            (),
            CollectorCardLive(health[cid], targets),
            now,
            viewer.anonymous,
        )
    if element_id.startswith("vector-"):
        try:
            vector = catalog.vector(element_id.removeprefix("vector-"))
        except KeyError:
            raise UnknownElement(element_id) from None
        alerts = alert_summary(service, viewer)
        count = alerts.by_vector.get(vector.id, 0) if alerts.configured and alerts.shown else None
        live = VectorCardLive(vector, tuple(k.value for k in vector.targets), alerts, count)
        return ElementCard(
            element_id,
            "vector",
            f"{vector.number} · {vector.name}",
            None,
            None,
            None,
            (),
            (vector,),
            live,
            now,
            viewer.anonymous,
        )
    element = _element_index(service).get(element_id)
    if element is None:
        raise UnknownElement(element_id)
    kind = element.kind
    live_part: CardLive
    if kind is ElementKind.GPU:
        live_part = _gpu_card(service, viewer, element, now)
    elif kind is ElementKind.NODE:
        live_part = _node_card(service, viewer, element, now, health)
    elif kind is ElementKind.NVSWITCH:
        live_part = _nvswitch_card(service, viewer, element, now)
    elif kind is ElementKind.HCA:
        live_part = _hca_card(service, viewer, element, now, health)
    elif kind is ElementKind.SCHEDULER:
        live_part = _scheduler_card(service, viewer, now)
    else:
        live_part = _sources_card(service, kind, health)
    return ElementCard(
        id=element.id,
        kind=kind.value,
        label=element.label,
        layer=element.layer,
        owner=catalog.layer_owners.get(element.layer),
        card=catalog.card(kind),
        collectors=tuple(h for h in health_list if kind.value in h.observes),
        vectors=catalog.vectors_for(kind),
        live=live_part,
        generated_at=now,
        anonymous=viewer.anonymous,
    )
