"""Live values of the cluster diagram, constrained by who is looking.

The diagram's structure comes from the topology and the catalog; this module adds what the
store knows now: each GPU's state and counters, node aggregates, the health of hpcscope's own
collection per collector (:mod:`hpcscope.service.diagram.collectors`), open alerts when
detections exist. Every query passes the viewer's
job scope to the store, which nulls out what the viewer may not see:

* a researcher sees the counters of GPUs held by their own jobs only; a GPU held by someone
  else's job is *allocated*, with no job id, user or counter, and a GPU no job holds is *idle*;
  the counters of idle GPUs (memory left behind after a job is a security signal) are for
  admins;
* a team lead sees their accounts' jobs too; an admin sees everything;
* an anonymous visitor (only when ``Settings.anonymous_diagram`` is on) sees structure,
  cards, collectors, threats and cluster-wide aggregates, never a job, a user or a per-GPU
  counter.

Cards (:mod:`hpcscope.service.diagram.cards`) and the decision-maker figures
(:mod:`hpcscope.service.diagram.cost`) build on the same viewer and state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from hpcscope.analysis.jobs.aggregates import VERDICT_COLUMNS
from hpcscope.analysis.jobs.report import JobReport
from hpcscope.model.access import Principal, system_principal
from hpcscope.model.timeutil import utcnow
from hpcscope.service.core import Service
from hpcscope.service.diagram.alert_counts import AlertSummary, alert_summary
from hpcscope.service.diagram.alert_counts import detections_configured as detections_configured
from hpcscope.service.diagram.collectors import CollectorHealth, collector_health
from hpcscope.service.diagram.viewer import Viewer as Viewer
from hpcscope.service.diagram.viewer import diagram_viewer as diagram_viewer
from hpcscope.service.jobs import reports
from hpcscope.service.settings import Settings
from hpcscope.service.snapshots import Snapshots
from hpcscope.store import diagram as queries

#: A GPU whose latest sample is older than this many scrape intervals is stale.
STALE_SCRAPES = 4
#: ...and never fresher than this many seconds, whatever the scrape interval.
MIN_FRESH_SECONDS = 60.0
#: How far back a silent GPU's last sample is looked for (older: "no data").
LAST_SEEN_LOOKBACK = timedelta(days=1)
#: Window of the live per-GPU verdict (straggler, waiting at the barrier...) the diagram shows.
VERDICT_WINDOW_SECONDS = 5 * 60.0


class GpuState(StrEnum):
    """What the diagram may say about a GPU, given the viewer."""

    ACTIVE = "active"  # held by a job the viewer may see: counters shown
    ALLOCATED = "allocated"  # held only by jobs the viewer may not see: no counter, no name
    IDLE = "idle"  # no job holds it
    STALE = "stale"  # reported before, but not within the freshness window (jobs still named)
    NODATA = "nodata"  # never reported


@dataclass(frozen=True, slots=True)
class GpuNow:
    """One GPU now: its latest sample (like :class:`~hpcscope.service.diagram.ports.PortNow`
    for a port). Counters are None when the viewer may not see them or nothing came.

    Not :class:`hpcscope.service.jobs.reports.RunningJobGpu`, which is one GPU of one job
    averaged over a recent window."""

    element_id: str
    node: str
    gpu: int
    state: GpuState
    sample_ts: datetime | None = None
    age_seconds: float | None = None
    job_ids: tuple[str, ...] = ()
    hidden_jobs: int = 0
    reported_util_ratio: float | None = None
    sm_active_ratio: float | None = None
    tensor_active_ratio: float | None = None
    sm_occupancy_ratio: float | None = None
    dram_active_ratio: float | None = None
    power_watts: float | None = None
    gpu_temperature_celsius: float | None = None
    fb_used_bytes: float | None = None
    fb_free_bytes: float | None = None
    sm_clock_hertz: float | None = None
    nvlink_tx_bytes_per_second: float | None = None
    nvlink_rx_bytes_per_second: float | None = None
    xid_last: int | None = None
    verdict: str | None = None  # GpuVerdict over the last VERDICT_WINDOW_SECONDS, own jobs only

    @property
    def has_values(self) -> bool:
        return self.sm_active_ratio is not None or self.reported_util_ratio is not None


@dataclass(frozen=True, slots=True)
class NodeLive:
    """A node's GPUs summed up (means over the GPUs whose counters the viewer may see)."""

    element_id: str
    node: str
    gpus: int
    reporting: int
    active: int
    allocated_hidden: int
    idle: int
    stale: int
    reported_util_ratio: float | None
    sm_active_ratio: float | None
    worst_sm_active_ratio: float | None
    xid_gpus: int
    job_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ClusterHealth:
    """Cluster-wide aggregate: no job, no user, safe for every viewer."""

    gpus_total: int
    gpus_reporting: int
    gpus_allocated: int
    reported_util_ratio: float | None
    sm_active_ratio: float | None
    gpus_with_xid: int
    latest_ts: datetime | None


@dataclass(frozen=True, slots=True)
class LiveState:
    """Everything live the diagram draws, for one viewer at one instant."""

    generated_at: datetime
    fresh_seconds: float
    viewer_anonymous: bool
    gpus: Mapping[str, GpuNow]
    nodes: Mapping[str, NodeLive]
    collectors: tuple[CollectorHealth, ...]
    cluster: ClusterHealth
    alerts: AlertSummary


def fresh_seconds(settings: Settings) -> float:
    """How old a GPU's latest sample may be and still count as live."""
    return max(MIN_FRESH_SECONDS, STALE_SCRAPES * settings.scrape_interval_seconds)


#: Counter columns of the store that GpuNow carries (the others stay in the store).
_LIVE_VALUES = tuple(
    c for c in queries.LIVE_GPU_COLUMNS if c in GpuNow.__dataclass_fields__ and c != "xid_last"
)
#: The sample columns the diagram reads of each GPU's newest sample (its values, the Xid).
LIVE_COLUMNS = (*_LIVE_VALUES, "xid_last")


def _gpu_live(
    element_id: str,
    node: str,
    gpu: int,
    row: Mapping[str, Any] | None,
    now: datetime,
    last_seen: datetime | None,
    verdicts: Mapping[tuple[str, str, int], str],
) -> GpuNow:
    if row is None:
        state = GpuState.STALE if last_seen is not None else GpuState.NODATA
        age = (now - last_seen).total_seconds() if last_seen is not None else None
        return GpuNow(element_id, node, gpu, state, sample_ts=last_seen, age_seconds=age)
    visible = tuple(str(j) for j in row["visible_jobs"])
    hidden = int(row["hidden_jobs"])
    ts = row["ts"]
    if ts is None:  # held by a job, but silent: a gap is never shown as a value
        state = GpuState.STALE if last_seen is not None else GpuState.NODATA
    elif visible:
        state = GpuState.ACTIVE
    elif hidden:
        state = GpuState.ALLOCATED
    else:
        state = GpuState.IDLE
    sample_ts = ts if ts is not None else last_seen
    values = {c: row[c] for c in _LIVE_VALUES}
    xid = row["xid_last"]
    verdict = None
    if state is GpuState.ACTIVE:
        verdict = next(
            (verdicts[(j, node, gpu)] for j in visible if (j, node, gpu) in verdicts), None
        )
    return GpuNow(
        element_id,
        node,
        gpu,
        state,
        sample_ts=sample_ts,
        age_seconds=(now - sample_ts).total_seconds() if sample_ts is not None else None,
        job_ids=visible,
        hidden_jobs=hidden,
        xid_last=int(xid) if xid is not None else None,
        verdict=verdict,
        **values,
    )


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _node_live(element_id: str, node: str, gpus: list[GpuNow]) -> NodeLive:
    active = [g for g in gpus if g.state is GpuState.ACTIVE]
    jobs = sorted({job for g in gpus for job in g.job_ids})
    real = [g.sm_active_ratio for g in active if g.sm_active_ratio is not None]
    return NodeLive(
        element_id=element_id,
        node=node,
        gpus=len(gpus),
        reporting=sum(1 for g in gpus if g.state not in (GpuState.STALE, GpuState.NODATA)),
        active=len(active),
        allocated_hidden=sum(1 for g in gpus if g.state is GpuState.ALLOCATED),
        idle=sum(1 for g in gpus if g.state is GpuState.IDLE),
        stale=sum(1 for g in gpus if g.state in (GpuState.STALE, GpuState.NODATA)),
        reported_util_ratio=_mean(g.reported_util_ratio for g in active),
        sm_active_ratio=_mean(real),
        worst_sm_active_ratio=min(real) if real else None,
        xid_gpus=sum(1 for g in gpus if g.xid_last),
        job_ids=tuple(jobs),
    )


def live_verdicts(
    service: Service, viewer: Viewer, *, now: datetime
) -> dict[tuple[str, str, int], str]:
    """Per (job, node, GPU) verdict over the last few minutes, for jobs inside the scope.

    The verdicts are :func:`hpcscope.analysis.jobs.efficiency.gpu_summary`'s, the same analysis as
    the job report, over a recent window: the diagram shows what a GPU is doing now
    (straggler, waiting at the barrier, busy but not computing...), the job report what it did
    over the whole run.
    """
    if viewer.anonymous:
        return {}
    since = now - timedelta(seconds=VERDICT_WINDOW_SECONDS)
    metrics = service.gpu_samples()
    principal = viewer.principal or system_principal("diagram verdicts")
    ids = reports.seen_and_visible(service.store, principal, metrics, since=since, until=now)
    if not ids:
        return {}
    read = metrics.job_gpus(ids, since=since, until=now, columns=VERDICT_COLUMNS)
    summary = reports.gpu_rows(
        read, scrape_interval_seconds=service.settings.scrape_interval_seconds
    )
    if summary.height == 0:
        return {}
    return {
        (str(row["job_id"]), str(row["node"]), int(row["gpu"])): str(row["verdict"])
        for row in summary.select("job_id", "node", "gpu", "verdict").iter_rows(named=True)
    }


def all_live_verdicts(service: Service, *, now: datetime) -> dict[tuple[str, str, int], str]:
    """:func:`live_verdicts` of every job (the same per job: a verdict compares a GPU with the
    other GPUs of its own job only). For lookups by job ids that a viewer's scoped query
    returned, never to be shown as such."""
    return live_verdicts(service, Viewer(system_principal("diagram verdicts")), now=now)


def gpu_views(
    service: Service,
    viewer: Viewer,
    *,
    now: datetime,
    nodes: Iterable[str] | None = None,
    shared: Snapshots | None = None,
) -> tuple[dict[str, GpuNow], dict[str, NodeLive], ClusterHealth]:
    """Every GPU and node of the topology (or of ``nodes``) as ``viewer`` may see them now,
    and the cluster-wide aggregate.

    With ``shared`` (the service's snapshots), what does not depend on the viewer is computed
    once per generation for every viewer: the silent GPUs' last sample times, and the recent
    verdicts of every job (:func:`all_live_verdicts`; a GPU takes the verdict of a job only
    when the viewer's scoped query named that job visible on it)."""
    fresh = fresh_seconds(service.settings)
    metrics = service.gpu_samples()
    since = now - timedelta(seconds=fresh)
    latest = (
        shared.get(
            ("diagram.latest",),
            lambda: metrics.latest(since=since, until=now, columns=LIVE_COLUMNS),
        )
        if shared is not None
        else metrics.latest(since=since, until=now, columns=LIVE_COLUMNS)
    )
    states = queries.gpu_states(
        service.store,
        latest=latest,
        scope=viewer.scope(),
        idle_values=viewer.principal is not None and viewer.principal.is_admin,
    )
    by_gpu = {(r["node"], int(r["gpu"])): r for r in states.rows}
    wanted = set(nodes) if nodes is not None else None
    silent = any(
        (row := by_gpu.get((gpu.node, gpu.index))) is None or row["ts"] is None
        for node in service.topology.nodes
        if wanted is None or node.name in wanted
        for gpu in node.gpus
    )
    last_seen: Mapping[tuple[str, int], datetime] = {}
    if silent and shared is not None:
        last_seen = shared.get(
            ("diagram.last_seen",),
            lambda: metrics.last_seen(since=now - LAST_SEEN_LOOKBACK),
        )
    elif silent:
        last_seen = metrics.last_seen(since=now - LAST_SEEN_LOOKBACK)
    verdicts: Mapping[tuple[str, str, int], str]
    if shared is not None and not viewer.anonymous:
        verdicts = shared.get(("diagram.verdicts",), lambda: all_live_verdicts(service, now=now))
    else:
        verdicts = live_verdicts(service, viewer, now=now)
    gpus: dict[str, GpuNow] = {}
    node_states: dict[str, NodeLive] = {}
    for node in service.topology.nodes:
        if wanted is not None and node.name not in wanted:
            continue
        members = [
            _gpu_live(
                gpu.element_id,
                node.name,
                gpu.index,
                by_gpu.get((node.name, gpu.index)),
                now,
                last_seen.get((node.name, gpu.index)),
                verdicts,
            )
            for gpu in node.gpus
        ]
        gpus.update({g.element_id: g for g in members})
        node_states[node.element_id] = _node_live(node.element_id, node.name, members)
    health = states.health
    cluster = ClusterHealth(
        gpus_total=service.topology.gpu_count,
        gpus_reporting=int(health["gpus_reporting"]),
        gpus_allocated=int(health["gpus_allocated"]),
        reported_util_ratio=health["reported_util_ratio"],
        sm_active_ratio=health["sm_active_ratio"],
        gpus_with_xid=int(health["gpus_with_xid"]),
        latest_ts=health["latest_ts"],
    )
    return gpus, node_states, cluster


def live_state(
    service: Service,
    viewer: Viewer,
    *,
    now: datetime | None = None,
    nodes: Iterable[str] | None = None,
    shared: Snapshots | None = None,
) -> LiveState:
    """What the diagram shows live for ``viewer``.

    Args:
        service: the running service.
        viewer: who is looking (scope and anonymity).
        now: the instant (naive UTC); default the wall clock.
        nodes: restrict GPUs and nodes to these (a zoomed view); default every node.
        shared: the service's snapshots: what no viewer changes (the collectors' health,
            the open-alert counts, see :func:`gpu_views`) is computed once per generation for
            all viewers; None computes everything at ``now``.
    """
    now = now if now is not None else utcnow()
    gpus, node_states, cluster = gpu_views(service, viewer, now=now, nodes=nodes, shared=shared)
    collectors = (
        shared.get(("diagram.collectors",), lambda: collector_health(service, now=now))
        if shared is not None
        else collector_health(service, now=now)
    )
    return LiveState(
        generated_at=now,
        fresh_seconds=fresh_seconds(service.settings),
        viewer_anonymous=viewer.anonymous,
        gpus=gpus,
        nodes=node_states,
        collectors=collectors,
        cluster=cluster,
        alerts=alert_summary(service, viewer, shared=shared),
    )


def kept_live_state(service: Service, viewer: Viewer) -> LiveState:
    """:func:`live_state` of every node for ``viewer``'s visibility (:meth:`Viewer.visibility`),
    computed once per data generation (``service/snapshots.py``) for every page that draws it:
    the diagram's live poll and the cluster overview; its open-alert counts once per alert
    write (:func:`alert_summary`)."""

    def compute() -> LiveState:
        return live_state(service, viewer, now=utcnow(), shared=service.snapshots)

    state: LiveState = service.snapshots.get(("diagram.live_state", viewer.visibility()), compute)
    # the open-alert counts follow every alert write, not the generation (alert_summary)
    alerts = alert_summary(service, viewer, shared=service.snapshots)
    return state if alerts == state.alerts else replace(state, alerts=alerts)


#: Who reads every running job for the overviews (each principal keeps those its scope admits).
_EVERY_JOB = system_principal("overview")


def running_jobs(service: Service, principal: Principal, *, now: datetime) -> list[JobReport]:
    """The jobs running with recent samples that ``principal`` may see, as their reports, in
    the order of its own scoped read (:meth:`Service.live_job_gpus`).

    Every job's are read once per generation for every principal (kept as
    ``serve.running_jobs``, the overview's name for them) and each keeps those its scope
    admits: the reports do not depend on the reader, they are sorted by job, and a job the
    scheduler does not know has no user or account, so only a scope of every job admits it.
    The overview asks for them on every 5-second poll of every visibility: only the jobs with
    recent samples, never every job the principal has run."""

    def compute() -> list[JobReport]:
        live = service.live_job_gpus(_EVERY_JOB, window=service.live_window(), now=now)
        return [r for r in live.jobs if r.state in ("RUNNING", None) and r.gpus_observed]

    every: list[JobReport] = service.snapshots.get(("serve.running_jobs",), compute)
    scope = principal.job_scope()
    return [r for r in every if scope.admits(user=r.user, account=r.account)]
