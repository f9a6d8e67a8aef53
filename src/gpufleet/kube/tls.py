"""TLS contexts whose ALPN list is set once, before any connection uses them.

httpcore sets the ALPN protocols on its `ssl.SSLContext` for every new connection
(`ssl_context.set_alpn_protocols`). Each call frees the buffer OpenSSL keeps for them, while
another thread's new connection may be copying that buffer: CPython calls `SSL_new` and runs
the handshake without the GIL. A client whose watches and requests open connections from
several threads (the scheduler's `Rest`, the agent's lightkube client), or a second client
sharing the context (`Rest`'s `KeepAlive`), then sends corrupted ClientHellos: under a stress
loop on this machine's Python 3.11.7 and OpenSSL 3.0.19, 2–3 % of handshakes were refused
with `TLSV1_ALERT_DECODE_ERROR`, and a use after free is the likely cause of the scheduler's
rare segfault in a handshake at start-up. `settle` sets the list once; setting the same list
again is then a no-op, so the buffer is never freed while in use.
"""

from __future__ import annotations

import ssl
from typing import Iterable

HTTP_1_1 = ("http/1.1",)
"""What httpcore asks for without HTTP/2, and what `http.client` speaks."""


class SettledAlpn(ssl.SSLContext):
    """An SSLContext on which setting the ALPN list it already has does nothing."""

    _alpn: tuple[str, ...] | None = None

    def set_alpn_protocols(self, alpn_protocols: Iterable[str]) -> None:
        wanted = tuple(alpn_protocols)
        if wanted != self._alpn:  # a different list: set (and free the old one) as ssl does
            super().set_alpn_protocols(wanted)
            self._alpn = wanted


def settle(context: ssl.SSLContext, protocols: tuple[str, ...] = HTTP_1_1) -> SettledAlpn:
    """`context` itself, made a `SettledAlpn` with `protocols` set: call it before the context
    is shared between threads. Its certificates and verification settings are unchanged (the
    class adds no state to the C object, so the instance's class can be swapped in place)."""
    context.__class__ = SettledAlpn
    assert isinstance(context, SettledAlpn)
    context.set_alpn_protocols(protocols)
    return context
