"""What the dcgm-exporter and node-exporter sources share: the targets file, the scraper, and
each target's health (gaps, ``OPS-1``) and ``scrapes`` rows.

A scrape source reads the Prometheus ``file_sd`` targets file (re-read when it changes), keeps
the targets of its own exporter (label ``exporter``), scrapes them concurrently (a timeout
per target), converts each page (:meth:`ExporterScrape.convert`), stores the node facts of
the page (Xid counts, posture: ``service/collect/node_facts.py``) and records one ``scrapes``
row per attempt, plus a ``collection_gaps`` row when a target comes back after failing or
after a silence (seeded from the store at start), and the collection-health alert ``OPS-1``
(``service/collect/health.py``; the gap is data: analysis never reads it as an idle GPU).
An exporter that hangs, returns 500 or garbage costs one failed scrape row; nothing stored
before is touched.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx2
import pyarrow as pa

from hpcscope.ingest.exporters.node_facts import FactSeries
from hpcscope.ingest.exposition.parser import ParsedPage
from hpcscope.ingest.exposition.scrape import Scraper, ScrapeResult, Target, load_file_sd
from hpcscope.model.errors import SourceError
from hpcscope.model.schemas import GAP_SCHEMA, SCRAPE_SCHEMA
from hpcscope.service.collect.clock import Clock
from hpcscope.service.collect.health import CollectionHealth
from hpcscope.service.collect.node_facts import fact_series, store_node_facts
from hpcscope.service.collect.source import Batch, Health, Poll
from hpcscope.store import Store
from hpcscope.store import alerts as alert_store
from hpcscope.store.reports import collected_until

log = logging.getLogger(__name__)


@dataclass
class Round:
    """What one scrape round of one source gathered, before it is stored."""

    scrapes: list[dict[str, object]] = field(default_factory=list)
    gaps: list[dict[str, object]] = field(default_factory=list)
    ok: int = 0
    errors: list[str] = field(default_factory=list)


class ExporterScrape:
    """Scrapes the targets of one exporter kind (subclasses: what a page becomes).

    Args:
        store: where rows go (through its single writer).
        exporter: the ``exporter`` label of the targets this source scrapes.
        targets_path: the ``file_sd`` file (JSON or YAML); None: the static targets only.
        static_targets: targets besides the file's.
        interval_seconds / timeout_seconds: the collector's cycle and the per-target budget
            (a target silent for two intervals and a timeout is in a gap).
        clock: the collector's clock (the scrapes are stamped with it).
        transport: the scraper's httpx2 transport (default: real TCP connections).
    """

    name = ""
    exporter = ""

    def __init__(
        self,
        store: Store,
        *,
        targets_path: Path | None,
        static_targets: tuple[Target, ...] = (),
        interval_seconds: float,
        timeout_seconds: float,
        clock: Clock,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self.store = store
        self.targets_path = targets_path
        self.static_targets = tuple(t for t in static_targets if t.exporter == self.exporter)
        self._clock = clock
        self.scraper = Scraper(
            timeout_seconds=timeout_seconds, clock=self._aware_now, transport=transport
        )
        self._targets: list[Target] = list(self.static_targets)
        self._targets_mtime: float | None = None
        self._facts: dict[str, FactSeries] = {}
        # seeded from the store: a restart after an outage records the outage as a gap
        self.health = CollectionHealth(
            silence_seconds=2 * interval_seconds + timeout_seconds,
            collected_until=collected_until(store),
        )
        self.setup()

    def _aware_now(self) -> datetime:
        return self._clock.now().replace(tzinfo=UTC)

    def targets(self) -> list[Target]:
        """This exporter's targets: the static ones plus the file's (re-read on change)."""
        path = self.targets_path
        if path is not None:
            try:
                mtime = path.stat().st_mtime
            except FileNotFoundError:
                mtime = None
            if mtime is not None and mtime != self._targets_mtime:
                try:
                    loaded = load_file_sd(path)
                except SourceError as exc:
                    log.error("targets file: %s (keeping the previous list)", exc)
                else:
                    mine = [t for t in loaded if t.exporter == self.exporter]
                    self._targets = [*self.static_targets, *mine]
                    self._targets_mtime = mtime
                    log.info("%s: %d targets from %s", self.name, len(mine), path)
        return self._targets

    # ------------------------------------------------------------------ subclasses

    def setup(self) -> None:
        """Make the per-round state of a subclass (called at the end of ``__init__``)."""

    def convert(self, page: ParsedPage, *, target: Target, ts: datetime, node: str | None) -> int:
        """Convert one page into this round's rows; the rows it made (raises SourceError)."""
        raise NotImplementedError

    async def store_round(self) -> tuple[int, int]:
        """Store the round's converted rows; (rows, GPU samples) stored."""
        raise NotImplementedError

    # ------------------------------------------------------------------ Source

    async def poll(self, now: datetime) -> Poll:
        targets = self.targets()
        results = await self.scraper.scrape(targets) if targets else []
        gathered = Round()
        for result in results:
            self.record(result, gathered)
        rows, samples = await self.store_round()
        batches = []
        if gathered.scrapes:
            batches.append(Batch("scrapes", pa.Table.from_pylist(gathered.scrapes, SCRAPE_SCHEMA)))
        if gathered.gaps:
            batches.append(
                Batch("collection_gaps", pa.Table.from_pylist(gathered.gaps, GAP_SCHEMA))
            )
        health = Health(
            self.name,
            now,
            targets=len(targets),
            ok=gathered.ok,
            rows=rows,
            samples=samples,
            errors=tuple(gathered.errors),
        )
        return Poll(health, tuple(batches))

    async def settle(self) -> None:
        return None

    async def aclose(self) -> None:
        """Close the scraper's HTTP connections (in the loop that used them)."""
        await self.scraper.aclose()

    def finish(self, now: datetime) -> tuple[Batch, ...]:
        """Targets still failing at a clean stop: gaps ending ``now``."""
        rows = [gap.row() for gap in self.health.close_open(now)]
        return (Batch("collection_gaps", pa.Table.from_pylist(rows, GAP_SCHEMA)),) if rows else ()

    # ------------------------------------------------------------------ one target

    def record(self, result: ScrapeResult, gathered: Round) -> None:
        """One scrape's outcome: its rows converted, its health, its ``scrapes`` row."""
        target = result.target
        node = target.labels.get("node")
        row = result.as_row()  # the scrapes row; ok, samples and error are settled below
        ts = row["ts"]
        assert isinstance(ts, datetime)
        samples = 0
        error = result.error
        ok = result.ok
        if result.page is not None:
            try:
                samples = self.convert(result.page, target=target, ts=ts, node=node)
            except SourceError as exc:
                ok, error = False, exc.describe()
        if ok and result.page is not None:  # Xid counts, posture: service/collect/node_facts
            picker = self._facts.get(target.url)
            if picker is None:
                picker = self._facts[target.url] = fact_series(target.exporter)
            store_node_facts(self.store, target, result.page, ts=ts, picker=picker)
        if ok:
            gathered.ok += 1
        else:
            gathered.errors.append(f"{target.url}: {error}")
        gap, alert = self.health.observe(target.url, node, ts, ok=ok, error=error)
        if gap is not None:
            gathered.gaps.append(gap.row())
        if alert is not None:  # OPS-1 (service/collect/health.py)
            alert_store.upsert_alerts(self.store, [alert])
        log.debug("scrape %s: ok=%s samples=%d error=%s", target.url, ok, samples, error)
        # samples: rows stored (GPU rows or port rows), not page lines
        gathered.scrapes.append({**row, "ok": ok, "samples": samples, "error": error})
