"""Headless Debian Chromium under Playwright, for the dashboard's browser tests and its benchmark.

Playwright's own browser download is not used (it comes from a CDN this machine cannot reach):
Playwright drives the `chromium` package from Debian's archive (`/usr/bin/chromium`, or
`$GPUFLEET_CHROMIUM`), installed by `make test` through `hack/chromium.sh`, with the flags that
keep it off the network. Playwright is a development dependency, imported only when a browser
is launched.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from playwright.sync_api import Browser

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
"""As root, Chromium needs --no-sandbox; without the background-networking flags it keeps trying
Google's hosts, which this machine's closed network refuses."""


def chromium_path() -> Path:
    return Path(os.environ.get("GPUFLEET_CHROMIUM", "/usr/bin/chromium"))


@contextmanager
def chromium() -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium_path()), args=list(FLAGS))
        try:
            yield browser
        finally:
            browser.close()
