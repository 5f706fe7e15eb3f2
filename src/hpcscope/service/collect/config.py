"""What the collector collects and how often (:class:`CollectorConfig`, from a site's
settings), and what one cycle did (:class:`CycleReport`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from hpcscope.ingest.exporters.lustre_jobstats import DEFAULT_JOBID_PATTERN
from hpcscope.ingest.exposition.scrape import Target
from hpcscope.model.alerts import RuleSpec
from hpcscope.service.alerts.engine import SecurityCollection
from hpcscope.service.collect.scheduler import (
    AssociationSource,
    CommandSource,
    SchedulerSource,
    SlurmrestdSource,
)
from hpcscope.service.settings import Settings


@dataclass
class CollectorConfig:
    """What to collect and how often."""

    targets_path: Path | None = None
    static_targets: list[Target] = field(default_factory=list)
    exporters: frozenset[str] = frozenset({"dcgm", "node"})
    """Exporters scraped of the targets: no ``dcgm`` when a metrics engine holds the GPU
    samples (``metrics_backend: prometheus``)."""
    scheduler: SchedulerSource | None = None
    """Where Slurm's view of jobs comes from (slurmrestd, or squeue/sacct on the server)."""
    associations: AssociationSource | None = None
    """``sacctmgr`` user -> account memberships and coordinators, polled with the scheduler."""
    scrape_interval_seconds: float = 15.0
    scrape_timeout_seconds: float = 5.0
    scheduler_poll_seconds: float = 10.0
    job_mapping_dir: Path | None = None
    """Root of per-node hpc-job-mapping directories (``service/collect/attribution.py``)."""
    job_records_dir: Path | None = None
    """Directory of the Slurm prolog's job records."""
    lustre_job_stats_dir: Path | None = None
    """Spool of ``<server>.job_stats`` files (``service/collect/lustre_spool.py``)."""
    lustre_jobid_pattern: str = DEFAULT_JOBID_PATTERN
    """Regex that finds the Slurm job (and host) in a Lustre job_id."""
    integrity_spool_dir: Path | None = None
    """Root of the gradient-integrity spool (``service/integrity/spool.py``)."""
    rules: dict[str, RuleSpec] = field(default_factory=dict)
    """Detection rules by id (loaded and validated at start)."""
    security: SecurityCollection | None = None
    """Falco/Tetragon sources, the security event buffer and the alert engine draining it."""

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        rules: dict[str, RuleSpec] | None = None,
        security: SecurityCollection | None = None,
    ) -> CollectorConfig | None:
        """The collection a site's settings ask for, or None when nothing is configured."""
        scheduler: SchedulerSource | None = None
        if settings.scheduler_source == "slurmrestd" and settings.slurmrestd_url:
            scheduler = SlurmrestdSource(
                url=settings.slurmrestd_url,
                version=settings.slurmrestd_api_version,
                unix_socket=settings.slurmrestd_socket,
                user=settings.slurmrestd_user,
                token=settings.slurmrestd_token(),
                timeout_seconds=settings.scrape_timeout_seconds,
            )
        elif settings.scheduler_source == "commands":
            scheduler = CommandSource(accounting=settings.slurm_accounting)
        associations = (
            AssociationSource(cluster=settings.slurm_cluster)
            if settings.slurm_associations
            else None
        )
        if (
            settings.targets_path is None
            and scheduler is None
            and settings.job_mapping_dir is None
            and settings.lustre_job_stats_dir is None
            and settings.integrity_spool_dir is None
            and settings.capture_spool_dir is None
            and security is None
        ):
            return None
        return cls(
            targets_path=settings.targets_path,
            exporters=frozenset({"node"})
            if settings.metrics_backend == "prometheus"
            else frozenset({"dcgm", "node"}),
            scheduler=scheduler,
            associations=associations,
            scrape_interval_seconds=settings.scrape_interval_seconds,
            scrape_timeout_seconds=settings.scrape_timeout_seconds,
            scheduler_poll_seconds=settings.scheduler_poll_seconds,
            job_mapping_dir=settings.job_mapping_dir,
            job_records_dir=settings.job_records_dir,
            lustre_job_stats_dir=settings.lustre_job_stats_dir,
            lustre_jobid_pattern=settings.lustre_jobid_pattern,
            integrity_spool_dir=settings.integrity_spool_dir,
            rules=dict(rules or {}),
            security=security,
        )


@dataclass
class CycleReport:
    """What one collection cycle did (returned for tests and logs)."""

    started_at: datetime
    targets: int = 0
    ok: int = 0
    samples_written: int = 0
    jobs_written: int = 0
    lustre_rows_written: int = 0
    integrity_alerts_written: int = 0
    security_alerts_written: int = 0
    errors: list[str] = field(default_factory=list)
