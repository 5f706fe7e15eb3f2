"""The sources' settings sections, and the flat keys of earlier settings files still read.

A site's settings file written for an earlier version (flat ``slurmrestd_url``,
``lustre_job_stats_dir``...) must give the same settings as the same site written with
sections; the old keys are also read from the environment and flags, with a warning naming the
key to write; an old key and its section key together are refused."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from hpcscope.model.errors import ConfigError
from hpcscope.service.settings import Settings, load_settings
from hpcscope.service.source_settings import LEGACY_KEYS, SlurmSection, SourceSections

#: A settings file as sites wrote it before the sections (every old source key).
EARLIER = """\
store_path: var/site.duckdb
scrape_interval_seconds: 5
targets_path: /etc/hpcscope/targets.json
scheduler_source: slurmrestd
slurmrestd_url: http://slurmctl:6820
slurmrestd_api_version: v0.0.38
slurmrestd_socket: /run/slurmrestd.sock
slurmrestd_user: hpcscope
slurmrestd_token_file: /etc/hpcscope/slurm.jwt
slurm_accounting: false
slurm_associations: true
slurm_cluster: gpu
scheduler_poll_seconds: 30
job_mapping_dir: /var/lib/dcgm/mapping
job_records_dir: /var/spool/hpcscope/records
lustre_job_stats_dir: /shared/lustre
lustre_jobid_pattern: 'SLURM_JOB(?P<job>\\d+)'
lustre_changelog_dir: /shared/changelog
lustre_fid2path_mount: /lustre
gpu_processes_dir: /shared/procs
integrity_spool_dir: /shared/integrity
falco_ingest_token: s3cret
falco_events_path: /var/log/falco.json
tetragon_events_path: /var/log/tetragon/tetragon.log
tetragon_proc_root: /host/proc
security_poll_seconds: 2
security_buffer_rows: 5000
capture_spool_dir: /shared/capture
capture_grace_seconds: 45
"""

#: The same site with one section per source.
SECTIONS = """\
store_path: var/site.duckdb
scrape_interval_seconds: 5
dcgm: {targets_path: /etc/hpcscope/targets.json}
node: {targets_path: /etc/hpcscope/targets.json}
slurm:
  source: slurmrestd
  url: http://slurmctl:6820
  api_version: v0.0.38
  socket: /run/slurmrestd.sock
  user: hpcscope
  token_file: /etc/hpcscope/slurm.jwt
  accounting: false
  associations: true
  cluster: gpu
  poll_seconds: 30
job_mapping: {dir: /var/lib/dcgm/mapping, records_dir: /var/spool/hpcscope/records}
lustre_job_stats: {dir: /shared/lustre, jobid_pattern: 'SLURM_JOB(?P<job>\\d+)'}
lustre_changelog: {dir: /shared/changelog, fid2path_mount: /lustre}
gpu_processes: {dir: /shared/procs}
integrity: {spool_dir: /shared/integrity}
falco: {ingest_token: s3cret, events_path: /var/log/falco.json}
tetragon: {events_path: /var/log/tetragon/tetragon.log, proc_root: /host/proc}
security_events: {poll_seconds: 2, buffer_rows: 5000}
capture: {spool_dir: /shared/capture, grace_seconds: 45}
"""


def _file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_an_earlier_settings_file_reads_as_the_same_site_with_sections(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="hpcscope.service.settings"):
        earlier = load_settings(_file(tmp_path, "earlier.yaml", EARLIER))
    assert earlier == load_settings(_file(tmp_path, "sections.yaml", SECTIONS))
    assert earlier.slurm.url == "http://slurmctl:6820" and earlier.slurm.poll_seconds == 30
    assert earlier.lustre_job_stats.dir == Path("/shared/lustre")
    assert earlier.node.targets_path == earlier.dcgm.targets_path
    # every old key of the file named once, with what to write instead
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == len(LEGACY_KEYS)
    assert any("slurmrestd_url is an old key, read as slurm: {url: ...}" in w for w in warned)


def test_old_keys_are_read_from_the_environment_and_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HPCSCOPE_SLURMRESTD_URL", "http://env:6820")
    monkeypatch.setenv("HPCSCOPE_SLURM__POLL_SECONDS", "20")
    monkeypatch.setenv("HPCSCOPE_LUSTRE_JOB_STATS__DIR", "/env/lustre")
    path = _file(tmp_path, "s.yaml", "slurm: {url: http://file:6820, cluster: gpu}\n")
    settings = load_settings(path, targets_path=Path("/flag/targets.json"))
    # the environment over the file, key by key within the section; the file's other key kept
    assert settings.slurm == SlurmSection(url="http://env:6820", cluster="gpu", poll_seconds=20)
    assert settings.lustre_job_stats.dir == Path("/env/lustre")
    assert settings.dcgm.targets_path == settings.node.targets_path == Path("/flag/targets.json")


def test_an_old_key_and_its_section_key_together_are_refused(tmp_path: Path) -> None:
    path = _file(tmp_path, "s.yaml", "slurmrestd_url: http://a\nslurm: {url: http://b}\n")
    with pytest.raises(ConfigError, match=r"slurmrestd_url and slurm\.url are the same setting"):
        load_settings(path)
    with pytest.raises(ValueError, match="same setting"):
        Settings.model_validate({"capture_spool_dir": "/a", "capture": {"spool_dir": "/b"}})


def test_a_bad_section_key_names_the_file_and_the_key(tmp_path: Path) -> None:
    path = _file(tmp_path, "s.yaml", "lustre_job_stats: {dir: /x, jobid_pattern: '(no group'}\n")
    with pytest.raises(ConfigError) as raised:
        load_settings(path)
    assert raised.value.field == "lustre_job_stats.jobid_pattern"
    assert str(path) in str(raised.value)
    with pytest.raises(ConfigError) as unknown:
        load_settings(_file(tmp_path, "t.yaml", "slurm: {adress: http://x}\n"))
    assert unknown.value.field == "slurm.adress"


def test_sections_are_frozen_and_default_to_off() -> None:
    settings = Settings()
    assert all(
        getattr(settings, name) == field.get_default(call_default_factory=True)
        for name, field in SourceSections.model_fields.items()
    )
    assert not settings.slurm.configured()
    with pytest.raises(ValueError, match="frozen"):
        settings.slurm.url = "http://x"  # type: ignore[misc]
