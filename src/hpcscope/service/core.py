"""The service object: what the web app and the CLI call.

One :class:`Service` per server process. It owns the store (and so the DuckDB file), the
topology, the element catalog and the user directory. Every read of job data takes the
authenticated :class:`~hpcscope.model.access.Principal` and constrains the query at the data
layer with the principal's :class:`~hpcscope.model.access.JobScope`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from hpcscope.analysis.jobs.report import JobReport
from hpcscope.model.access import WEIGHT_EXTENSIONS, Principal, WeightPaths, system_principal
from hpcscope.model.alerts import Alert, AlertState, RuleSpec, Severity, Vector
from hpcscope.model.backends import GpuMetrics
from hpcscope.model.catalog import Catalog, default_catalog
from hpcscope.model.sampling import max_sample_weight_seconds
from hpcscope.model.timeutil import utcnow
from hpcscope.model.topology import Topology, load_topology
from hpcscope.service.alerts import access as alert_access
from hpcscope.service.alerts.rules import load_site_rules
from hpcscope.service.backends import (
    EngineClient,
    PrometheusSamples,
    engine_client,
    sample_reader,
)
from hpcscope.service.identity.users import UserDirectory
from hpcscope.service.jobs import documents, reports, timeseries
from hpcscope.service.jobs.contracts import JobTimeseries
from hpcscope.service.jobs.retention import Upkeep, UpkeepConfig
from hpcscope.service.jobs.seen import FINISHED_JOB_SECONDS as FINISHED_JOB_SECONDS
from hpcscope.service.jobs.seen import SeenJob as SeenJob
from hpcscope.service.jobs.seen import report_every_seconds as report_every_seconds
from hpcscope.service.settings import Settings
from hpcscope.service.snapshots import SnapshotMiss, Snapshots, caching_only
from hpcscope.store import Store
from hpcscope.store import alerts as alert_store
from hpcscope.store import diagram as diagram_queries
from hpcscope.store import identity as identity_store
from hpcscope.store import reports as job_queries

log = logging.getLogger(__name__)

#: The reader of the list of every job that the scopes' lists take their running jobs from.
_EVERY_JOB = system_principal("job-list")
#: Jobs whose owner (user, account) and end the visibility index holds, the latest first: a
#: check of one of them reads no store (:meth:`Service.visible_job`); an older one is checked
#: on its own. Read again every :data:`FINISHED_JOB_SECONDS` (a job's owner never changes).
OWNER_INDEX_JOBS = 20_000


@dataclass
class Service:
    """Everything a running hpcscope server holds."""

    settings: Settings
    topology: Topology
    store: Store
    users: UserDirectory
    catalog: Catalog = field(default_factory=default_catalog)
    rules: dict[str, RuleSpec] = field(default_factory=dict)
    """Detection rules by id, validated at start (``deploy/rules/*.yaml``)."""
    snapshots: Snapshots = field(init=False, repr=False)
    """Live read views computed once per collector cycle (``service/snapshots.py``): reads
    without an explicit ``now`` are served from it."""

    _alert_changes: int = field(default=0, init=False, repr=False)
    _engine: EngineClient | None = field(default=None, init=False, repr=False)
    _metrics: GpuMetrics | None = field(default=None, init=False, repr=False)
    _alert_changes_lock: threading.Lock = field(
        default_factory=threading.Lock, init=False, repr=False
    )
    _changes: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _at_close: list[Callable[[], None]] = field(default_factory=list, init=False, repr=False)
    _jobs_with_alerts: tuple[int, frozenset[str]] | None = field(
        default=None, init=False, repr=False
    )

    def __post_init__(self) -> None:
        store = self.store
        self.snapshots = Snapshots(
            lambda: store.writes_committed,
            min_refresh_seconds=self.settings.snapshot_min_refresh_seconds,
        )

    @classmethod
    def open(cls, settings: Settings, *, users: UserDirectory | None = None) -> Service:
        """Load the topology and users, open (and migrate) the store."""
        topology = load_topology(settings.resolved_topology_path())
        if users is None:
            cost = settings.password_hash_cost_log2
            users = (
                UserDirectory.from_file(settings.users_path, hash_cost_log2=cost)
                if settings.users_path is not None
                else UserDirectory.demo(hash_cost_log2=cost)
            )
        rules = load_site_rules(settings.rules_dir)  # a bad rule file fails the start
        store = Store(
            settings.store_path,
            rollup_grace_seconds=settings.rollup_grace_seconds,
            limits=settings.store_limits(),
        )
        return cls(settings=settings, topology=topology, store=store, users=users, rules=rules)

    @classmethod
    def open_read_only(cls, settings: Settings) -> Service:
        """Open an existing store read-only (offline CLI reads; fails while a server holds it)."""
        topology = load_topology(settings.resolved_topology_path())
        store = Store(settings.store_path, read_only=True, limits=settings.store_limits())
        return cls(settings=settings, topology=topology, store=store, users=UserDirectory([]))

    def close(self) -> None:
        for stop in self._at_close:  # the keepers' passes in flight stop before the store closes
            stop()
        if isinstance(self._metrics, PrometheusSamples):
            self._metrics.close()
        if self._engine is not None:
            self._engine.close()
        self.store.close()

    def at_close(self, stop: Callable[[], None]) -> None:
        """Call ``stop`` when the service closes, before its store does (a keeper's thread
        that writes to it)."""
        self._at_close.append(stop)

    def engine(self) -> EngineClient | None:
        """The process' one client of the metrics engine (``metrics_backend: prometheus``),
        None with the embedded backend."""
        if self.settings.metrics_backend != "prometheus":
            return None
        with self._alert_changes_lock:
            if self._engine is None:
                self._engine = engine_client(self.settings)
            return self._engine

    def principal(self, name: str, *, slurm_users: bool = False) -> Principal | None:
        """The principal for a logged-in user name, with Slurm coordinator rights merged.

        Args:
            name: the user name a login, a token or a trusted proxy vouched for.
            slurm_users: also a person the users file does not name but Slurm's associations
                do (a researcher, or a team lead when coordinating): for identities a trusted
                proxy or an API token vouches for; a password needs the file.
        """
        # Slurm's associations, as of the current generation (the collector's scheduler poll
        # writes them): one store query per person and cycle, not one per request
        coordinated = self.snapshots.get(
            ("identity.coordinated", name), lambda: self.store.coordinated_accounts(name)
        )
        known = slurm_users and self.snapshots.get(
            ("identity.known", name), lambda: identity_store.known_to_slurm(self.store, name)
        )
        return self.users.principal(name, coordinated_from_slurm=coordinated, known_to_slurm=known)

    def changes(self, kind: str) -> int:
        """How many writes of ``kind`` (``traces``: an upload or a link) this service made
        outside the collector's cycles: a kept answer that shows them keys on this count, so
        the next read sees the write (``serve/kept.py``)."""
        return self._changes.get(kind, 0)

    def note_change(self, kind: str) -> None:
        """Count a write of ``kind`` (see :meth:`changes`), after it committed."""
        with self._alert_changes_lock:
            self._changes[kind] = self._changes.get(kind, 0) + 1

    # ------------------------------------------------------------------ alerts

    @property
    def alert_changes(self) -> int:
        """How many alert state changes this service made, plus the alert upserts the store
        committed (the security engine writes between the collector's cycles): a read view
        holding alerts keys on it, so the next read sees a new alert or state."""
        return self._alert_changes + alert_store.alerts_written(self.store)

    def job_alert_changes(self, job_id: str) -> int:
        """:attr:`alert_changes` for one job's alerts: the state changes made here, plus the
        committed upserts of that job's alerts. A job's page and document key on it: the
        security engine's alerts on other jobs (several a second under attack) leave every
        other job's page as it is, where the count of all upserts rendered each again."""
        return self._alert_changes + alert_store.alerts_written(self.store, job_id=job_id)

    def job_alerts(self, principal: Principal, job_id: str) -> list[Alert] | None:
        """Alerts of one job; None when the job does not exist or is not visible."""
        job = self.visible_job(principal, job_id)
        return None if job is None else self.alerts_of(job)

    def alerts_of(self, job: SeenJob) -> list[Alert]:
        """Alerts of a job its principal may see (:meth:`visible_job`), as that principal
        sees them."""
        principal, job_id = job.principal, job.job_id
        if job_id not in self.jobs_with_alerts():  # none to show, whoever reads it
            return []
        # what alerts_for reads of the principal; its version the changes of the job's alerts
        # (an acknowledgement here, an alert written: shown on the next read)
        key = ("alerts.job", principal.alert_scope(), principal.redacts_weight_paths, job_id)
        return list(
            self.snapshots.get(
                key,
                lambda: alert_access.alerts_for(
                    self.store, principal, job_id=job_id, weight_paths=self.weight_paths()
                ),
                every_seconds=job.every_seconds,
                version=self.job_alert_changes(job_id),
            )
        )

    def jobs_with_alerts(self) -> frozenset[str]:
        """The jobs with at least one stored alert, whatever its scope: read once, then those
        whose alerts were written since added once per alert change (:attr:`alert_changes`; a
        new alert shows at the next read), so that a job's page does not query its alerts for
        every reader's scope when it has none.

        Raises:
            SnapshotMiss: inside ``cache_only`` before the first read (a store query).
        """
        changes = self.alert_changes
        kept = self._jobs_with_alerts
        if kept is not None and kept[0] == changes:
            return kept[1]
        found = alert_store.known_job_ids_with_alerts(self.store)
        if found is None and caching_only():
            raise SnapshotMiss("alerts.jobs")
        found = found if found is not None else alert_store.job_ids_with_alerts(self.store)
        self._jobs_with_alerts = (changes, found)  # the count read before the jobs
        return found

    def alerts(
        self,
        principal: Principal,
        *,
        states: list[AlertState] | None = None,
        min_severity: Severity | None = None,
        vector: Vector | None = None,
        job_id: str | None = None,
        as_read: bool = False,
    ) -> list[Alert]:
        """Every alert ``principal`` may see (their jobs' only, unless admin, security or
        auditor; an auditor's with weight paths redacted); ``as_read``: ``alerts_for``'s."""
        return alert_access.alerts_for(
            self.store,
            principal,
            states=states,
            min_severity=min_severity,
            vector=vector,
            job_id=job_id,
            weight_paths=self.weight_paths(),
            as_read=as_read,
        )

    def weight_paths(self) -> WeightPaths:
        """What counts as model weights here: the topology's checkpoint roots and formats."""
        roots = [self.topology.checkpoint_root]
        extra = self.topology.storage.get("checkpoints_root")
        if isinstance(extra, str):
            roots.append(extra)
        formats = {f.lstrip(".").lower() for f in self.topology.weight_formats}
        return WeightPaths(
            roots=tuple(r for r in roots if r.strip("/")),
            extensions=tuple(sorted(set(WEIGHT_EXTENSIONS) | formats)),
        )

    def open_alert_counts(self) -> list[diagram_queries.OpenAlertCount] | None:
        """Open alerts per vector name, node and severity, unscoped (counts name no job: the
        diagram's aggregate and ``/metrics``); None without an alerts table."""
        return diagram_queries.open_alert_counts(self.store)

    def set_alert_state(
        self, principal: Principal, key: str, state: AlertState, *, now: datetime | None = None
    ) -> Alert | None:
        """Acknowledge, resolve or reopen an alert on a job ``principal`` may see; None when
        there is no such alert visible to them.

        Raises:
            AlertStateDenied: visible, but not on their own job (G9; admins act on all).
        """
        try:
            return alert_access.set_state(self.store, principal, key, state, now=now or utcnow())
        finally:  # after the write: the next read of the job's alerts computes them again
            with self._alert_changes_lock:
                self._alert_changes += 1

    # ------------------------------------------------------------------ job reports

    def gpu_samples(self) -> GpuMetrics:
        """Where every GPU-sample read goes: the ``metrics_backend`` setting (one backend per
        service: the engine's client, its probe of the recording rules)."""
        engine = self.engine()
        with self._alert_changes_lock:
            if self._metrics is None:
                self._metrics = sample_reader(self.settings, self.store, engine=engine)
            return self._metrics

    def job_reports(self, principal: Principal, *, now: datetime | None = None) -> list[JobReport]:
        """Reports of every job ``principal`` may see, newest first.

        Without ``now``: the snapshot of the current generation for the principal's job scope
        (the answer depends on the scope alone, so principals of one scope share it)."""
        if now is not None:
            return self._job_reports(principal, now)
        scope = principal.job_scope()

        def compute() -> list[JobReport]:
            # a scope of fewer jobs takes the reports of its jobs without a kept summary (the
            # running ones: their raw samples are most of a list's cost) from the list of every
            # job, read once per generation for all the scopes, instead of reading them again
            shared = () if scope.all_jobs else self.job_reports(_EVERY_JOB)
            found = self._job_reports(principal, utcnow(), shared=shared)
            # each listed job's report is the one a page of it reads (the same for everyone
            # who may see it): opened from the list, a job's page computes it not again (one
            # query for the list, not one per job; its visibility: the owner index)
            for report in found:
                self.snapshots.offer(
                    ("jobs.report", report.job_id), report, every_seconds=report_every_seconds
                )
            return found

        return list(self.snapshots.get(("jobs.reports", scope), compute))

    def _job_reports(
        self, principal: Principal, now: datetime, *, shared: Sequence[JobReport] = ()
    ) -> list[JobReport]:
        found = self.reports_read(principal, now=now, shared=shared)
        return sorted(found, key=lambda r: (r.start_time is None, r.start_time), reverse=True)

    def job_report(
        self, principal: Principal, job_id: str, *, now: datetime | None = None
    ) -> JobReport | None:
        """One job's report, or None when it does not exist *or* is not visible (the two are
        indistinguishable on purpose: no probing for other people's job ids).

        Without ``now``: visibility is checked for ``principal`` first, then the job's report
        comes from the current generation's snapshot (a job's report is the same for everyone
        who may see it)."""
        if now is not None:
            return self._job_report(principal, job_id, now)
        job = self.visible_job(principal, job_id)
        return None if job is None else self.report_of(job)

    def report_of(self, job: SeenJob) -> JobReport | None:
        """The report of a job its principal may see (:meth:`visible_job`), from the current
        generation's snapshot (a job's report is the same for everyone who may see it); None
        only when the job went away since the check."""
        return self.snapshots.get(
            ("jobs.report", job.job_id),
            lambda: self._job_report(job.principal, job.job_id, utcnow()),
            every_seconds=report_every_seconds,
        )

    def _job_report(self, principal: Principal, job_id: str, now: datetime) -> JobReport | None:
        found = self.reports_read(principal, now=now, job_ids=[job_id])
        return found[0] if found else None

    def reports_read(
        self,
        principal: Principal,
        *,
        now: datetime,
        job_ids: list[str] | None = None,
        shared: Sequence[JobReport] = (),
    ) -> list[JobReport]:
        """:func:`reports.reports_for` with this service's store, scrape interval, price and
        GPU samples: how every report is read (a principal's list, one job, a batch of jobs)."""
        return reports.reports_for(
            self.store,
            principal,
            job_ids=job_ids,
            shared=shared,
            now=now,
            scrape_interval_seconds=self.settings.scrape_interval_seconds,
            gpu_hour_price=self.topology.gpu_hour_price,
            currency=self.topology.currency,
            samples=self.gpu_samples(),
        )

    def can_see_job(self, principal: Principal, job_id: str) -> bool:
        """Whether ``job_id`` exists and ``principal`` may see it (:meth:`visible_job`)."""
        return self.visible_job(principal, job_id) is not None

    def visible_job(self, principal: Principal, job_id: str) -> SeenJob | None:
        """The one visibility check of a job: the job when it exists and ``principal`` may see
        it, else None (without building a report; per job scope and job in the current
        generation's snapshot). A page showing several reads of one job checks once and
        passes the :class:`SeenJob` on (:meth:`report_of`, :meth:`alerts_of`, the traces'
        ``phases_of``). A job of the owner index (:data:`OWNER_INDEX_JOBS`) is checked
        against it: one lookup, no entry per principal and job."""
        owners = self.snapshots.get(
            "jobs.owners",
            lambda: job_queries.job_owners(self.store, limit=OWNER_INDEX_JOBS),
            every_seconds=FINISHED_JOB_SECONDS,
        )
        if job_id in owners:
            user, account, ended = owners[job_id]
            visible_to = principal.job_scope().admits(user=user, account=account)
            return SeenJob(principal, job_id, ended) if visible_to else None

        def visible() -> tuple[bool, bool]:
            jobs, ids = reports.visible_jobs_by_id(
                self.store, principal, [job_id], metrics=self.gpu_samples()
            )
            ended = job_id in ids and jobs.height > 0 and jobs["end_time"].null_count() == 0
            return job_id in ids, ended

        # a finished job's visibility is checked again at most every minute (its record no
        # longer changes), a running one's once per generation: the checks of a month of
        # finished jobs, read at random, would otherwise fill the refresh queue every cycle
        seen, ended = self.snapshots.get(
            ("jobs.visible", principal.job_scope(), job_id),
            visible,
            every_seconds=lambda value: FINISHED_JOB_SECONDS if value[1] else 0.0,
        )
        return SeenJob(principal, job_id, ended) if seen else None

    def job_timeseries(
        self, principal: Principal, job_id: str, *, max_points: int = 720
    ) -> JobTimeseries | None:
        """Per-GPU reported vs real over the job's life, at most ``max_points`` buckets (raw
        samples for short buckets, 1-minute rollups from 60 s; ``service/jobs/timeseries.py``)."""
        job = self.visible_job(principal, job_id)
        return None if job is None else self.timeseries_of(job, max_points=max_points)

    def timeseries_of(self, job: SeenJob, *, max_points: int = 720) -> JobTimeseries:
        """:meth:`job_timeseries` of a job its principal may see (:meth:`visible_job`)."""
        return timeseries.job_timeseries(
            self.store,
            job.job_id,
            scrape_interval_seconds=self.settings.scrape_interval_seconds,
            max_points=max_points,
            metrics=self.gpu_samples(),
        )

    def stored_timeseries(self, job: SeenJob) -> tuple[bytes, str] | None:
        """The body and ETag of a finished job's stored :meth:`timeseries_of` (None: not
        stored yet, not finished, or read from a metrics engine; ``service/jobs/documents.py``)."""
        if not job.ended or self.gpu_samples().backend != "embedded":
            return None
        return documents.stored_timeseries(self.store, job.job_id)

    def computed_timeseries(self, job: SeenJob) -> tuple[bytes, str] | None:
        """A finished job's :meth:`timeseries_of` computed now, as bytes and ETag, and stored
        once summarised (``documents.py``); None: running, or read from a metrics engine."""
        if not job.ended or self.gpu_samples().backend != "embedded":
            return None
        interval = self.settings.scrape_interval_seconds
        return documents.computed_timeseries(
            self.store, job.job_id, self.gpu_samples(), scrape_interval_seconds=interval
        )

    def document_keeper(self) -> documents.DocumentKeeper:
        """The after-cycle hook that stores finished jobs' time series (``documents.py``)."""
        keeper = documents.DocumentKeeper(
            self.store,
            scrape_interval_seconds=self.settings.scrape_interval_seconds,
            metrics=self.gpu_samples(),
        )
        self.at_close(keeper.stop)
        return keeper

    def upkeep(self) -> Upkeep:
        """The jobs capability's upkeep (summaries of finished jobs, retention per tier), as the
        collector runs it after its cycles (``service/jobs/retention.py``)."""
        return Upkeep(
            self.store,
            UpkeepConfig.from_settings(self.settings),
            scrape_interval_seconds=self.settings.scrape_interval_seconds,
            metrics=self.gpu_samples(),
        )

    def collection_health(self, *, now: datetime | None = None) -> reports.CollectionHealth:
        """The collector's own health (targets and gaps; no job data)."""
        return reports.collection_health(self.store, now=now or utcnow())

    def live_window(self) -> timedelta:
        return timedelta(
            seconds=max(30.0, max_sample_weight_seconds(self.settings.scrape_interval_seconds))
        )

    def live_job_gpus(
        self, principal: Principal, *, window: timedelta, now: datetime | None = None
    ) -> reports.LiveJobs:
        """Running jobs (samples within ``window``) and their GPUs' recent figures."""
        return reports.live_job_gpus(
            self.store,
            principal,
            now=now or utcnow(),
            window=window,
            scrape_interval_seconds=self.settings.scrape_interval_seconds,
            gpu_hour_price=self.topology.gpu_hour_price,
            currency=self.topology.currency,
            samples=self.gpu_samples(),
        )
