"""The dashboard's browser tests' helpers: a page opened on the first view, waiting without
eval, screenshots. The browser is `gpufleet.testing.browser.chromium` (Debian's, under
Playwright); without it the tests are skipped with that reason, except under CI, where a
missing browser is a failure.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gpufleet.testing.browser import chromium, chromium_path

CHROMIUM = chromium_path()
SCREENSHOTS = Path(__file__).resolve().parents[2] / "reports" / "screenshots"
"""Where the tests save what they saw (reports/ is not committed)."""

if not CHROMIUM.exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"{CHROMIUM} is missing; `make test` installs Debian's chromium (hack/chromium.sh)")
    pytest.skip(f"no browser at {CHROMIUM}: `make test` installs Debian's chromium (hack/chromium.sh), "
                "or set GPUFLEET_CHROMIUM", allow_module_level=True)

from playwright.sync_api import Browser, Page  # noqa: E402  (after the skip)

__all__ = ["Browser", "chromium", "open_page", "screenshot", "text", "wait_js"]


def open_page(browser: Browser, url: str, *, width: int = 1400, height: int = 1000) -> Page:
    """A fresh page on `url`, failing the test on any script error, once the first view is drawn."""
    page = browser.new_page(viewport={"width": width, "height": height})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=20_000)
    assert not errors, errors
    page.set_default_timeout(10_000)
    setattr(page, "errors", errors)
    return page


def wait_js(page: Page, predicate: str, timeout_s: float = 10.0) -> None:
    """Wait until `predicate` (a JavaScript function source) returns true in the page. Polled from
    here with `evaluate`: Playwright's `wait_for_function` evaluates strings, which the page's
    Content-Security-Policy (no 'unsafe-eval') rightly refuses."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(predicate):
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {timeout_s} s: {predicate}")
        page.wait_for_timeout(50)


def text(page: Page, element_id: str) -> str:
    return page.locator(f"#{element_id}").inner_text().strip()


def screenshot(page: Page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
