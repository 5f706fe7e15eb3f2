"""Scrape node_exporter's InfiniBand counters into ``ib_port_counters``.

node_exporter runs on every node (Debian ``prometheus-node-exporter``, its ``infiniband``
collector on by default); hpcscope scrapes the targets labelled ``exporter: node`` in the
``file_sd`` targets file, keeps one parser per target (series keys cached between scrapes), and
appends one row per port per scrape. Rates, resets and saturation are derived at read time
(:mod:`hpcscope.analysis.infiniband`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx2

from hpcscope.ingest.exposition import ExpositionParser
from hpcscope.ingest.infiniband import InfinibandConversion, infiniband_rows
from hpcscope.model.errors import SourceError
from hpcscope.store import Store
from hpcscope.store.infiniband import append_ib_counters

log = logging.getLogger(__name__)


@dataclass
class InfinibandCollector:
    """Scrapes node_exporter targets (node name -> ``/metrics`` URL) into the store."""

    store: Store
    targets: dict[str, str]
    timeout_seconds: float = 5.0
    _parsers: dict[str, ExpositionParser] = field(default_factory=dict)

    def collect_once(self) -> dict[str, InfinibandConversion | SourceError]:
        """Scrape every target once; a failing target costs its own rows only."""
        results: dict[str, InfinibandConversion | SourceError] = {}
        with httpx2.Client(timeout=self.timeout_seconds) as client:
            for node, url in sorted(self.targets.items()):
                ts = datetime.now(UTC).replace(tzinfo=None)
                try:
                    response = client.get(url)
                    response.raise_for_status()
                except httpx2.HTTPError as exc:
                    results[node] = SourceError(f"scrape failed: {exc}", source=url)
                    log.warning("%s", results[node])
                    continue
                parser = self._parsers.setdefault(url, ExpositionParser())
                page = parser.parse(response.content, source=url)
                conversion = infiniband_rows(page, ts=ts, node=node)
                for family in conversion.unknown_families:
                    log.info(
                        "%s: InfiniBand family %s not stored (newer node_exporter?)", url, family
                    )
                append_ib_counters(self.store, conversion.table).result()
                results[node] = conversion
        return results
