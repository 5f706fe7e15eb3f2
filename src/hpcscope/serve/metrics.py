"""hpcscope's own ``/metrics``: derived, low-cardinality series for Prometheus and alert rules.

A custom collector on a private registry reads the store at scrape time (prometheus_client's
``Collector`` protocol). We never re-export raw per-second GPU samples — that is
dcgm-exporter's job — only what hpcscope derives: per running job and GPU, reported vs real
efficiency over the last five minutes and the straggler flag; per job, allocated GPUs, useful
GPU-seconds so far and Lustre read/write throughput over the last five minutes; the
collector's own health; open alerts per severity and vector. User, account and partition live
on ``hpcscope_job_info`` only (join with ``* on(job_id) group_left(user)``).

The endpoint carries every job, so it requires an admin (Prometheus scrapes it with an admin
or service account's credentials).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import timedelta

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import CollectorRegistry

from hpcscope import __version__
from hpcscope.model.access import system_principal
from hpcscope.model.alerts import VECTOR_NAMES, Severity
from hpcscope.model.timeutil import epoch_seconds, utcnow
from hpcscope.service.chargeback.reads import account_seconds
from hpcscope.service.collect.timing import CycleTimings
from hpcscope.service.core import Service
from hpcscope.service.jobs.storage import job_storage_rates
from hpcscope.service.slo.config import SloConfig
from hpcscope.service.slo.engine import slo_counters

#: Window of the per-GPU "now" figures.
LIVE_WINDOW = timedelta(minutes=5)

_SYSTEM = system_principal("metrics")


class HpcscopeCollector:
    """Reads the store on every scrape, and the collector's timings when it collects; holds
    no state of its own."""

    def __init__(self, service: Service, *, timings: CycleTimings | None = None) -> None:
        self.service = service
        self.timings = timings

    def describe(self) -> Iterable[Metric]:
        return []  # families depend on the data: do not let the registry call collect() early

    def collect(self) -> Iterator[Metric]:
        service = self.service
        build = GaugeMetricFamily("hpcscope_build_info", "hpcscope version.", labels=["version"])
        build.add_metric([__version__], 1.0)
        yield build
        schema = GaugeMetricFamily(
            "hpcscope_store_schema_version", "Highest applied store migration."
        )
        schema.add_metric([], float(service.store.schema_version()))
        yield schema
        yield from self._store_memory()
        yield from self._jobs()
        yield from self._scrapes()
        yield from self._collector_timings()
        yield from self._alerts()
        yield from self._slo()
        yield from self._chargeback()
        yield from self._views()

    def _store_memory(self) -> Iterator[Metric]:
        """What DuckDB holds in memory for the store (``store_memory_limit_bytes``)."""
        memory = self.service.store.memory()
        held = GaugeMetricFamily(
            "hpcscope_store_memory_bytes",
            "Bytes DuckDB's buffer manager holds for the store, by DuckDB's tag.",
            labels=["tag"],
        )
        for tag, used in sorted(memory.by_tag_bytes.items()):
            held.add_metric([tag], float(used))
        limit = GaugeMetricFamily(
            "hpcscope_store_memory_limit_bytes",
            "DuckDB's memory_limit for the store (as DuckDB shows it, 3 significant digits).",
        )
        limit.add_metric([], float(memory.limit_bytes))
        spilled = GaugeMetricFamily(
            "hpcscope_store_spilled_bytes",
            "Bytes of queries' intermediates DuckDB spilled to <store>.tmp.",
        )
        spilled.add_metric([], float(memory.temporary_bytes))
        yield from (held, limit, spilled)

    def _collector_timings(self) -> Iterator[Metric]:
        """How long the collector's cycles, polls and hooks take (``service/collect/timing.py``);
        nothing when this server does not collect."""
        if self.timings is None:
            return
        phases = self.timings.snapshot()
        took = SummaryMetricFamily(
            "hpcscope_collector_phase_seconds",
            "Seconds the collector spent per cycle, per source's poll and per after-cycle hook.",
            labels=["phase"],
        )
        longest = GaugeMetricFamily(
            "hpcscope_collector_phase_max_seconds",
            "The longest cycle, poll or after-cycle hook since the server started, in seconds.",
            labels=["phase"],
        )
        for phase, total in sorted(phases.items()):
            took.add_metric([phase], count_value=total.count, sum_value=total.sum_seconds)
            longest.add_metric([phase], total.max_seconds)
        yield from (took, longest)

    def _jobs(self) -> Iterator[Metric]:
        live = self.service.live_job_gpus(_SYSTEM, window=LIVE_WINDOW)
        info = GaugeMetricFamily(
            "hpcscope_job_info",
            "Running job metadata (value 1).",
            labels=["job_id", "user", "account", "partition"],
        )
        gpus = GaugeMetricFamily(
            "hpcscope_job_allocated_gpus", "GPUs Slurm allocated to the job.", labels=["job_id"]
        )
        useful = GaugeMetricFamily(
            "hpcscope_job_useful_gpu_seconds",
            "GPU-seconds with work on the SMs so far (sum of sample interval x SM active).",
            labels=["job_id"],
        )
        per_gpu = ["job_id", "node", "gpu"]
        reported = GaugeMetricFamily(
            "hpcscope_job_gpu_reported_util_ratio",
            "Reported GPU utilization (any kernel resident), mean over the last 5 minutes.",
            labels=per_gpu,
        )
        real = GaugeMetricFamily(
            "hpcscope_job_gpu_sm_active_ratio",
            "Real efficiency (SM active), mean over the last 5 minutes.",
            labels=per_gpu,
        )
        tensor = GaugeMetricFamily(
            "hpcscope_job_gpu_tensor_active_ratio",
            "Tensor pipe active, mean over the last 5 minutes.",
            labels=per_gpu,
        )
        straggler = GaugeMetricFamily(
            "hpcscope_job_gpu_straggler",
            "1 when this GPU is the one its job's other GPUs wait for.",
            labels=per_gpu,
        )
        for job in live.jobs:
            info.add_metric(
                [job.job_id, job.user or "", job.account or "", job.partition or ""], 1.0
            )
            if job.gpus_allocated is not None:
                gpus.add_metric([job.job_id], float(job.gpus_allocated))
            useful.add_metric([job.job_id], job.useful_gpu_hours * 3600.0)
        for gpu in live.gpus:
            labels = [gpu.job_id, gpu.node, str(gpu.gpu)]
            if gpu.reported_util_ratio is not None:
                reported.add_metric(labels, gpu.reported_util_ratio)
            if gpu.sm_active_ratio is not None:
                real.add_metric(labels, gpu.sm_active_ratio)
            if gpu.tensor_active_ratio is not None:
                tensor.add_metric(labels, gpu.tensor_active_ratio)
            straggler.add_metric(labels, 1.0 if gpu.verdict == "straggler" else 0.0)
        yield from (info, gpus, useful, reported, real, tensor, straggler)
        yield from self._storage([job.job_id for job in live.jobs])

    def _storage(self, job_ids: list[str]) -> Iterator[Metric]:
        """Lustre throughput of the running jobs over the live window (job_stats snapshots)."""
        rates = job_storage_rates(self.service.store, job_ids, now=utcnow(), window=LIVE_WINDOW)
        read = GaugeMetricFamily(
            "hpcscope_job_storage_read_bytes_per_second",
            "Lustre bytes read per second by the job over the last 5 minutes (job_stats).",
            labels=["job_id"],
        )
        write = GaugeMetricFamily(
            "hpcscope_job_storage_write_bytes_per_second",
            "Lustre bytes written per second by the job over the last 5 minutes (job_stats).",
            labels=["job_id"],
        )
        for job_id, (read_rate, write_rate) in sorted(rates.items()):
            read.add_metric([job_id], read_rate)
            write.add_metric([job_id], write_rate)
        yield from (read, write)

    def _scrapes(self) -> Iterator[Metric]:
        health = self.service.collection_health().targets
        labels = ["target", "exporter", "node"]
        up = GaugeMetricFamily(
            "hpcscope_scrape_up", "1 if the last scrape of the target succeeded.", labels=labels
        )
        duration = GaugeMetricFamily(
            "hpcscope_scrape_duration_seconds", "Duration of the last scrape.", labels=labels
        )
        samples = GaugeMetricFamily(
            "hpcscope_scrape_samples", "GPU rows stored from the last scrape.", labels=labels
        )
        last = GaugeMetricFamily(
            "hpcscope_scrape_last_success_timestamp_seconds",
            "When the target was last scraped successfully.",
            labels=labels,
        )
        for target in health:
            values = [str(target["target"]), str(target["exporter"]), str(target["node"] or "")]
            up.add_metric(values, 0.0 if target["failures_since_success"] else 1.0)
            duration.add_metric(values, float(target["last_duration_seconds"] or 0.0))
            samples.add_metric(values, float(target["last_samples"] or 0))
            if target["last_success"] is not None:
                last.add_metric(values, epoch_seconds(target["last_success"]))
        yield from (up, duration, samples, last)

    def _views(self) -> Iterator[Metric]:
        """What the kept read views cost since the start, per kind of view
        (``service/view_costs.py``): a view recomputed too often, or missed on the event loop,
        is where a slow p99 comes from."""
        labels = ["view"]
        computations = CounterMetricFamily(
            "hpcscope_view_computations",
            "Kept read view values computed since the start (requests, refreshes, ahead).",
            labels=labels,
        )
        seconds = CounterMetricFamily(
            "hpcscope_view_compute_seconds",
            "Wall seconds spent computing kept read view values since the start.",
            labels=labels,
        )
        misses = CounterMetricFamily(
            "hpcscope_view_misses",
            "Reads on the event loop that found no value to serve (computed in a worker thread).",
            labels=labels,
        )
        for name, cost in sorted(self.service.snapshots.costs.snapshot().items()):
            computations.add_metric([name], float(cost.computations))
            seconds.add_metric([name], cost.compute_seconds)
            misses.add_metric([name], float(cost.misses))
        yield from (computations, seconds, misses)
        kept = self.service.snapshots
        entries = GaugeMetricFamily(
            "hpcscope_view_kept_entries", "Kept read view values held now (all views)."
        )
        entries.add_metric([], float(len(kept)))
        kept_bytes = GaugeMetricFamily(
            "hpcscope_view_kept_bytes",
            "Bytes of the serialised pages and documents among them (their budget's count).",
        )
        kept_bytes.add_metric([], float(kept.kept_bytes))
        yield from (entries, kept_bytes)

    def _alerts(self) -> Iterator[Metric]:
        """Open (not resolved) alerts per severity and vector: every pair, zeros included, so
        that a rule on ``> 0`` never misses a series that did not exist yet."""
        rows = self.service.open_alert_counts()
        if rows is None:
            return
        counts = {(s.name, v): 0 for s in Severity for v in VECTOR_NAMES.values()}
        for row in rows:
            key = (str(row["severity"]), str(row["vector"]))
            counts[key] = counts.get(key, 0) + int(row["open"])
        family = GaugeMetricFamily(
            "hpcscope_alerts_open",
            "Open and acknowledged (not resolved) alerts, by severity and threat vector.",
            labels=["severity", "vector"],
        )
        for (severity, vector), count in sorted(counts.items()):
            family.add_metric([severity, vector], float(count))
        yield family

    def _slo(self) -> Iterator[Metric]:
        """Cumulative good and bad events per SLO (cluster-wide: Prometheus computes burn rates
        from their ``rate()``), the objectives, and hpcscope's own remaining budget."""
        config = SloConfig.from_settings(self.service.settings)
        counters = slo_counters(self.service.store, config, now=utcnow())
        jobs = CounterMetricFamily(
            "hpcscope_slo_job_events",
            "Job events of the queue-wait and job-success SLOs since the first record, "
            "good or bad (docs/slo.md).",
            labels=["slo", "outcome"],
        )
        gpu = CounterMetricFamily(
            "hpcscope_slo_gpu_seconds",
            "Allocated GPU-seconds of summarised jobs for the GPU-efficiency SLO: good = "
            "useful (SM active x time), bad = the rest.",
            labels=["slo", "outcome"],
        )
        objective = GaugeMetricFamily(
            "hpcscope_slo_objective_ratio", "The SLO's objective (settings).", labels=["slo"]
        )
        remaining = GaugeMetricFamily(
            "hpcscope_slo_error_budget_remaining_ratio",
            "Unspent share of the error budget over the SLO window (1 untouched, < 0 overspent).",
            labels=["slo"],
        )
        for counter in counters:
            family = gpu if counter.event_unit == "GPU-seconds" else jobs
            family.add_metric([counter.slo, "good"], counter.good)
            family.add_metric([counter.slo, "bad"], counter.bad)
            objective.add_metric([counter.slo], counter.objective_ratio)
            remaining.add_metric([counter.slo], counter.budget_remaining_ratio)
        yield from (jobs, gpu, objective, remaining)

    def _chargeback(self) -> Iterator[Metric]:
        """Allocated and useful GPU-seconds of finished jobs per account, as chargeback counts
        them (``docs/chargeback.md``): counters, since kept summaries are never deleted."""
        allocated = CounterMetricFamily(
            "hpcscope_account_allocated_gpu_seconds",
            "Allocated GPU-seconds (GPUs x elapsed) of finished jobs, per Slurm account.",
            labels=["account"],
        )
        useful = CounterMetricFamily(
            "hpcscope_account_useful_gpu_seconds",
            "Useful GPU-seconds (sample interval x SM active) of finished jobs, per account.",
            labels=["account"],
        )
        for account, allocated_seconds, useful_seconds in account_seconds(self.service.store):
            allocated.add_metric([account], allocated_seconds)
            useful.add_metric([account], useful_seconds)
        yield from (allocated, useful)


def metrics_registry(service: Service, *, timings: CycleTimings | None = None) -> CollectorRegistry:
    """A private registry holding only hpcscope's collector (never the global REGISTRY);
    ``timings``: the running collector's, when the server collects."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HpcscopeCollector(service, timings=timings))
    return registry
