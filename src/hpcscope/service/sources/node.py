"""node-exporter: InfiniBand port counters, and the posture facts of its textfile collector.

Reads the targets labelled ``exporter: node`` in the ``file_sd`` file (``targets_path``),
scraped together with the dcgm-exporter targets; each page's ``node_infiniband_*`` series
become ``ib_port_counters`` rows (``ingest/exporters/infiniband.py``), one write per round.
"""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa

from hpcscope.ingest.exporters.infiniband import infiniband_rows
from hpcscope.ingest.exposition.parser import ParsedPage
from hpcscope.ingest.exposition.scrape import Target
from hpcscope.service.settings import Settings
from hpcscope.service.source_settings import NodeSection
from hpcscope.service.sources import SourceContext, SourceSpec
from hpcscope.service.sources._scrape import ExporterScrape
from hpcscope.store.infiniband import append_ib_counters


class NodeScrape(ExporterScrape):
    """The node-exporter targets, scraped into InfiniBand port counters."""

    name = "node"
    exporter = "node"

    def setup(self) -> None:
        self._ports: list[pa.Table] = []

    def convert(self, page: ParsedPage, *, target: Target, ts: datetime, node: str | None) -> int:
        ports = infiniband_rows(page, ts=ts, node=node or target.url)
        self._ports.append(ports.table)
        return int(ports.table.num_rows)

    async def store_round(self) -> tuple[int, int]:
        ports, self._ports = self._ports, []
        if not ports:
            return 0, 0
        table = pa.concat_tables(ports)  # one write per round, not one per node
        append_ib_counters(self.store, table)
        return table.num_rows, 0


def _configured(settings: Settings) -> bool:
    return settings.node.targets_path is not None


def _build(context: SourceContext) -> NodeScrape:
    settings = context.settings
    return NodeScrape(
        context.store,
        targets_path=settings.node.targets_path,
        interval_seconds=settings.scrape_interval_seconds,
        timeout_seconds=settings.scrape_timeout_seconds,
        clock=context.clock,
        transport=context.transport,
    )


SOURCE = SourceSpec(
    name="node",
    settings=NodeSection,
    order=10,
    configured=_configured,
    build=_build,
    summary="node-exporter pages: InfiniBand port counters, posture facts",
)
