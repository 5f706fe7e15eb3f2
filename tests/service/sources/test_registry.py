"""The source registry: every module of ``service/sources/`` is one source, found without a
list; a site's settings switch each on; the sources are polled in their registered order."""

from __future__ import annotations

import pkgutil
from pathlib import Path

import hpcscope.service.sources as registry
from hpcscope.service.settings import Settings
from hpcscope.service.source_settings import (
    FalcoSection,
    GpuProcessesSection,
    LustreChangelogSection,
    SourceSections,
)
from hpcscope.service.sources import build_sources, source_status, specs
from hpcscope.service.sources.__main__ import main
from hpcscope.service.sources._reference import COMMAND
from hpcscope.store import Store
from hpcscope.store.telemetry_rules import changelog
from tests.support.collect import collector_for, context_for, run_cycles

#: What the collector reads, in polling order (equal orders: polled together); a new source
#: is added by its module alone, so this lists the ones whose order matters today.
SOURCES = [
    "job_mapping",
    "dcgm",
    "node",
    "slurm",
    "lustre_job_stats",
    "integrity",
    "falco",
    "tetragon",
    "security_events",
    "lustre_changelog",
    "gpu_processes",
    "capture",
]

EVERYTHING = {
    "targets_path": "/etc/hpcscope/targets.json",
    "job_mapping_dir": "/var/lib/mapping",
    "slurmrestd_url": "http://ctl:6820",
    "lustre_job_stats_dir": "/spool/lustre",
    "integrity_spool_dir": "/spool/integrity",
    "falco_events_path": "/var/log/falco.json",
    "tetragon_events_path": "/var/log/tetragon/tetragon.log",
    "lustre_changelog_dir": "/spool/changelog",
    "gpu_processes_dir": "/spool/procs",
    "capture_spool_dir": "/spool/capture",
}


def test_every_module_is_one_source_named_like_its_module() -> None:
    modules = sorted(
        m.name for m in pkgutil.iter_modules(registry.__path__) if not m.name.startswith("_")
    )
    assert sorted(spec.name for spec in specs()) == modules
    names = [spec.name for spec in specs()]
    assert [name for name in names if name in SOURCES] == SOURCES  # a new one fits in between
    assert all(spec.summary for spec in specs())


def test_settings_switch_sources_on() -> None:
    assert not any(status.configured for status in source_status(Settings()))
    everything = source_status(Settings.model_validate(EVERYTHING))
    assert [status.name for status in everything if status.configured] == SOURCES
    token_only = source_status(Settings(falco=FalcoSection(ingest_token="t")))
    assert [s.name for s in token_only if s.configured] == ["security_events"]


def test_stages_group_the_sources_of_one_order(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        stages = build_sources(context_for(store, Settings.model_validate(EVERYTHING)))
        names = [[source.name for source in stage] for stage in stages]
        assert ["dcgm", "node"] in names  # the scrapes wait on the network together
        assert [name for stage in names for name in stage] == SOURCES


def test_the_changelog_and_process_spools_are_read_each_cycle(tmp_path: Path) -> None:
    (tmp_path / "changelog").mkdir()
    (tmp_path / "changelog" / "fs-MDT0000.changelog").write_text(
        "1 01CREAT 12:00:00.000000000 2026.12.01 0x0 t=[0x1:0x2:0x0] j=7:0:n1 ef=0xf "
        "u=1:1 nid=0@lo p=[0x1:0x1:0x0] a\n2 01CREAT 12:00:01"  # the second line is incomplete
    )
    settings = Settings(
        lustre_changelog=LustreChangelogSection(dir=tmp_path / "changelog"),
        gpu_processes=GpuProcessesSection(dir=tmp_path / "procs"),
    )
    with Store(tmp_path / "s.duckdb") as store:
        collector = collector_for(store, settings)
        assert [s.name for s in collector.sources] == ["lustre_changelog", "gpu_processes"]
        (report,) = run_cycles(collector)
        assert report.of("lustre_changelog").rows == 1
        store.flush()
        assert changelog(store).num_rows == 1


def test_each_source_has_its_section_and_each_section_its_source() -> None:
    sections = SourceSections.model_fields
    assert set(sections) == {spec.name for spec in specs()}
    for spec in specs():
        assert sections[spec.name].annotation is spec.settings
        for key, field in spec.settings.model_fields.items():
            assert field.description, f"{spec.name}.{key} has no description"


def test_the_sources_reference_is_generated_from_the_code() -> None:
    assert main(["--check"]) == 0, f"docs/sources.md is stale: run {COMMAND}"


def test_a_page_reads_each_source_configured_and_its_state(tmp_path: Path) -> None:
    settings = Settings(lustre_changelog=LustreChangelogSection(dir=tmp_path))
    with Store(tmp_path / "s.duckdb") as store:
        collector = collector_for(store, settings)
        run_cycles(collector)
        shown = {s.name: s for s in source_status(settings, collector.source_states())}
    assert shown["lustre_changelog"].configured and not shown["dcgm"].configured
    state = shown["lustre_changelog"].state
    assert state is not None and state.polls == 1 and state.last_poll_ts is not None
    assert state.last_collected_ts is None  # an empty spool: polled, nothing collected yet
    assert shown["dcgm"].state is None
