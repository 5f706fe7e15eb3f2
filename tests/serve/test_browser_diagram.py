"""The explorable diagram in a real headless Chromium (Debian's, through Playwright).

Keyboard walk over every element, both diagram modes, both reading modes, "Try this", live
updates without reload (and none while the tab is hidden), a phone-width viewport that scrolls
sideways, the 1,024-GPU cluster's first render. Console errors fail every test (the ``page``
fixture). Screenshots land in ``test-artifacts/screenshots/diagram-*.png``; the measured
first render of the 128-node page in ``test-artifacts/diagram-first-render.json``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from hpcscope.model.catalog import default_catalog
from hpcscope.model.schemas import GPU_SAMPLE_SCHEMA
from hpcscope.model.timeutil import utcnow
from hpcscope.serve.app import create_app
from hpcscope.serve.diagram.layout import layout_diagram
from hpcscope.serve.diagram.shapes import Role
from hpcscope.serve.routes import diagram as diagram_routes
from hpcscope.service.core import Service
from hpcscope.service.settings import Settings, bundled_topology
from tests.conftest import demo_users
from tests.support.browser import login, screenshot
from tests.support.fleet import write_fleet, write_scaled_fleet
from tests.support.paths import ARTIFACTS
from tests.support.servers import live_server

pytestmark = pytest.mark.browser


@pytest.fixture
def base_url(service: Service) -> Iterator[str]:
    write_fleet(service.store, now=utcnow())
    with live_server(create_app(service)) as url:
        yield url


def focused_id(page: Any) -> str | None:
    result: str | None = page.evaluate(
        "() => { const el = document.activeElement;"
        " return el && el.closest('#diagram-svg') ? el.id : null; }"
    )
    return result


def wait_card(page: Any, element_id: str) -> None:
    page.wait_for_selector(f'#diagram-card [data-card="{element_id}"]', timeout=5000)


def test_keyboard_walk_reaches_every_element_and_opens_its_card(
    page: Any, base_url: str, service: Service
) -> None:
    login(page, base_url, "admin", "admin-demo")
    page.goto(f"{base_url}/diagram")
    layout = layout_diagram(service.topology, default_catalog())
    expected = [s.id for s in layout.focus_order if s.role is not Role.VECTOR]  # Observe mode
    # Tab from the top of the page until the walk enters the diagram
    for _ in range(40):
        page.keyboard.press("Tab")
        if focused_id(page):
            break
    walked: list[str] = []
    for index in range(len(expected) + 5):
        current = focused_id(page)
        if current is None:
            break
        walked.append(current)
        # Enter and Space both open the card; the focus stays on the element
        page.keyboard.press("Enter" if index % 2 == 0 else " ")
        wait_card(page, current)
        assert focused_id(page) == current
        page.keyboard.press("Tab")
    assert walked == expected
    region = page.locator("#diagram-card")
    assert region.get_attribute("aria-live") == "polite"
    # visible focus: a solid outline on the focused element
    page.focus("#gpu-gpu02-2")
    outline = page.evaluate(
        "() => getComputedStyle(document.activeElement).outlineStyle + ' ' +"
        " getComputedStyle(document.activeElement).outlineWidth"
    )
    assert outline.startswith("solid") and not outline.endswith(" 0px")
    page.keyboard.press("Enter")
    wait_card(page, "gpu-gpu02-2")
    card = region.inner_text()
    assert "real 92 %" in card and "reported 99 %" in card and "4410002" in card
    assert page.get_attribute("#gpu-gpu02-2", "aria-current") == "true"
    assert "element=gpu-gpu02-2" in page.url
    screenshot(page, "diagram-desktop-observe-card")
    page.keyboard.press("Escape")
    page.wait_for_selector("#diagram-card [data-card]", state="detached")
    assert focused_id(page) == "gpu-gpu02-2"
    assert "element=" not in page.url


def test_modes_switch_and_render_their_overlays(page: Any, base_url: str) -> None:
    login(page, base_url, "alice", "alice-demo")
    page.goto(f"{base_url}/diagram")
    observe, threats = page.locator(".overlay-observe"), page.locator(".overlay-threats")
    assert observe.is_visible() and not threats.is_visible()
    assert page.locator("#collector-dcgm-exporter").is_visible()
    assert "ok" in page.locator("#collector-dcgm-exporter .pill-status").text_content()
    assert "not configured" in page.locator("#collector-ib-counters .pill-status").text_content()
    assert page.locator("#gpu-gpu01-0 .el-real").text_content() == "real 19 %"
    assert page.locator("#gpu-gpu01-0 .el-reported").text_content() == "rep. 87 %"
    assert "st-allocated" in (page.get_attribute("#gpu-gpu02-2", "class") or "")
    page.click("[data-set-mode=threats]")
    assert page.get_attribute("#diagram-page", "data-mode") == "threats"
    assert threats.is_visible() and not observe.is_visible()
    assert page.get_attribute("[data-set-mode=threats]", "aria-pressed") == "true"
    badges = page.locator("#weights .badge-vec")
    assert badges.count() == 6 and badges.first.is_visible()
    assert page.locator("#hca-gpu01-mlx5_0 .badge-vec").all_text_contents() == ["4", "3"]
    assert not page.locator("#gpu-gpu01-0 .el-real").is_visible()
    assert "mode=threats" in page.url
    page.click("#vector-rdma-blind-spot")
    wait_card(page, "vector-rdma-blind-spot")
    # no source raises alerts on this server (no Falco, Tetragon or integrity spool)
    assert "detections not configured" in page.locator("#diagram-card").inner_text()
    screenshot(page, "diagram-desktop-threats")
    # reading modes
    page.click("[data-set-reader=decision]")
    page.wait_for_selector("#decision-panel .cost")
    panel = page.locator("#decision-panel").inner_text()
    assert "GPU-hours" in panel and "USD" in panel and "Your jobs" in panel
    assert "Who owns each layer" in panel and "Business lines" in panel
    assert page.locator(".band-owner").first.is_visible()
    assert not page.locator("#collectors-heading").is_visible()
    screenshot(page, "diagram-desktop-decision")
    page.click("[data-set-reader=engineer]")
    assert not page.locator("#decision-panel").is_visible()
    assert not page.locator(".band-owner").first.is_visible()
    assert page.locator("#collectors-heading").is_visible()
    page.click("[data-set-mode=observe]")
    assert observe.is_visible()


def test_try_this_walks_the_seed(page: Any, base_url: str) -> None:
    login(page, base_url, "bob", "bob-demo")
    page.goto(f"{base_url}/diagram")
    page.click("[data-try=gpu]")
    wait_card(page, "gpu-gpu01-0")
    assert focused_id(page) == "gpu-gpu01-0"
    assert "allocated" in page.locator("#diagram-card").inner_text()  # alice's job, not bob's
    page.click("#diagram-card [data-open='node-gpu01']")
    wait_card(page, "node-gpu01")
    page.click("[data-try=vector]")
    wait_card(page, "vector-rdma-blind-spot")
    assert page.get_attribute("#diagram-page", "data-mode") == "threats"
    vector = page.locator("#diagram-card").inner_text()
    assert "RDMA blind spot" in vector and "bypasses the kernel" in vector
    assert focused_id(page) == "vector-rdma-blind-spot"
    page.click("[data-try=weights]")
    wait_card(page, "weights")
    text = page.locator("#diagram-card").inner_text()
    assert "eBPF on checkpoints" in text and "not configured" in text
    # the step player and the simulator the page links to exist
    for target in ("/step", "/simulate"):
        assert page.locator(f"a[href='{target}']").count() >= 1
        assert page.request.get(f"{base_url}{target}").status == 200


def test_live_values_update_without_reload_and_pause_when_hidden(
    page: Any, service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(diagram_routes, "POLL_SECONDS", 1)
    write_fleet(service.store, now=utcnow())
    with live_server(create_app(service)) as base_url:
        login(page, base_url, "admin", "admin-demo")
        page.goto(f"{base_url}/diagram?element=gpu-gpu01-7")
        page.evaluate("() => { window.__notReloaded = true; }")
        assert "st-idle" in (page.get_attribute("#gpu-gpu01-7", "class") or "")
        polls: list[str] = []
        page.on("request", lambda r: polls.append(r.url) if "/api/diagram/state" in r.url else None)
        # GPU 7 of gpu01 starts working for job 4410001
        row: dict[str, list[object]] = {field.name: [None] for field in GPU_SAMPLE_SCHEMA}
        row.update(
            ts=[utcnow()],
            node=["gpu01"],
            gpu=[7],
            job_id=["4410001"],
            reported_util_ratio=[0.95],
            sm_active_ratio=[0.85],
        )
        service.store.append("gpu_samples", pa.table(row, schema=GPU_SAMPLE_SCHEMA)).result()
        page.wait_for_function(
            "() => document.getElementById('gpu-gpu01-7').classList.contains('eff-4')",
            timeout=8000,
        )
        assert page.locator("#gpu-gpu01-7 .el-real").text_content() == "real 85 %"
        page.wait_for_function(
            "() => document.querySelector('#diagram-card').innerText.includes('real 85 %')",
            timeout=8000,
        )
        assert page.evaluate("() => window.__notReloaded") is True
        assert polls
        # a hidden tab does not poll
        page.evaluate(
            "() => { Object.defineProperty(document, 'hidden', {value: true, configurable: true});"
            " document.dispatchEvent(new Event('visibilitychange')); }"
        )
        page.wait_for_timeout(300)
        before = len(polls)
        page.wait_for_timeout(2500)
        assert len(polls) == before
        page.evaluate(
            "() => { Object.defineProperty(document, 'hidden', {value: false, configurable: true});"
            " document.dispatchEvent(new Event('visibilitychange')); }"
        )
        page.wait_for_timeout(500)
        assert len(polls) > before


def test_phone_width_scrolls_sideways_and_the_card_stays_readable(
    browser: Any, base_url: str
) -> None:
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
    )
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        login(page, base_url, "alice", "alice-demo")
        page.goto(f"{base_url}/diagram")
        box = page.locator("#diagram-scroll")
        sizes = box.evaluate("el => [el.scrollWidth, el.clientWidth]")
        assert sizes[0] > sizes[1] + 200, sizes
        assert page.locator(".swipe-hint").is_visible()
        page.evaluate("() => document.getElementById('diagram-scroll').scrollBy(600, 0)")
        assert box.evaluate("el => el.scrollLeft") > 0
        page.locator("#gpu-gpu01-1").tap()
        wait_card(page, "gpu-gpu01-1")
        # the page itself does not scroll sideways: the card fits the screen
        widths = page.evaluate(
            "() => [document.documentElement.scrollWidth, window.innerWidth,"
            " document.querySelector('#diagram-card .card').getBoundingClientRect().right]"
        )
        assert widths[0] <= widths[1] + 1 and widths[2] <= widths[1] + 1, widths
        assert "real 19 %" in page.locator("#diagram-card").inner_text()
        screenshot(page, "diagram-phone")
        page.evaluate("() => window.scrollTo(0, 0)")
        screenshot(page, "diagram-phone-top", full_page=False)
        page.locator("#diagram-card h2").scroll_into_view_if_needed()
        screenshot(page, "diagram-phone-card", full_page=False)
    finally:
        context.close()
    assert not errors, errors


def test_first_render_of_1024_gpus_under_one_second(
    page: Any, browser: Any, tmp_path: Path
) -> None:
    settings = Settings(
        store_path=tmp_path / "scale.duckdb",
        secret_key="test-secret",
        topology_path=bundled_topology("128x8-h100"),
    )
    scale = Service.open(settings, users=demo_users())
    try:
        nodes = [node.name for node in scale.topology.nodes]
        write_scaled_fleet(scale.store, nodes, now=utcnow())
        with live_server(create_app(scale)) as base_url:
            login(page, base_url, "admin", "admin-demo")
            page.goto(f"{base_url}/diagram")  # warm: the first request of a process imports
            timings = []
            for _ in range(3):
                started = time.perf_counter()
                page.goto(f"{base_url}/diagram", wait_until="load")
                wall_ms = (time.perf_counter() - started) * 1000
                timing = page.evaluate(
                    """() => new Promise(resolve => {
                      const n = performance.getEntriesByType('navigation')[0];
                      const done = paint => resolve({
                        response_end_ms: n.responseEnd,
                        dom_content_loaded_ms: n.domContentLoadedEventEnd,
                        load_ms: n.loadEventEnd,
                        first_contentful_paint_ms: paint ? paint.startTime : null,
                        bytes: n.transferSize});
                      new PerformanceObserver(list => {
                        const fcp = list.getEntries()
                          .find(e => e.name === 'first-contentful-paint');
                        if (fcp) { done(fcp); }
                      }).observe({type: 'paint', buffered: true});
                      setTimeout(() => done(null), 3000);
                    })"""
                )
                timing["wall_ms"] = wall_ms
                timings.append(timing)
            assert page.locator(".cell").count() == 1024
            assert page.locator("a.el.kind-node").count() == 128
            tiles_coloured = page.locator("a.el.kind-node.st-active").count()
            assert tiles_coloured > 64
            best = min(timings, key=lambda t: t["load_ms"])
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            (ARTIFACTS / "diagram-first-render.json").write_text(
                json.dumps({"topology": "128x8-h100", "runs": timings, "best": best}, indent=2)
                + "\n"
            )
            print(f"128-node diagram first render: {json.dumps(best)}")
            assert best["first_contentful_paint_ms"] is not None
            assert best["first_contentful_paint_ms"] < 1000, best
            assert best["load_ms"] < 1000, best
            screenshot(page, "diagram-128-desktop", full_page=False)
            # zoom into one node from its card
            page.click("#node-gpu017")
            wait_card(page, "node-gpu017")
            page.click("#diagram-card [data-zoom]")
            page.wait_for_url(f"{base_url}/diagram?node=gpu017")
            assert page.locator("#gpu-gpu017-3").get_attribute("data-kind") == "gpu"
            assert page.locator("#hca-gpu017-mlx5_3").count() == 1
            screenshot(page, "diagram-128-zoom-gpu017", full_page=False)
    finally:
        scale.close()
