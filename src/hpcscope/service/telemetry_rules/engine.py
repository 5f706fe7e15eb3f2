"""The telemetry rules after each collector cycle: store reads -> pure rules -> alerts.

Wiring (``docs/security.md``): the collector stores InfiniBand port counters, DCGM samples
with the job mapping, Lustre job_stats, and (from the spools of
:mod:`hpcscope.service.telemetry_rules.spool`) changelog records and NVML process lists. The
server hands :meth:`TelemetryRules.after_cycle` to the collector as an after-cycle hook (like
the jobs upkeep, ``service/jobs/retention.py``). Each run reads the window the rules judge
(the longest rule window, plus each running job's calibration minutes, however long ago it
started), evaluates :func:`hpcscope.analysis.telemetry_rules.rules.evaluate`, and upserts the
alerts into the one ``alerts`` table (deduplicated by key; state kept). The node facts the
collector keeps from the same pages (migration 16, ``service/collect/node_facts.py``) are
judged here too: Xid counts (GM-4, with the GPU rules) and each node's latest posture check
(SC-7, CE-5, GM-5, DP-3; :meth:`TelemetryRules.posture`).

The InfiniBand part of the window is kept between runs (:mod:`~hpcscope.service.
telemetry_rules.ib_window`): a run reads the port rows stored since the last one, not the hour
again; :meth:`TelemetryRules.read` without a window reads it all (the detection bench, tests).

The rules see the whole window every run, so an episode is found again on the next run: an
alert is written only when its ``last_seen`` moved past what this engine wrote before (a
condition that goes on grows the stored alert's ``count`` by one per run, never re-counts an
old episode).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from hpcscope.analysis.alerts.posture import evaluate_posture, postures_from_facts
from hpcscope.analysis.telemetry_rules.common import GpuAllocation, JobSpan, PortKey
from hpcscope.analysis.telemetry_rules.ib_view import calibration_spans
from hpcscope.analysis.telemetry_rules.port_events import rd5_columns
from hpcscope.analysis.telemetry_rules.rules import TelemetryInputs, evaluate
from hpcscope.model.alerts import Alert, RuleSpec
from hpcscope.model.backends import GpuMetrics
from hpcscope.model.hostlist import HostlistError, expand_hostlist
from hpcscope.model.timeutil import utcnow
from hpcscope.model.topology import Topology
from hpcscope.service.telemetry_rules.ib_window import IbWindow, frame_of
from hpcscope.service.telemetry_rules.spool import ChangelogSpool, ProcessSpool
from hpcscope.store import Store
from hpcscope.store import alerts as alert_store
from hpcscope.store import telemetry_rules as queries
from hpcscope.store.lustre import job_stats
from hpcscope.store.node_facts import latest_posture
from hpcscope.store.reports import EmbeddedSamples
from hpcscope.store.slurm import allocations_between

log = logging.getLogger(__name__)

#: How far back the GPU rules look (SC-4's 2 minutes and GM-1's grace, with room).
GPU_LOOKBACK_SECONDS = 900.0


def port_gpus(topology: Topology) -> dict[PortKey, int]:
    """(node, device, port) -> the GPU beside that HCA (the topology's PCI affinity)."""
    return {
        (hca.node, hca.device, hca.port): hca.gpu_index
        for node in topology.nodes
        for hca in node.hcas
        if hca.gpu_index is not None
    }


@dataclass(frozen=True, slots=True)
class TelemetryCycle:
    """What one run read and wrote.

    Attributes:
        at: the run's time.
        ib_rows / gpu_rows / process_rows / job_stats_rows / changelog_rows: rows read.
        jobs: jobs overlapping the window.
        alerts: alerts written (new or merged into a stored one).
    """

    at: datetime
    ib_rows: int = 0
    gpu_rows: int = 0
    process_rows: int = 0
    job_stats_rows: int = 0
    changelog_rows: int = 0
    jobs: int = 0
    alerts: int = 0


def _nodes(row: Mapping[str, object], allocated: Mapping[str, list[str]]) -> tuple[str, ...]:
    job_id = str(row["job_id"])
    if job_id in allocated:
        return tuple(allocated[job_id])
    text = row.get("nodes")
    if not text:
        return ()
    try:
        return tuple(expand_hostlist(str(text)))
    except HostlistError:
        log.debug("job %s: nodes %r is not a hostlist", job_id, text)
        return ()


class TelemetryRules:
    """Evaluates the telemetry rules over the store.

    Args:
        store: the store (read and written).
        rules: the site's rules by id (telemetry ones are picked by id).
        port_gpus: (node, device, port) -> GPU (:func:`port_gpus` of the topology).
        now: the clock (the collector's; tests pass simulated time).
        spools: the changelog and process spools read before each run
            (:mod:`hpcscope.service.telemetry_rules.spool`).
        metrics: where the GPU inputs are read (samples of idle GPUs, Xid counts): the
            metrics backend; default the store's own.
        every_seconds: :meth:`after_cycle` runs the rules when this long has passed since
            their last run (0: every call); :meth:`evaluate_once` always runs them.
    """

    def __init__(
        self,
        store: Store,
        rules: Mapping[str, RuleSpec],
        *,
        port_gpus: Mapping[PortKey, int] | None = None,
        now: Callable[[], datetime] = utcnow,
        spools: Sequence[ChangelogSpool | ProcessSpool] = (),
        every_seconds: float = 0.0,
        metrics: GpuMetrics | None = None,
    ) -> None:
        self.store = store
        self.metrics: GpuMetrics = metrics if metrics is not None else EmbeddedSamples(store)
        self.every_seconds = every_seconds
        self.spools = tuple(spools)
        self.rules = dict(rules)
        self.port_gpus = dict(port_gpus or {})
        self._now = now
        self._written: dict[str, datetime] = {}
        self._ib = self.ib_window()
        self.last: TelemetryCycle | None = None

    def _threshold(self, rule_id: str, name: str, default: float) -> float:
        spec = self.rules.get(rule_id)
        return spec.threshold(name) if spec is not None and name in spec.thresholds else default

    def lookback_seconds(self) -> float:
        """The longest window a telemetry rule judges, plus two scrape slots."""
        windows = [
            self._threshold("RD-2b", "window_seconds", 3600.0),
            self._threshold("RD-7", "window_seconds", 300.0),
            self._threshold("RD-3", "min_seconds", 120.0),
            self._threshold("RD-1", "min_seconds", 60.0),
        ]
        return max(windows) + 2 * self._threshold("RD-2", "bucket_seconds", 15.0)

    def ib_window(self) -> IbWindow:
        """An empty InfiniBand window for these rules (:meth:`read`)."""
        return IbWindow(
            rise_columns=rd5_columns(self.rules.get("RD-5")),
            slot_seconds=self._threshold("RD-2", "bucket_seconds", 15.0),
        )

    def read(self, now: datetime, *, window: IbWindow | None = None) -> TelemetryInputs:
        """What the rules judge at ``now``, from the store.

        Args:
            now: the run's time.
            window: the InfiniBand window to advance (only the rows since its last run are
                read); None: all of the window is read (:meth:`evaluate_once` advances the
                engine's own).
        """
        window = window or self.ib_window()
        since = now - timedelta(seconds=self.lookback_seconds())
        job_rows = queries.jobs_overlapping(self.store, since=since, until=now).to_pylist()
        allocated = queries.allocation_nodes(self.store, [str(r["job_id"]) for r in job_rows])
        jobs = tuple(
            JobSpan(
                job_id=str(r["job_id"]),
                user=r["user"],
                account=r["account"],
                nodes=_nodes(r, allocated),
                start=r["start_time"],
                end=r["end_time"],
                partition=r["partition"],
                qos=r["qos"],
            )
            for r in job_rows
        )
        spans = calibration_spans(  # calibration minutes of jobs that started before `since`
            jobs,
            since=since,
            calibration_seconds=self._threshold("RD-2", "calibration_seconds", 300.0),
            slot_seconds=self._threshold("RD-2", "bucket_seconds", 15.0),
        )
        ib = window.view(self.store, since=since, now=now, spans=spans)
        gpu_since = now - timedelta(seconds=GPU_LOOKBACK_SECONDS)
        allocations = tuple(
            GpuAllocation(
                job_id=str(r["job_id"]),
                node=str(r["node"]),
                gpu=int(r["gpu"]),
                start=r["start_time"],
                end=r["end_time"],
            )
            for r in allocations_between(self.store, gpu_since - timedelta(days=1), now)
            .to_pylist()
        )  # fmt: skip
        known = {j.job_id for j in jobs}
        extra = sorted({a.job_id for a in allocations} - known)
        if extra:  # GM-1 names the job whose epilog it was: it may have ended before `since`
            owners = alert_store.job_owners(self.store, extra)
            jobs += tuple(
                JobSpan(job_id=j, user=u, account=a, nodes=(), start=None)
                for j, (u, a) in owners.items()
            )
        return TelemetryInputs(
            ib=ib,
            gpu_samples=frame_of(self.metrics.idle_gpu_samples(since=gpu_since, until=now)),
            gpu_processes=frame_of(queries.gpu_processes(self.store, since=gpu_since, until=now)),
            job_stats=frame_of(job_stats(self.store, since=since, until=now)),
            changelog=frame_of(queries.changelog(self.store, since=since, until=now)),
            jobs=jobs,
            allocations=allocations,
            port_gpus=self.port_gpus,
            xid_counts=frame_of(self.metrics.xid_counts(since=gpu_since, until=now)),
        )

    def posture(self, now: datetime) -> list[Alert]:
        """The posture rules over each node's latest posture check read by ``now``
        (``node_posture``; the alert's times are the check's, so a check is one firing)."""
        facts = latest_posture(self.store, until=now).to_pylist()
        return [a for p in postures_from_facts(facts) for a in evaluate_posture(p, self.rules)]

    def _fresh(self, alerts: list[Alert]) -> list[Alert]:
        fresh: list[Alert] = []
        for alert in alerts:
            before = self._written.get(alert.key)
            if before is not None and alert.last_seen <= before:
                continue
            fresh.append(alert if before is None else replace(alert, count=1))
            self._written[alert.key] = alert.last_seen
        return fresh

    def evaluate_once(self, *, now: datetime | None = None) -> TelemetryCycle:
        """Read, evaluate, store (module docstring)."""
        at = now or self._now()
        for spool in self.spools:
            read = spool.collect_once()
            for error in read.errors[:5]:
                log.warning("telemetry spool: %s", error)
        inputs = self.read(at, window=self._ib)
        alerts = self._fresh(evaluate(inputs, self.rules) + self.posture(at))
        written = alert_store.upsert_alerts(self.store, alerts).result() if alerts else 0
        self.last = TelemetryCycle(
            at=at,
            ib_rows=self._ib.rows_read,
            gpu_rows=inputs.gpu_samples.height,
            process_rows=inputs.gpu_processes.height,
            job_stats_rows=inputs.job_stats.height,
            changelog_rows=inputs.changelog.height,
            jobs=len(inputs.jobs),
            alerts=written,
        )
        if written:
            log.info("telemetry rules: %d alerts written", written)
        return self.last

    def after_cycle(self) -> TelemetryCycle | None:
        """The collector's hook: one run when ``every_seconds`` have passed since the last
        (else the last run's figures); a failure is logged, never raised (collection goes on,
        the next cycle tries again)."""
        try:
            last = self.last
            if last is not None and (self._now() - last.at).total_seconds() < self.every_seconds:
                return last
            return self.evaluate_once()
        except Exception:  # the rules must never stop collection
            log.exception("telemetry rules failed")
            return None
