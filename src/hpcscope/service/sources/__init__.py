"""The source registry: every collector input, found by module, built from a site's settings.

Each module of this package (``dcgm.py``, ``lustre_job_stats.py``, ...; a leading underscore
marks a shared helper, not a source) defines one ``SOURCE``, a :class:`SourceSpec`: the
source's name (its settings section has the same name), its place in the cycle, whether a
site's settings switch it on, and how to build it from a :class:`SourceContext`. The registry
finds the modules itself (:func:`specs`), so adding a source is adding its module: nothing
else names it (``docs/development.md``, "A new source"). Nothing outside this package imports
a source module (an import-linter contract): the server asks the registry for the sources of
its settings (:func:`build_sources`) and hands them to the collector, which knows only the
:class:`~hpcscope.service.collect.source.Source` protocol.

Order (:attr:`SourceSpec.order`): the sources are polled by increasing order, those of equal
order concurrently. Allocations come first (the GPU samples are judged by them), then the
exporter scrapes together, then the scheduler and the spools, then the tails, and last the
alert engine draining what the tails read.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from itertools import groupby

import httpx2

from hpcscope.model.alerts import RuleSpec
from hpcscope.model.topology import Topology
from hpcscope.service.collect.clock import Clock, SystemClock
from hpcscope.service.collect.source import Source, SourceState
from hpcscope.service.security.buffer import SecurityEventBuffer
from hpcscope.service.settings import Settings
from hpcscope.service.source_settings import SourceSection
from hpcscope.store import Store

__all__ = [
    "SourceContext",
    "SourceSpec",
    "SourceStatus",
    "build_sources",
    "source_status",
    "specs",
]


@dataclass(frozen=True, slots=True)
class SourceContext:
    """What a source may be built from.

    Attributes:
        store: where its rows go (and what it reads: allocations, jobs).
        settings: the site's settings (its own section among them).
        rules: the site's detection rules by id.
        topology: the cluster (checkpoint and dataset roots, nodes).
        clock: the collector's clock.
        transport: the exporter scrapes' httpx2 transport (tests: a mock; default: TCP).
        security_buffer: the security events buffer the Falco/Tetragon tails fill and the
            alert engine drains (the server's, shared with ``POST /api/ingest/falco``;
            default: a new one).
    """

    store: Store
    settings: Settings
    rules: Mapping[str, RuleSpec]
    topology: Topology
    clock: Clock = field(default_factory=SystemClock)
    transport: httpx2.AsyncBaseTransport | None = None
    security_buffer: SecurityEventBuffer | None = None

    def __post_init__(self) -> None:
        if self.security_buffer is None:  # one buffer for every source of this context
            buffer = SecurityEventBuffer(max_rows=self.settings.security_events.buffer_rows)
            object.__setattr__(self, "security_buffer", buffer)

    def buffer(self) -> SecurityEventBuffer:
        """The security events buffer every source of this context shares."""
        assert self.security_buffer is not None  # set by __post_init__
        return self.security_buffer


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """One registered source.

    Attributes:
        name: the source's name, unique; its settings section is named the same.
        settings: the model of that section (``service/source_settings.py``).
        order: its place in the cycle (module docstring): lower first, equal together.
        configured: whether a site's settings switch it on.
        build: the source of a context whose settings switch it on.
        summary: one line for pages and ``docs/development.md``: what it reads.
    """

    name: str
    settings: type[SourceSection]
    order: int
    configured: Callable[[Settings], bool]
    build: Callable[[SourceContext], Source]
    summary: str


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """One registered source as a page shows it: switched on by the site's settings or not,
    and, while a collector runs it, its state (when it last polled, last collected rows, last
    failed, and the last poll's health row).

    Attributes:
        name / summary: the source and what it reads.
        configured: whether the site's settings switch it on.
        state: the running collector's record of it (None: not collected by this process).
    """

    name: str
    summary: str
    configured: bool
    state: SourceState | None = None


@cache
def specs() -> tuple[SourceSpec, ...]:
    """Every registered source, in polling order (the modules of this package)."""
    found: list[SourceSpec] = []
    for module in pkgutil.iter_modules(__path__):
        if module.name.startswith("_"):
            continue
        loaded = importlib.import_module(f"{__name__}.{module.name}")
        spec = getattr(loaded, "SOURCE", None)
        if not isinstance(spec, SourceSpec):
            raise TypeError(f"{loaded.__name__} defines no SOURCE = SourceSpec(...)")
        found.append(spec)
    names = [spec.name for spec in found]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"sources registered twice: {duplicates}")
    return tuple(sorted(found, key=lambda spec: (spec.order, spec.name)))


def source_status(
    settings: Settings, states: Sequence[SourceState] = ()
) -> tuple[SourceStatus, ...]:
    """Every registered source, whether ``settings`` switch it on and its state among
    ``states`` (the running collector's ``source_states()``), in polling order."""
    by_name = {state.name: state for state in states}
    return tuple(
        SourceStatus(s.name, s.summary, s.configured(settings), by_name.get(s.name))
        for s in specs()
    )


def build_sources(
    context: SourceContext, *, only: Callable[[SourceSpec], bool] | None = None
) -> list[list[Source]]:
    """The sources ``context.settings`` switch on, as the collector's stages (sources of
    equal order in one stage, polled together). ``only`` narrows the registry (tests)."""
    chosen = [
        spec
        for spec in specs()
        if spec.configured(context.settings) and (only is None or only(spec))
    ]
    return [
        [spec.build(context) for spec in stage]
        for _, stage in groupby(chosen, key=lambda spec: spec.order)
    ]
