"""The dashboard page in headless Chromium, on fleets built here (the live cluster's turn is
tests/live/test_dashboard_live.py): its numbers, filters, keyboard use, replay controls, and
names from tenants shown as text."""

from __future__ import annotations

from types import MappingProxyType
from typing import Iterator

import pytest

from gpufleet.model import PodUid
from gpufleet.testing import make_node
from gpufleet.web.fleet import Fleet, FleetEvent, PodRef, Waiting
from gpufleet.web.server import DashboardServer
from gpufleet.web.sources import StaticSource
from gpufleet.web.view import document

from .browser import Browser, chromium, open_page, screenshot, text, wait_js
from .test_view import fleet, place


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as b:
        yield b


def serve(*fleets: Fleet) -> DashboardServer:
    return DashboardServer(StaticSource(list(fleets)), port=0).start()


def cards(page: object) -> dict[str, str]:
    ids = ("sum-nodes", "sum-ready", "sum-gpus", "sum-allocated", "sum-free", "sum-unhealthy", "sum-mig",
           "sum-mig-used", "sum-running", "sum-pending")
    return {i: text(page, i) for i in ids}  # type: ignore[arg-type]


def test_the_cards_show_the_documents_numbers(browser: Browser) -> None:
    server = serve(fleet())
    try:
        page = open_page(browser, server.url)
        s = document(fleet())["summary"]
        assert cards(page) == {"sum-nodes": "3", "sum-ready": "2", "sum-gpus": str(s["gpus"]),
                               "sum-allocated": "3.75", "sum-free": "1", "sum-unhealthy": "1", "sum-mig": "2",
                               "sum-mig-used": "1", "sum-running": "6", "sum-pending": "3"}
        rows = page.locator("#pools tbody tr").all_inner_texts()
        assert len(rows) == 3 and any(r.split("\t")[:4] == ["train", "H100-80GB", "1", "4"] for r in rows)
        assert "2 × Unschedulable: Insufficient GPU, node(s) didn't match Pod's node affinity/selector" in \
            page.locator("#pending").inner_text()
        screenshot(page, "dashboard-small")
    finally:
        server.stop()


def test_filters_narrow_every_panel_and_live_in_the_address(browser: Browser) -> None:
    server = serve(fleet())
    try:
        page = open_page(browser, server.url)
        page.select_option("#f-pool", "train")
        assert (text(page, "sum-nodes"), text(page, "sum-gpus"), text(page, "sum-allocated")) == ("1", "4", "2.75")
        assert "pool=train" in page.evaluate("location.hash")
        page.select_option("#f-pool", "")
        page.select_option("#f-namespace", "web")
        assert text(page, "sum-pending") == "2"
        assert text(page, "sum-allocated") == "0" and text(page, "sum-running") == "0"
        page.select_option("#f-namespace", "")
        page.select_option("#f-queue", "team-a")
        assert text(page, "sum-pending") == "1" and text(page, "sum-running") == "4"
        assert text(page, "sum-allocated") == "2.75"  # u1's 2 GPUs and u2, u3's shares of GPU 2
        assert [r.split("\t")[0] for r in page.locator("#queues tbody tr").all_inner_texts()] == []
        # the address keeps the filters: a reload shows the same view
        page.reload()
        page.wait_for_selector("body[data-ready='1']")
        assert page.locator("#f-queue").input_value() == "team-a" and text(page, "sum-pending") == "1"
    finally:
        server.stop()


def test_a_node_opens_from_the_keyboard(browser: Browser) -> None:
    server = serve(fleet())
    try:
        page = open_page(browser, server.url)
        page.locator("#f-pool").focus()
        for _ in range(4):  # pool, model, queue, namespace selects, then the node field
            page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.id") == "node-name"
        page.keyboard.type("a")
        page.keyboard.press("Enter")
        assert page.locator("#node").is_visible()
        assert "a · pool train · H100-80GB" in text(page, "node-title")
        rows = page.locator("#node tbody tr").all_inner_texts()
        assert "ml/u2, ml/u3" in rows[2] and "unhealthy" in rows[3]
        assert "node=a" in page.evaluate("location.hash")
        page.locator("#node-name").fill("b")
        page.keyboard.press("Enter")
        assert "3g.40gb: free; 3g.40gb: ml/u4" in page.locator("#node tbody tr").all_inner_texts()[1]
    finally:
        server.stop()


def test_the_map_opens_a_node_on_click(browser: Browser) -> None:
    server = serve(fleet())
    try:
        page = open_page(browser, server.url)
        box = page.locator("#map").bounding_box()
        assert box is not None
        page.mouse.click(box["x"] + 4, box["y"] + 4)  # the first tile: node a
        assert text(page, "node-title").startswith("a ·")
    finally:
        server.stop()


def test_names_from_tenants_are_shown_as_text_never_run(browser: Browser) -> None:
    evil = '<img src=x onerror="window.__xss=1">'
    node = make_node("n").gpus(1).label("karpenter.sh/nodepool", "pool").build()
    f = Fleet("test", 0.0, (node,), (place("u", "n", (0,)),),
              MappingProxyType({PodUid("u"): PodRef(f"ns/{evil}", "ns", f"q{evil}")}),
              (Waiting(f"ns/{evil}", "ns", "default", "1 GPU", "Unschedulable", f"queue x: {evil}"),),
              events=(FleetEvent(0.0, "Preempted", f"ns/{evil}", evil),))
    server = serve(f)
    try:
        page = open_page(browser, server.url)
        page.locator("#node-name").fill("n")
        page.keyboard.press("Enter")
        page.locator("#pending details").first.click()
        page.wait_for_timeout(200)
        assert page.evaluate("window.__xss") is None
        assert page.locator("img").count() == 0
        assert evil in page.locator("#pending").inner_text() and evil in page.locator("#events").inner_text()
        assert evil in page.locator("#node").inner_text()
    finally:
        server.stop()


def test_a_replay_steps_through_its_frames(browser: Browser) -> None:
    frames = [Fleet("replay: t", 60.0 * i, (make_node("a").gpus(4).build(),),
                    tuple(place(f"p{k}", "a", (k,)) for k in range(i)), simulated=True) for i in range(4)]
    server = serve(*frames)
    try:
        page = open_page(browser, server.url)
        assert page.locator("#replay").is_visible()
        assert text(page, "sum-allocated") == "3" and "t = 0h 03m 00s (simulated)" in text(page, "source")
        page.locator("#frame").focus()
        page.keyboard.press("ArrowLeft")
        wait_js(page, "() => window.gpufleetDashboard.frame === 2")
        assert text(page, "sum-allocated") == "2"
        page.keyboard.press("Home")
        wait_js(page, "() => window.gpufleetDashboard.frame === 0")
        page.locator("#play").click()
        wait_js(page, "() => window.gpufleetDashboard.frame === 3", 5.0)
        wait_js(page, "() => document.getElementById('play').getAttribute('aria-pressed') === 'false'", 3.0)
        assert text(page, "play") == "Play" and text(page, "sum-allocated") == "3"  # stopped at the end
    finally:
        server.stop()


def test_text_has_readable_contrast(browser: Browser) -> None:
    """Every text element's colour against the background it sits on: at least WCAG AA's 4.5:1."""
    server = serve(fleet())
    try:
        page = open_page(browser, server.url)
        worst = page.evaluate("""() => {
          const rgb = (s) => s.match(/[\\d.]+/g).slice(0, 4).map(Number);
          const lum = ([r, g, b]) => [r, g, b].map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
                                              .reduce((a, v, i) => a + v * [0.2126, 0.7152, 0.0722][i], 0);
          const bg = (e) => { for (; e; e = e.parentElement) { const c = rgb(getComputedStyle(e).backgroundColor);
                                if (c.length < 4 || c[3] > 0) return c; } return [255, 255, 255]; };
          let worst = [99, ""];
          for (const e of document.querySelectorAll("body *")) {
            if (!e.childNodes.length || ![...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())) continue;
            if (!e.offsetParent && e.tagName !== "BODY") continue;
            const a = lum(rgb(getComputedStyle(e).color)), b = lum(bg(e));
            const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
            if (ratio < worst[0]) worst = [ratio, e.tagName + " " + e.textContent.trim().slice(0, 30)];
          }
          return worst; }""")
        assert worst[0] >= 4.5, worst
    finally:
        server.stop()
