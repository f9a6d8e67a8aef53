"""Fuzz the dashboard's HTTP handler (`web.server`): paths, query parameters and raw requests."""

from __future__ import annotations

from urllib.parse import quote

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz import targets
from tests.fuzz.strategies import WEIRD_TEXT, fuzz_settings

PATHS = ["/", "/api/fleet", "/api/frames", "/api/stream", "/healthz", "/app.js", "/app.css", "/favicon.ico", "/x"]
values = st.one_of(st.sampled_from(WEIRD_TEXT), st.text(max_size=12), st.integers(min_value=-10**30, max_value=10**30).map(str))


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    method = draw(st.sampled_from(["GET", "GET", "HEAD", "POST", "DELETE", "get", "BREW"]))
    query = "&".join(f"{quote(draw(st.sampled_from(['frame', 'frame', 'x', ''])))}={quote(draw(values))}"
                     for _ in range(draw(st.integers(min_value=0, max_value=3))))
    path = draw(st.sampled_from(PATHS)) + (f"?{query}" if query else "")
    if draw(st.booleans()):
        path = draw(st.sampled_from(PATHS)) + "?" + draw(st.text(max_size=30))
    return f"{method} {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode("utf-8", "surrogatepass")


@fuzz_settings(200)
@given(requests())
def test_requests_get_an_answer_and_a_bad_frame_a_one_line_400(raw: bytes) -> None:
    targets.check_dashboard(raw)


@fuzz_settings(100)
@given(st.binary(max_size=300))
def test_raw_bytes_never_crash_the_handler(raw: bytes) -> None:
    targets.check_dashboard(raw)
