"""A collector built as the server builds it: the registry's sources for some settings.

``collector_for(store, settings)`` is ``serve/server.py``'s wiring without the web server:
the sources the settings switch on (``service/sources/``), the collector's cycle from the
settings, and the seams the tests need (a fake clock, a mock HTTP transport). ``run_cycles``
runs cycles in one event loop and closes the sources' connections at the end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from functools import cache

import httpx2

from hpcscope.model.alerts import RuleSpec
from hpcscope.model.topology import Topology, load_topology
from hpcscope.service.collect.clock import Clock, SystemClock
from hpcscope.service.collect.collector import Collector, CollectorConfig, CycleReport
from hpcscope.service.security.buffer import SecurityEventBuffer
from hpcscope.service.settings import Settings
from hpcscope.service.sources import SourceContext, build_sources
from hpcscope.store import Store


@cache
def _topology(path: str) -> Topology:
    return load_topology(path)


def context_for(
    store: Store,
    settings: Settings,
    *,
    rules: Mapping[str, RuleSpec] | None = None,
    topology: Topology | None = None,
    clock: Clock | None = None,
    transport: httpx2.AsyncBaseTransport | None = None,
    buffer: SecurityEventBuffer | None = None,
) -> SourceContext:
    """The context the registry builds sources from (the bundled topology by default)."""
    return SourceContext(
        store,
        settings,
        rules or {},
        topology or _topology(str(settings.resolved_topology_path())),
        clock=clock or SystemClock(),
        transport=transport,
        security_buffer=buffer,
    )


def collector_for(
    store: Store,
    settings: Settings,
    *,
    rules: Mapping[str, RuleSpec] | None = None,
    clock: Clock | None = None,
    transport: httpx2.AsyncBaseTransport | None = None,
    buffer: SecurityEventBuffer | None = None,
    after_cycle: Sequence[Callable[[], object]] = (),
) -> Collector:
    """The collector ``hpcscope serve`` would run for ``settings``, on ``store``."""
    context = context_for(
        store, settings, rules=rules, clock=clock, transport=transport, buffer=buffer
    )
    return Collector(
        store,
        build_sources(context),
        config=CollectorConfig.from_settings(settings),
        clock=clock,
        after_cycle=after_cycle,
    )


def run_cycles(collector: Collector, cycles: int = 1) -> list[CycleReport]:
    """``cycles`` cycles of ``collector`` in one event loop, everything stored at return."""

    async def run() -> list[CycleReport]:
        try:
            return [await collector.collect_once() for _ in range(cycles)]
        finally:
            await collector.aclose()

    return asyncio.run(run())
