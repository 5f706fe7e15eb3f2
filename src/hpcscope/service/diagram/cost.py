"""The decision-maker reading of the diagram: lost GPU-hours and their cost, owners, bridges.

Cost of lost GPU-hours, over a window (default the last 24 hours) of stored samples:

* allocated GPU-hours: every scraped interval in which a job held a GPU;
* useful GPU-hours: allocated time weighted by real efficiency (``SM_ACTIVE``), the same
  definition the job report uses (allocated x SM_ACTIVE);
* lost GPU-hours: measured time minus useful time; intervals without an SM_ACTIVE sample
  (profiling paused) are neither useful nor lost;
* sample weights follow :mod:`hpcscope.model.sampling`: each sample stands for the time to the
  next one, clipped to the cap (3 scrape intervals); the rest of a longer silence is a gap
  and counts for nothing — the job report's rule, so both give the same useful GPU-hours;
* cost: lost GPU-hours x the topology's price per GPU-hour.

Reported utilisation over the same time is given beside it: the gap between the two is the
point of the page (a busy GPU is not a computing GPU).

The cluster figure is an aggregate every viewer may see (it names no job); a researcher or a
team lead also gets the same figure restricted to the jobs they may see.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from hpcscope.model.access import JobScope
from hpcscope.model.catalog import Bridge
from hpcscope.model.sampling import max_sample_weight_seconds
from hpcscope.model.timeutil import utcnow
from hpcscope.model.topology import Layer
from hpcscope.service.core import Service
from hpcscope.service.diagram.live import Viewer
from hpcscope.store import diagram as queries


@dataclass(frozen=True, slots=True)
class CostSummary:
    """GPU time and its cost over a window, for the cluster or for the viewer's jobs."""

    scope: str
    window_start: datetime
    window_end: datetime
    jobs: int
    allocated_gpu_hours: float
    measured_gpu_hours: float
    useful_gpu_hours: float
    lost_gpu_hours: float
    reported_busy_gpu_hours: float
    real_efficiency_ratio: float | None
    reported_utilization_ratio: float | None
    gpu_hour_price: float
    currency: str
    lost_cost: float


@dataclass(frozen=True, slots=True)
class LayerOwner:
    layer: Layer
    title: str
    owner: str


@dataclass(frozen=True, slots=True)
class DecisionView:
    """What the decision-maker reading mode adds to the diagram."""

    cluster: CostSummary
    own: CostSummary | None
    owners: tuple[LayerOwner, ...]
    bridges: tuple[Bridge, ...]


_LAYER_TITLES = {
    Layer.COMPUTE: "GPU nodes",
    Layer.INTERCONNECT: "Interconnect (NVLink, InfiniBand)",
    Layer.STORAGE: "Parallel storage",
    Layer.SCHEDULER: "Scheduler",
    Layer.SOFTWARE: "ML software stack",
    Layer.WEIGHTS: "Model weights",
}


def cost_summary(
    service: Service, *, scope: JobScope, label: str, since: datetime, until: datetime
) -> CostSummary:
    """Lost GPU-hours and their cost for jobs inside ``scope`` (see the module docstring)."""
    metrics = service.gpu_samples()
    job_ids: list[str] | None = None
    if not scope.all_jobs:  # the jobs of the window inside the scope (unknown ones are not)
        seen = metrics.jobs_seen(since=since, until=until)
        job_ids = [
            r["job_id"] for r in queries.visible_jobs(service.store, scope=scope, job_ids=seen)
        ]
    time = metrics.gpu_time(
        job_ids,
        since=since,
        until=until,
        max_interval_seconds=max_sample_weight_seconds(service.settings.scrape_interval_seconds),
    )
    lost_hours = max(0.0, time.measured_seconds - time.useful_seconds) / 3600
    price = service.topology.gpu_hour_price
    return CostSummary(
        scope=label,
        window_start=since,
        window_end=until,
        jobs=time.jobs,
        allocated_gpu_hours=time.allocated_seconds / 3600,
        measured_gpu_hours=time.measured_seconds / 3600,
        useful_gpu_hours=time.useful_seconds / 3600,
        lost_gpu_hours=lost_hours,
        reported_busy_gpu_hours=time.reported_busy_seconds / 3600,
        real_efficiency_ratio=(
            time.useful_seconds / time.measured_seconds if time.measured_seconds else None
        ),
        reported_utilization_ratio=(
            time.reported_busy_seconds / time.allocated_seconds if time.allocated_seconds else None
        ),
        gpu_hour_price=price,
        currency=service.topology.currency,
        lost_cost=lost_hours * price,
    )


def decision_view(
    service: Service,
    viewer: Viewer,
    *,
    now: datetime | None = None,
    window: timedelta = timedelta(hours=24),
) -> DecisionView:
    """Cost of lost GPU-hours (cluster, and the viewer's own jobs), owners per layer, bridges."""
    now = now if now is not None else utcnow()
    since = now - window
    until = now + timedelta(microseconds=1)  # include a sample stamped exactly now
    cluster = cost_summary(
        service, scope=JobScope(all_jobs=True), label="cluster", since=since, until=until
    )
    own = None
    if viewer.principal is not None and not viewer.principal.is_admin:
        own = cost_summary(
            service, scope=viewer.scope(), label="your jobs", since=since, until=until
        )
    owners = tuple(
        LayerOwner(layer, _LAYER_TITLES[layer], owner)
        for layer, owner in service.catalog.layer_owners.items()
    )
    return DecisionView(cluster=cluster, own=own, owners=owners, bridges=service.catalog.bridges)
