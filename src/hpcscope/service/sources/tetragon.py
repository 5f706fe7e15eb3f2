"""Tetragon: its JSON export (``/var/log/tetragon/tetragon.log``), tailed into the security
events buffer; each process's Slurm job is read once from ``/proc/<pid>/cgroup``
(``ingest/security/exec_cache.py``). The alert engine (``security_events``) drains the buffer
in the same cycle."""

from __future__ import annotations

from hpcscope.service.security.sources import TetragonSource
from hpcscope.service.settings import Settings
from hpcscope.service.source_settings import TetragonSection
from hpcscope.service.sources import SourceContext, SourceSpec
from hpcscope.service.sources._tail import TailedEvents


def _configured(settings: Settings) -> bool:
    return settings.tetragon.events_path is not None


def _build(context: SourceContext) -> TailedEvents:
    path = context.settings.tetragon.events_path
    assert path is not None
    # the processes' cgroups: the node's /proc (the demo: its twin's, tetragon.proc_root)
    proc_root = context.settings.tetragon.proc_root
    return TailedEvents("tetragon", TetragonSource(path, context.buffer(), proc_root=proc_root))


SOURCE = SourceSpec(
    name="tetragon",
    settings=TetragonSection,
    order=51,
    configured=_configured,
    build=_build,
    summary="Tetragon's JSON export, tailed: process and file events with their jobs",
)
