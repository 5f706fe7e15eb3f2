"""The settings file's source sections: one per collector source, named like the source.

A site writes, beside its other settings::

    dcgm: {targets_path: /etc/hpcscope/targets.json}
    slurm: {url: http://slurmctl:6820, poll_seconds: 10}
    lustre_job_stats: {dir: /shared/hpcscope/lustre}

Each section is a pydantic model here (its keys, defaults, checks and meanings: the reference
``docs/sources.md`` is generated from them), a field of :class:`SourceSections` (which
:class:`~hpcscope.service.settings.Settings` extends), and read by its source
(``service/sources/<name>.py``) and nobody else. A section left out switches its source off.

Settings files written for earlier versions name the same settings with flat keys
(``lustre_job_stats_dir``, ``slurmrestd_url``): :data:`LEGACY_KEYS` maps each one to its section
key, so such a file, environment variable or flag keeps working (the server logs which key to
write instead: ``docs/settings.md``, "Settings files of earlier versions").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from hpcscope.ingest.exporters.lustre_jobstats import DEFAULT_JOBID_PATTERN, compile_jobid_pattern
from hpcscope.model.errors import ConfigError

__all__ = [
    "LEGACY_KEYS",
    "CaptureSection",
    "DcgmSection",
    "FalcoSection",
    "GpuProcessesSection",
    "IntegritySection",
    "JobMappingSection",
    "LustreChangelogSection",
    "LustreJobStatsSection",
    "NodeSection",
    "SecurityEventsSection",
    "SlurmSection",
    "SourceSection",
    "SourceSections",
    "TetragonSection",
    "nest_legacy_keys",
]


class SourceSection(BaseModel):
    """Base of a source's settings section: unknown keys are refused, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class DcgmSection(SourceSection):
    targets_path: Path | None = Field(
        None,
        description="Prometheus file_sd file (JSON or YAML) listing the exporters to scrape; "
        "its targets labelled exporter: dcgm (dcgm-exporter) are read, with label node. "
        "Re-read when it changes. Unset: dcgm-exporter is not scraped.",
    )


class NodeSection(SourceSection):
    targets_path: Path | None = Field(
        None,
        description="Prometheus file_sd file listing the exporters to scrape (it may be the "
        "dcgm section's); its targets labelled exporter: node (node-exporter with its "
        "infiniband and textfile collectors) are read, with label node. Unset: not scraped.",
    )


class SlurmSection(SourceSection):
    source: Literal["slurmrestd", "commands", "none"] = Field(
        "slurmrestd",
        description="Where Slurm's jobs come from: slurmrestd (needs url), commands "
        "(squeue --all --json and sacct --parsable2 run on the server, which then needs the "
        "Slurm client and munge), or none.",
    )
    url: str | None = Field(
        None,
        description="Base URL of slurmrestd; jobs are read from /slurm/<api_version>/jobs. "
        "Unset (with source slurmrestd): Slurm is not read.",
    )
    api_version: str = Field(
        "v0.0.40",
        description="The OpenAPI plugin to ask slurmrestd for (v0.0.37 to v0.0.41; Debian "
        "12's 22.05 serves v0.0.38).",
    )
    socket: str | None = Field(
        None,
        description="slurmrestd's UNIX socket (rest_auth/local); the URL's host is then ignored.",
    )
    user: str | None = Field(None, description="X-SLURM-USER-NAME for rest_auth/jwt.")
    token_file: Path | None = Field(
        None,
        description="File holding the JWT for rest_auth/jwt, read at start (else the SLURM_JWT "
        "environment variable).",
    )
    accounting: bool = Field(
        True,
        description="With source commands, also run sacct (needs slurmdbd) for jobs that finished.",
    )
    associations: bool = Field(
        False,
        description="Poll sacctmgr for user -> account memberships and coordinators: team "
        "leads see their accounts' jobs.",
    )
    cluster: str | None = Field(
        None, description="Slurm cluster name passed to sacctmgr (default: all clusters)."
    )
    poll_seconds: float = Field(10.0, gt=0, description="Seconds between two polls of Slurm.")

    def configured(self) -> bool:
        """Whether Slurm is read at all."""
        return self.source == "commands" or (self.source == "slurmrestd" and bool(self.url))

    def token(self) -> str | None:
        """The JWT from ``token_file`` (or ``SLURM_JWT``), stripped; None if unset."""
        if self.token_file is not None:
            try:
                return self.token_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigError(
                    f"cannot read: {exc.strerror}", source=str(self.token_file)
                ) from None
        return os.environ.get("SLURM_JWT") or None


class JobMappingSection(SourceSection):
    dir: Path | None = Field(
        None,
        description="Root of per-node dcgm-exporter hpc-job-mapping directories (<root>/<node>/, "
        "or the twin's <root>/<node>/hpc-job-mapping/): the collector reads the files "
        "dcgm-exporter reads and keeps job_allocations from them (docs/golden-path.md). "
        "Unset: not read.",
    )
    records_dir: Path | None = Field(
        None,
        description="Directory of the job records written by the Slurm prolog/epilog "
        "(record_dir of deploy/slurm/hpcscope.conf.example; per-node sub-directories "
        "<root>/<node>/ allowed): exact job start and end times, user and account.",
    )


class LustreJobStatsSection(SourceSection):
    dir: Path | None = Field(
        None,
        description="Spool directory of Lustre job_stats snapshots: one <server>.job_stats file "
        "per OSS/MDS, the output of lctl get_param obdfilter.*.job_stats mdt.*.job_stats written "
        "atomically by deploy/lustre/hpcscope-jobstats (shared filesystem or rsync target). A "
        "file is read when its modification time or size changes; new snapshots go to "
        "lustre_job_stats, one scrapes row per read (exporter lustre). Unset: not read.",
    )
    jobid_pattern: str = Field(
        DEFAULT_JOBID_PATTERN,
        description="Regular expression matched against a whole Lustre job_id: group job is "
        "the Slurm job id, optional group host the client node (when jobid_name contains "
        "%H). The default reads 12345 (jobid_var=SLURM_JOB_ID), 12345:1000:gpu01 "
        "(jobid_name=%j:%u:%H) and SLURM_JOB10:0:host; ids that do not match are stored "
        "with no job.",
    )

    @field_validator("jobid_pattern")
    @classmethod
    def _pattern_compiles(cls, value: str) -> str:
        compile_jobid_pattern(value)  # ValueError names what is wrong
        return value


class LustreChangelogSection(SourceSection):
    dir: Path | None = Field(
        None,
        description="Spool of Lustre MDT changelog records: one <mdt>.changelog file per MDT to "
        "which the MDS's changelog user appends lfs changelog output (and then clears what it "
        "read). New complete lines are read each cycle, each record stored once in "
        "lustre_changelog, for DP-1 and DP-2 (docs/security.md). Unset: not read.",
    )
    fid2path_mount: str | None = Field(
        None,
        description="Where the server mounts the Lustre filesystem, for lfs fid2path <mount> "
        "<fid>: records name FIDs, the rules need paths. Unset: records are stored without a "
        "path and DP-1/DP-2 cannot place them under a dataset.",
    )
    jobid_pattern: str | None = Field(
        None,
        description="The job id regular expression of the changelog's j= field; unset: "
        "lustre_job_stats.jobid_pattern (one Lustre jobid_var per site).",
    )

    @field_validator("jobid_pattern")
    @classmethod
    def _pattern_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            compile_jobid_pattern(value)  # ValueError names what is wrong
        return value


class GpuProcessesSection(SourceSection):
    dir: Path | None = Field(
        None,
        description="Spool of per-node NVML process lists: <node>/compute-apps.csv (nvidia-smi "
        "--query-compute-apps=timestamp,gpu_uuid,pid,process_name,used_memory --format=csv), "
        "<node>/gpus.csv (nvidia-smi --query-gpu=index,uuid --format=csv) and "
        "<node>/proc/<pid>/cgroup (a copy of each listed PID's cgroup file), written by a "
        "timer on each node. Read each cycle when compute-apps.csv changed; rows in "
        "gpu_processes with each PID's Slurm job, for GM-1 and GM-2. Unset: not read.",
    )


class IntegritySection(SourceSection):
    spool_dir: Path | None = Field(
        None,
        description="Root of the gradient-integrity spool: one directory per job holding the "
        "rank-<r>.jsonl files the opt-in DDP hook (hpcscope.integrity) writes. New lines are "
        "read each cycle, job, node and GPU re-derived from the allocations, GI-1 to GI-4 "
        "evaluated and alerts stored (docs/integrity.md). Unset: not read.",
    )


class FalcoSection(SourceSection):
    events_path: Path | None = Field(
        None,
        description="Falco's file_output (json_output: true, one alert per line), tailed into "
        "the alert engine every cycle; rotation (rename or copytruncate) is followed, a "
        "missing file is waited for. Unset: not read.",
    )
    ingest_token: str | None = Field(
        None,
        description="Shared secret of Falco's http_output: POST /api/ingest/falco accepts an "
        "alert only with Authorization: Bearer <token> or ?token=<token> (use HTTPS). Unset: "
        "the endpoint answers 404. Accepted alerts wait in memory for the alert engine "
        "(docs/security.md).",
    )


class TetragonSection(SourceSection):
    events_path: Path | None = Field(
        None,
        description="Tetragon's JSON export (/var/log/tetragon/tetragon.log), tailed like "
        "falco.events_path; each process's Slurm job is read once from <proc_root>/<pid>/cgroup "
        "(so the server must run on the node, or a sensor forwards the lines). Unset: not read.",
    )
    proc_root: Path = Field(
        Path("/proc"),
        description="Where the Slurm job of a Tetragon event's process is read "
        "(<root>/<pid>/cgroup): the node's /proc; the demo: its twin's.",
    )


class SecurityEventsSection(SourceSection):
    poll_seconds: float = Field(
        1.0,
        gt=0,
        description="Seconds between two reads of the Falco/Tetragon files and the HTTP buffer "
        "by the alert engine (its own loop, beside the collector's cycle). The engine runs "
        "when Falco or Tetragon is configured (falco.events_path, falco.ingest_token, "
        "tetragon.events_path).",
    )
    buffer_rows: int = Field(
        100_000,
        ge=1,
        description="Parsed Falco and Tetragon events held in memory until the alert engine "
        "drains them; beyond this the oldest are dropped and counted.",
    )


class CaptureSection(SourceSection):
    spool_dir: Path | None = Field(
        None,
        description="Root of the trace-capture spool: one directory per job holding the Kineto "
        "traces and meta files the golden path's capture (hpcscope.capture, switched on by the "
        "Slurm TaskProlog with capture_dir=) writes; the same path as capture_dir= in the "
        "Slurm hooks' config. Each cycle new ranks are read, checked against the allocations, "
        "and each complete window analysed and stored per job and window (docs/capture.md). "
        "Unset: not read.",
    )
    grace_seconds: float = Field(
        30.0,
        gt=0,
        description="Seconds after a capture window's first rank arrives after which the "
        "window is analysed with the ranks that came (a rank that died); a late rank makes it "
        "analysed again.",
    )


class SourceSections(BaseModel):
    """One field per source section (module docstring); left out: the source is off."""

    dcgm: DcgmSection = Field(default_factory=DcgmSection)
    node: NodeSection = Field(default_factory=NodeSection)
    slurm: SlurmSection = Field(default_factory=SlurmSection)
    job_mapping: JobMappingSection = Field(default_factory=JobMappingSection)
    lustre_job_stats: LustreJobStatsSection = Field(default_factory=LustreJobStatsSection)
    lustre_changelog: LustreChangelogSection = Field(default_factory=LustreChangelogSection)
    gpu_processes: GpuProcessesSection = Field(default_factory=GpuProcessesSection)
    integrity: IntegritySection = Field(default_factory=IntegritySection)
    falco: FalcoSection = Field(default_factory=FalcoSection)
    tetragon: TetragonSection = Field(default_factory=TetragonSection)
    security_events: SecurityEventsSection = Field(default_factory=SecurityEventsSection)
    capture: CaptureSection = Field(default_factory=CaptureSection)


#: Flat keys of earlier settings files -> the section keys they set (some set two).
LEGACY_KEYS: Mapping[str, tuple[tuple[str, str], ...]] = {
    "targets_path": (("dcgm", "targets_path"), ("node", "targets_path")),
    "scheduler_source": (("slurm", "source"),),
    "slurmrestd_url": (("slurm", "url"),),
    "slurmrestd_api_version": (("slurm", "api_version"),),
    "slurmrestd_socket": (("slurm", "socket"),),
    "slurmrestd_user": (("slurm", "user"),),
    "slurmrestd_token_file": (("slurm", "token_file"),),
    "slurm_accounting": (("slurm", "accounting"),),
    "slurm_associations": (("slurm", "associations"),),
    "slurm_cluster": (("slurm", "cluster"),),
    "scheduler_poll_seconds": (("slurm", "poll_seconds"),),
    "job_mapping_dir": (("job_mapping", "dir"),),
    "job_records_dir": (("job_mapping", "records_dir"),),
    "lustre_job_stats_dir": (("lustre_job_stats", "dir"),),
    "lustre_jobid_pattern": (("lustre_job_stats", "jobid_pattern"),),
    "lustre_changelog_dir": (("lustre_changelog", "dir"),),
    "lustre_fid2path_mount": (("lustre_changelog", "fid2path_mount"),),
    "gpu_processes_dir": (("gpu_processes", "dir"),),
    "integrity_spool_dir": (("integrity", "spool_dir"),),
    "falco_ingest_token": (("falco", "ingest_token"),),
    "falco_events_path": (("falco", "events_path"),),
    "tetragon_events_path": (("tetragon", "events_path"),),
    "tetragon_proc_root": (("tetragon", "proc_root"),),
    "security_poll_seconds": (("security_events", "poll_seconds"),),
    "security_buffer_rows": (("security_events", "buffer_rows"),),
    "capture_spool_dir": (("capture", "spool_dir"),),
    "capture_grace_seconds": (("capture", "grace_seconds"),),
}


def legacy_replacement(key: str) -> str:
    """What to write instead of an old flat key (``lustre_job_stats: {dir: ...}``)."""
    return " and ".join(f"{section}: {{{name}: ...}}" for section, name in LEGACY_KEYS[key])


def nest_legacy_keys(values: Mapping[str, object]) -> tuple[dict[str, object], list[str]]:
    """Settings values with their old flat keys moved into sections; and the old keys found.

    Raises:
        ValueError: an old key and the section key it maps to are both set.
    """
    nested: dict[str, object] = {k: v for k, v in values.items() if k not in LEGACY_KEYS}
    found = [key for key in values if key in LEGACY_KEYS]
    for key in found:
        for section, name in LEGACY_KEYS[key]:
            current = nested.get(section)
            if current is None:
                current = {}
            elif isinstance(current, BaseModel):
                current = current.model_dump(exclude_unset=True)
            elif not isinstance(current, Mapping):
                continue  # the section's own error is clearer
            if name in current:
                raise ValueError(f"{key} and {section}.{name} are the same setting: set one")
            nested[section] = {**current, name: values[key]}
    return nested, found
