"""Scrape the digital twin's dcgm-exporter endpoints, as the collector will."""

from __future__ import annotations

import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from hpcscope.ingest.dcgm_fields import COLUMN_OF_FIELD
from hpcscope.ingest.exporters.dcgm import DcgmConverter
from hpcscope.ingest.exposition.parser import parse_exposition
from hpcscope.ingest.exposition.scrape import Scraper, ScrapeResult, load_file_sd
from hpcscope.model.topology import load_topology
from hpcscope.service.settings import bundled_topology
from hpcscope.twin.cluster import TwinCluster
from tests.support.aio import run_async
from tests.support.exposition_oracle import assert_same_samples, oracle_samples


def test_twin_pages_scrape_parse_and_convert(tmp_path: Path) -> None:
    topology = load_topology(bundled_topology("2x8-h100"))
    with TwinCluster(topology, tmp_path / "twin", seed=3) as twin:
        every = load_file_sd(twin.state_dir / "targets.json")
        assert sorted((t.exporter, t.node or "") for t in every) == [
            ("dcgm", "gpu01"),
            ("dcgm", "gpu02"),
            ("node", "gpu01"),
            ("node", "gpu02"),
        ]
        targets = [target for target in every if target.exporter == "dcgm"]
        port = next(iter(twin.dcgm_ports.values()))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()

        async def run() -> list[ScrapeResult]:
            async with Scraper(timeout_seconds=5) as scraper:
                first = await scraper.scrape(targets)
                second = await scraper.scrape(targets)
                return first + second

        results = run_async(run())

    # The twin's page is read exactly as prometheus_client reads it.
    samples, errors = parse_exposition(text)
    assert errors == []
    assert_same_samples(samples, oracle_samples(text))

    converters = {target.url: DcgmConverter() for target in targets}
    for result in results:
        assert result.ok, result.error
        assert result.rejected_lines == 0
        page = result.page
        assert page is not None and len(page) > 0
        conversion = converters[result.target.url].convert(
            page, ts=datetime.now(UTC), node=result.target.node
        )
        assert conversion.hostnames == {result.target.node}
        assert conversion.dropped_blank == 0 and conversion.unattributed == 0
        assert sorted(set(conversion.table.column("gpu").to_pylist())) == list(range(8))
        names = {series.name for series, _, _ in page.samples()}
        assert conversion.unknown_fields == names - set(COLUMN_OF_FIELD)
        assert conversion.table.column("sm_active_ratio").null_count == 0
