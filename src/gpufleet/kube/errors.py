"""Errors at the Kubernetes API edge, whose types carry the retry semantics (kopf's design).

    KubeError                    a call to the API server failed; `kind` names the failure
    ├── TemporaryError(delay_s)  retrying may help: 409 Conflict, 410 Gone, 429 Too Many
    │                            Requests, any 5xx, timeouts, refused or broken connections
    └── PermanentError           retrying cannot help: 400, 401, 403, 404, 422 and every
        │                        other 4xx, an unsupported URL scheme
        └── KubeConfigError      no usable kubeconfig or in-cluster config (a user mistake)

`api_errors(what)` is the one place where lightkube's and httpx's exceptions become these
(httpx's `map_httpcore_exceptions`, kopf's `clients/errors.py`). It chains the original
exception, so a debug log still has the server's reply. Nothing of lightkube or httpx
crosses this boundary, and nothing of this package crosses into the agent: the CLI turns
a `KubeError` into the agent's own `KubeAccessError`.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import httpx2
import msgspec
import lightkube

TEMPORARY_STATUS = frozenset({409, 410, 429})
"""Besides every 5xx: a write lost a race (409), a resourceVersion expired (410), the server
or a PodDisruptionBudget asks us to slow down (429)."""

RBAC_HINT = ("the agent's service account needs list on pods, get and patch on nodes, patch on "
             "nodes/status and create on events.k8s.io events (deploy/agent/rbac.yaml)")


class KubeError(Exception):
    """A failed API call. `kind` groups failures for logging ("HTTP 500", "ReadTimeout")."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class TemporaryError(KubeError):
    """Worth retrying; `delay_s` is the server's Retry-After when it sent one."""

    def __init__(self, message: str, kind: str, delay_s: float | None = None) -> None:
        super().__init__(message, kind)
        self.delay_s = delay_s


class PermanentError(KubeError):
    """Retrying the same request cannot succeed; a person has to change something."""


class KubeConfigError(PermanentError):
    """The kubeconfig or in-cluster config cannot be used; the message names the file."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "config")


@contextmanager
def api_errors(what: str) -> Iterator[None]:
    """Translate what the block raises into the tree above, prefixed with `what` ("patch node n1")."""
    try:
        yield
    except lightkube.ApiError as exc:
        status = exc.status
        raise _for_status(what, status.code or exc.response.status_code, status.reason or "",
                          status.message or "", exc.response) from exc
    except httpx2.HTTPStatusError as exc:  # a reply without a Kubernetes Status body (a proxy's, say)
        raise _for_status(what, exc.response.status_code, exc.response.reason_phrase,
                          exc.response.text[:200], exc.response) from exc
    except KeyError as exc:
        # lightkube reads the reply's Content-Type with [] while raising for an error status,
        # so an error reply without that header (a load balancer's bare 502) surfaces as a
        # KeyError whose context is the real HTTPStatusError. Anything else is a bug: re-raise.
        context = exc.__context__
        if not isinstance(context, httpx2.HTTPStatusError):
            raise
        raise _for_status(what, context.response.status_code, context.response.reason_phrase,
                          "", context.response) from context
    except httpx2.UnsupportedProtocol as exc:
        raise PermanentError(f"{what}: {exc}", type(exc).__name__) from exc
    except httpx2.TransportError as exc:  # timeouts, refused or reset connections, TLS failures
        raise TemporaryError(f"{what}: {type(exc).__name__}: {exc or 'no detail'}", type(exc).__name__) from exc
    except msgspec.DecodeError as exc:  # a reply that is not the JSON object it should be (a proxy's page, cut short)
        raise TemporaryError(f"{what}: the reply is not a JSON object: {exc}", "malformed reply") from exc
    except lightkube.ConfigError as exc:  # e.g. the service-account token file vanished
        raise KubeConfigError(f"{what}: {exc}") from exc


def _for_status(what: str, code: int, reason: str, message: str, response: httpx2.Response) -> KubeError:
    text = f"{what}: {code} {reason or response.reason_phrase}" + (f": {message}" if message else "")
    kind = f"HTTP {code}"
    if code in TEMPORARY_STATUS or code >= 500:
        return TemporaryError(text, kind, _retry_after(response))
    if code in (401, 403):
        text += f" ({RBAC_HINT})" if code == 403 else " (check the kubeconfig's credentials or the token)"
    return PermanentError(text, kind)


def _retry_after(response: httpx2.Response) -> float | None:
    """Retry-After in seconds; the HTTP-date form is not used by the API server and is ignored."""
    value = response.headers.get("Retry-After", "")
    return float(value) if value.isdigit() else None
