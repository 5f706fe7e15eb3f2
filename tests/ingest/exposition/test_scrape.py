"""The scraper against real loopback HTTP servers, good and broken."""

from __future__ import annotations

import gc
import random
import time
from datetime import UTC, datetime, timedelta

from fastapi import FastAPI
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import PlainTextResponse

from hpcscope.ingest.exposition.scrape import Scraper, ScrapeResult, Target, scrape_results_table
from hpcscope.model.schemas import SCRAPE_SCHEMA
from tests.support.aio import run_async
from tests.support.dcgm_pages import render_dcgm_page
from tests.support.exporters import (
    close_mid_body,
    hang,
    loopback_exporters,
    page,
    refused_url,
    status,
    trickle,
)
from tests.support.servers import live_server

GOOD = render_dcgm_page("gpu01", rng=random.Random(7), gpus=8)
SAMPLES = GOOD.count("\n") - 2 * GOOD.count("# TYPE")


def _target(base: str, path: str, node: str = "gpu01") -> Target:
    return Target(f"{base}{path}", "dcgm", {"node": node})


def test_scrapes_pages_and_the_second_scrape_uses_the_cache() -> None:
    async def run() -> tuple[list[ScrapeResult], list[ScrapeResult], list[str]]:
        routes = {
            "/a": page(GOOD),
            "/b": page(GOOD, gzipped=True),
            "/c": page(GOOD, chunked=True),
        }
        async with loopback_exporters(routes) as (base, stats), Scraper() as scraper:
            targets = [_target(base, path) for path in routes]
            first = await scraper.scrape(targets)
            second = await scraper.scrape(targets)
            return first, second, stats.accept_headers

    first, second, accepts = run_async(run())
    for result in first + second:
        assert result.ok, result.error
        assert result.error is None
        assert result.http_status == 200
        assert result.samples == SAMPLES == 160
        assert result.rejected_lines == 0
        assert result.started_at.tzinfo is UTC
        assert result.body_bytes > 0
    assert [result.target.url.rsplit("/", 1)[1] for result in first] == ["a", "b", "c"]
    assert all(result.page is not None and result.page.new_series == 160 for result in first)
    assert all(result.page is not None and result.page.new_series == 0 for result in second)
    assert all(accept.startswith("text/plain;version=0.0.4") for accept in accepts)


BROKEN_PAGE = GOOD.replace('DCGM_FI_DEV_GPU_TEMP{gpu="3"', "DCGM_FI_DEV_GPU_TEMP{gpu=3", 1)


def test_every_kind_of_broken_target_is_a_result_not_an_exception() -> None:
    routes = {
        "/good": page(GOOD),
        "/hang": hang(),
        "/500": status(500, "Internal Server Error", "collector panic: DCGM not initialised"),
        "/garbage": page("<html><body><h1>502 Bad Gateway</h1></body></html>\n"),
        "/html": page("<html></html>", content_type="text/html; charset=utf-8"),
        "/openmetrics": page(GOOD + "# EOF\n", content_type="application/openmetrics-text"),
        "/mid-body": close_mid_body(GOOD, sent_bytes=1000),
        "/huge": page(GOOD * 40),
        "/huge-chunked": page(GOOD * 40, chunked=True),
        "/bomb": page(GOOD * 40, gzipped=True),
        "/partial": page(BROKEN_PAGE),
        "/slow": trickle(GOOD, bytes_per_write=2000, pause_seconds=0.2),
    }

    async def run() -> tuple[dict[str, ScrapeResult], float]:
        async with (
            loopback_exporters(routes) as (base, _),
            Scraper(timeout_seconds=1.0, max_body_bytes=1_000_000) as scraper,
        ):
            targets = [_target(base, path) for path in routes]
            targets.append(Target(refused_url(), "dcgm", {"node": "gpu09"}))
            start = time.monotonic()
            results = await scraper.scrape(targets)
            elapsed = time.monotonic() - start
            return {result.target.url.rsplit("/", 1)[1]: result for result in results}, elapsed

    results, elapsed = run_async(run())
    assert elapsed < 3.0  # the hanging target costs its timeout, not more, and others run
    assert results["good"].ok
    failed = {name: result for name, result in results.items() if not result.ok}
    assert set(failed) == {path[1:] for path in routes} - {"good", "partial"} | {"metrics"}
    for result in failed.values():
        assert result.page is None and result.error

    def error(name: str) -> str:
        message = results[name].error
        assert message is not None
        return message

    assert error("hang").startswith("timeout")
    assert error("slow").startswith("timeout")
    assert results["500"].http_status == 500
    assert error("500") == "HTTP 500 Internal Server Error: collector panic: DCGM not initialised"
    assert error("garbage").startswith("no samples: 1 malformed line rejected; first: ")
    assert ":1:1: invalid metric name" in error("garbage")
    assert results["garbage"].rejected_lines == 1
    assert "wrong content type 'text/html" in error("html")
    assert "wrong content type 'application/openmetrics-text'" in error("openmetrics")
    assert error("mid-body").startswith("connection closed before the whole page arrived")
    assert results["mid-body"].http_status == 200
    assert results["hang"].http_status is None
    assert error("huge").startswith("body too large: Content-Length")
    assert error("huge-chunked") == "body too large: more than 1000000 bytes"
    assert error("bomb") == "body too large: more than 1000000 bytes"
    assert error("metrics") == "connection refused"
    partial = results["partial"]
    assert partial.ok and partial.samples == SAMPLES - 1 and partial.rejected_lines == 1
    assert "must be in double quotes" in error("partial")
    assert f"{partial.target.url}:" in error("partial")


def test_concurrency_is_limited() -> None:
    routes = {f"/n{i}": page(GOOD, delay_seconds=0.05) for i in range(24)}

    async def run() -> int:
        async with loopback_exporters(routes) as (base, stats), Scraper(concurrency=4) as scraper:
            results = await scraper.scrape([_target(base, path) for path in routes])
            assert all(result.ok for result in results)
            return stats.peak_in_flight

    peak = run_async(run())
    assert 2 <= peak <= 4


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_staleness_follows_the_last_success() -> None:
    clock = Clock()
    behaviour = {"/metrics": page(GOOD)}

    async def run() -> None:
        async with (
            loopback_exporters(behaviour) as (base, _),
            Scraper(clock=clock, timeout_seconds=0.5) as scraper,
        ):
            up = _target(base, "/metrics", "gpu01")
            down = Target(refused_url(), "dcgm", {"node": "gpu02"})
            await scraper.scrape([up, down])
            assert scraper.last_success(up) == clock.now
            assert scraper.last_success(down) is None
            assert scraper.stale_targets(clock.now, 30) == [down]
            first_success = clock.now
            clock.now += timedelta(seconds=60)
            behaviour["/metrics"] = status(503, "Service Unavailable")
            [result, _] = await scraper.scrape([up, down])
            assert result.error == "HTTP 503 Service Unavailable"
            assert scraper.last_success(up) == first_success
            assert scraper.stale_targets(clock.now, 30) == [up, down]
            assert scraper.stale_targets(clock.now, 120) == [down]
            scraper.forget(down)
            assert scraper.stale_targets(clock.now, 30) == [up]

    run_async(run())


def test_results_as_scrape_rows() -> None:
    target = Target("http://gpu01:9400/metrics", "dcgm", {"node": "gpu01"})
    started = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    results = [
        ScrapeResult(target, started, 0.012, True, 200, None, None, 0),
        ScrapeResult(target, started, 2.0, False, None, "timeout", None, 0),
    ]
    table = scrape_results_table(results)
    assert table.schema.equals(SCRAPE_SCHEMA)
    rows = table.to_pylist()
    assert rows[1] == {
        "ts": datetime(2026, 3, 1, 12, 0),
        "target": "http://gpu01:9400/metrics",
        "exporter": "dcgm",
        "node": "gpu01",
        "ok": False,
        "duration_seconds": 2.0,
        "samples": 0,
        "rejected_lines": 0,
        "error": "timeout",
    }


def test_scrapes_a_real_asgi_exporter_with_gzip() -> None:
    app = FastAPI()
    app.add_middleware(GZipMiddleware, minimum_size=100)

    @app.get("/metrics")
    def metrics() -> PlainTextResponse:
        return PlainTextResponse(GOOD, media_type="text/plain; version=0.0.4")

    with live_server(app) as base:

        async def run() -> ScrapeResult:
            async with Scraper() as scraper:
                [result] = await scraper.scrape([_target(base, "/metrics")])
                return result

        result = run_async(run())
    assert result.ok, result.error
    assert result.samples == SAMPLES


def test_series_table_of_a_target() -> None:
    async def run() -> None:
        async with loopback_exporters({"/metrics": page(GOOD)}) as (base, _), Scraper() as scraper:
            target = _target(base, "/metrics")
            assert scraper.series(target) == ()
            [result] = await scraper.scrape([target])
            assert result.page is not None
            assert scraper.series(target) is result.page.series
            assert len(scraper.series(target)) == SAMPLES

    run_async(run())


def test_one_scraper_driven_by_successive_event_loops() -> None:
    """A collector may run each cycle with its own asyncio.run(): the scraper follows, and
    closes each loop's keep-alive connections when that loop ends (no ResourceWarning)."""
    app = FastAPI()

    @app.get("/metrics")
    def metrics() -> PlainTextResponse:
        return PlainTextResponse(GOOD, media_type="text/plain; version=0.0.4")

    async def cycle(scraper: Scraper, target: Target) -> ScrapeResult:
        [result] = await scraper.scrape([target])
        return result

    with live_server(app) as base:  # uvicorn keeps connections alive
        target = _target(base, "/metrics")
        scraper = Scraper()
        results = [run_async(cycle(scraper, target)) for _ in range(3)]
        gc.collect()  # an unclosed connection of an ended loop would warn here
    assert [result.ok for result in results] == [True, True, True], [r.error for r in results]
    assert [result.page.new_series for result in results if result.page] == [160, 0, 0]
