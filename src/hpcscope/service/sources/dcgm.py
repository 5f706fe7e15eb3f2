"""dcgm-exporter: each GPU's readings, one ``gpu_readings`` row per GPU and time.

Reads the targets labelled ``exporter: dcgm`` in the Prometheus ``file_sd`` file
(``targets_path``), scrapes them together with the node-exporter targets, converts each page
into GPU rows (``ingest/exporters/dcgm.py``) and stores one table per round; the jobs of each
row are decided from the platform's allocations (``service/collect/attribution.py``; the
page's ``hpc_job`` labels are only the fallback). A round's rows are stored while the next
round's scrapes wait on the network (:meth:`DcgmScrape.settle`).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

from hpcscope.ingest.exporters.dcgm import DcgmConversion, DcgmConverter, readings_table
from hpcscope.ingest.exposition.parser import ParsedPage
from hpcscope.ingest.exposition.scrape import Target
from hpcscope.service.collect.attribution import ReadingsAttributor
from hpcscope.service.settings import Settings
from hpcscope.service.source_settings import DcgmSection
from hpcscope.service.sources import SourceContext, SourceSpec
from hpcscope.service.sources._scrape import ExporterScrape

log = logging.getLogger(__name__)


class DcgmScrape(ExporterScrape):
    """The dcgm-exporter targets, scraped and stored as GPU readings."""

    name = "dcgm"
    exporter = "dcgm"

    def setup(self) -> None:
        self._converters: dict[str, DcgmConverter] = {}
        self.conversions: list[DcgmConversion] = []
        self.attributor = ReadingsAttributor(self.store)
        self._pending: asyncio.Future[int] | None = None

    def convert(self, page: ParsedPage, *, target: Target, ts: datetime, node: str | None) -> int:
        converter = self._converters.setdefault(target.url, DcgmConverter())
        conversion = converter.convert(page, ts=ts, node=node)
        self.conversions.append(conversion)
        return conversion.gpu_rows

    async def store_round(self) -> tuple[int, int]:
        conversions, self.conversions = self.conversions, []
        if not any(conversion.gpu_rows for conversion in conversions):
            return 0, 0
        table = readings_table(conversions)  # one table per round, not one per page
        await self.settle()  # one round in flight at most, stored in order
        self._pending = asyncio.ensure_future(
            asyncio.to_thread(self.attributor.store_readings, table)
        )
        return table.num_rows, table.num_rows

    async def settle(self) -> None:
        """Wait for the GPU rows of the previous round to be stored."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            await pending
        except Exception:  # a bad round must not end collection
            log.exception("storing the GPU rows of a round failed")


def _configured(settings: Settings) -> bool:
    # with metrics_backend: prometheus the site's engine scrapes dcgm-exporter, not hpcscope
    return settings.dcgm.targets_path is not None and settings.metrics_backend != "prometheus"


def _build(context: SourceContext) -> DcgmScrape:
    settings = context.settings
    return DcgmScrape(
        context.store,
        targets_path=settings.dcgm.targets_path,
        interval_seconds=settings.scrape_interval_seconds,
        timeout_seconds=settings.scrape_timeout_seconds,
        clock=context.clock,
        transport=context.transport,
    )


SOURCE = SourceSpec(
    name="dcgm",
    settings=DcgmSection,
    order=10,
    configured=_configured,
    build=_build,
    summary="dcgm-exporter pages: GPU readings per GPU and time",
)
