"""The step player's expert mode in a real headless Chromium: a MoE step with the all-to-all
on a second stream plays, the hidden and exposed parts come from ``/api/step/expert``, every
control works from the keyboard, reduced motion is respected, no console errors (the ``page``
fixture fails the test on any), screenshots at desktop and phone widths."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hpcscope.serve.app import create_app
from hpcscope.service.core import Service
from hpcscope.service.settings import Settings
from tests.conftest import demo_users
from tests.support.browser import screenshot
from tests.support.servers import live_server

pytestmark = pytest.mark.browser
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    settings = Settings(
        store_path=tmp_path_factory.mktemp("expert") / "s.duckdb",
        secret_key="k",
        anonymous_diagram=True,
    )
    service = Service.open(settings, users=demo_users())
    with live_server(create_app(service)) as url:
        yield url
    service.close()


def attr(page: Any, name: str) -> str:
    return str(page.get_attribute("#player", f"data-{name}"))


def time_ms(page: Any) -> float:
    return float(attr(page, "time-ms"))


def api(page: Any, base_url: str, query: str = "") -> Any:
    return page.evaluate(
        "async (url) => (await fetch(url, {headers: {Accept: 'application/json'}})).json()",
        f"{base_url}/api/step/expert{query}",
    )


def test_expert_mode_plays_the_overlapped_all_to_all(page: Any, base_url: str) -> None:
    page.goto(f"{base_url}/step?mode=expert")
    page.wait_for_selector("#player[data-state=playing][data-mode=expert]")
    first = time_ms(page)
    page.wait_for_timeout(600)
    assert time_ms(page) > first, "the playhead does not move"
    assert page.get_attribute("#mode", "aria-pressed") == "true"
    assert page.is_visible("#overlap-on") and page.is_visible("#sum-a2a")
    body = api(page, base_url, "?straggler_gpu=2")
    slow = body["straggler"]
    # the page draws the server's step: 16 lanes, the second stream's all-to-all spans
    assert page.locator("#timeline .lane").count() == 16
    comm = page.locator("#timeline rect[data-stream=comm]")
    assert comm.count() == sum(len(lane["comm_segments"]) for lane in slow["lanes"]) == 16 * 8
    starts = page.eval_on_selector_all(
        "#timeline .lane[data-gpu='0'] rect[data-stream=comm]",
        "rs => rs.map(r => Number(r.getAttribute('x')))",
    )
    assert starts == sorted(starts) and len(starts) == 8
    assert float(attr(page, "hidden-ms")) == pytest.approx(
        slow["alltoall_hidden_seconds"] * 1e3, abs=1e-3
    )
    assert float(attr(page, "exposed-ms")) == pytest.approx(
        slow["alltoall_exposed_seconds"] * 1e3, abs=1e-3
    )
    assert "hidden" in page.inner_text("#sum-a2a") and "exposed" in page.inner_text("#sum-a2a")

    # pause, then step to the first all-to-all: chords among the 16 GPUs, NVLink and IB
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.keyboard.press("k")
    page.wait_for_selector("#player[data-state=paused]")
    page.keyboard.press("Home")
    page.keyboard.press("k")
    page.wait_for_selector("#player[data-state=paused]")
    for _ in range(40):
        if page.locator("#ring .a2a-chord").count():
            break
        page.keyboard.press("ArrowRight")
    assert page.locator("#ring .a2a-chord").count() == 16 * 15 // 2
    assert page.locator("#ring .a2a-chord[data-link=network]").count() == 8 * 8
    assert page.locator("#ring .ring-gpu.a2a-active").count() == 16
    assert "Expert all-to-all, MoE layer 1 of 4 (forward)" in page.inner_text("#ring-caption")
    assert "all-to-all" in page.inner_text("#player-status")
    screenshot(page, "step-player-expert-alltoall-desktop")

    # to the end of the step: the summary is the server's
    for _ in range(200):
        if attr(page, "state") == "ended":
            break
        page.keyboard.press("ArrowRight")
    assert attr(page, "state") == "ended"
    shown = float(page.inner_text("#sum-step").removesuffix(" ms"))
    assert shown == pytest.approx(slow["step_seconds"] * 1e3, abs=0.05)
    ratio = float(page.inner_text("#sum-wait-ratio").removesuffix(" %"))
    assert ratio == pytest.approx(slow["barrier_wait_ratio"] * 100, abs=0.05)
    screenshot(page, "step-player-expert-desktop")

    # O: the all-to-all after the GEMMs, nothing hidden, a longer step
    page.keyboard.press("o")
    page.wait_for_selector("#player[data-overlap=off][data-state=playing]")
    assert float(attr(page, "hidden-ms")) == 0
    serial = api(page, base_url, "?straggler_gpu=2&alltoall_overlap=false")["straggler"]
    assert float(attr(page, "exposed-ms")) == pytest.approx(
        serial["alltoall_exposed_seconds"] * 1e3, abs=1e-3
    )
    assert serial["step_seconds"] > slow["step_seconds"]
    page.keyboard.press("o")
    page.wait_for_selector("#player[data-overlap=on]")

    # E: back to the data-parallel step, the expert controls hide, the URL follows
    page.keyboard.press("e")
    page.wait_for_selector("#player[data-mode=data][data-state=playing]")
    assert page.locator("#timeline rect[data-stream=comm]").count() == 0
    assert not page.is_visible("#overlap-on") and not page.is_visible("#sum-a2a")
    assert "mode=expert" not in page.url
    assert page.get_attribute("#mode", "aria-pressed") == "false"
    # the mode button, by Tab and Enter
    for _ in range(40):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement && document.activeElement.id") == "mode":
            break
    else:
        raise AssertionError("#mode is not reachable with Tab")
    page.keyboard.press("Enter")
    page.wait_for_selector("#player[data-mode=expert][data-state=playing]")
    assert "mode=expert" in page.url


def test_expert_mode_respects_reduced_motion(page: Any, base_url: str) -> None:
    page.emulate_media(reduced_motion="reduce")
    page.goto(f"{base_url}/step?mode=expert")
    page.wait_for_selector("#player[data-state=ended][data-mode=expert]")
    end = time_ms(page)
    page.wait_for_timeout(300)
    assert time_ms(page) == end
    page.click("#play")
    page.wait_for_selector("#player[data-state=paused]")
    assert 0 < time_ms(page) < end
    screenshot(page, "step-player-expert-reduced-motion")


def test_expert_mode_on_a_phone(page: Any, base_url: str) -> None:
    page.set_viewport_size(PHONE)
    page.goto(f"{base_url}/step?mode=expert")
    page.wait_for_selector("#player[data-state=playing]")
    page.click("#play")
    page.wait_for_selector("#player[data-state=paused]")
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1, "the page scrolls sideways (only the timeline may)"
    screenshot(page, "step-player-expert-phone")


def test_simulator_takes_the_pipeline_and_expert_terms(page: Any, base_url: str) -> None:
    page.goto(f"{base_url}/simulate")
    page.wait_for_selector("#simulator[data-state=ready]")
    row = "#sim-table tbody tr[data-gpus='8']"
    assert page.inner_text(f"{row} td:nth-child(10)") == "0.00"  # no bubble by default

    def settle(before: int) -> None:
        page.wait_for_function(
            f"() => Number(document.querySelector('#simulator').dataset.requests) > {before}"
            " && document.querySelector('#simulator').dataset.state === 'ready'"
        )

    def type_into(element_id: str, text: str) -> None:
        before = int(page.get_attribute("#simulator", "data-requests") or 0)
        page.focus(f"#{element_id}")
        page.keyboard.press("Control+A")
        page.keyboard.type(text)
        settle(before)

    type_into("pipeline-stages", "4")
    type_into("microbatches", "8")
    # (p-1)/m of forward + backward: 3/8 x 30 ms
    assert page.inner_text(f"{row} td:nth-child(10)") == "11.25"
    type_into("alltoall-mb", "704.643072")
    type_into("ep-ranks", "8")
    type_into("moe-layers", "4")
    assert page.inner_text(f"{row} td:nth-child(9)") == "0.00"  # hidden inside the node
    before = int(page.get_attribute("#simulator", "data-requests") or 0)
    page.focus("#alltoall-overlap")
    page.keyboard.press("Space")  # overlap off: the whole all-to-all is exposed
    settle(before)
    body = page.evaluate(
        "async () => (await fetch('/api/simulate?gpus=8&steps=50&alltoall_bytes=704643072"
        "&expert_parallel_ranks=8&moe_layers=4&alltoall_overlap=false')).json()"
    )
    exposed = body["results"][0]["alltoall_exposed_seconds"] * 1e3
    assert page.inner_text(f"{row} td:nth-child(9)") == f"{exposed:.2f}"
    screenshot(page, "simulator-expert-pipeline")
