"""Kubernetes `Status` errors: what the real API server answers when a request fails.

Every failure inside the test server is an `ApiError` carrying the HTTP code, the `reason`
(`NotFound`, `AlreadyExists`, `Conflict`, `Invalid`, ...) and a message worded like
kube-apiserver's, so client code meets the same bodies it will meet in a cluster. The HTTP
layer turns it into a `v1 Status` object; nothing else is sent for an error.
"""

from __future__ import annotations

from typing import Any

REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
           406: "NotAcceptable", 409: "Conflict", 410: "Expired", 415: "UnsupportedMediaType", 422: "Invalid",
           429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}


class ApiError(Exception):
    """A request the server refuses; `status()` is the body the client receives."""

    def __init__(self, code: int, message: str, reason: str | None = None, *,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details

    def status(self) -> dict[str, Any]:
        return status_body(self.code, self.message, self.reason, self.details)


def status_body(code: int, message: str, reason: str | None = None,
                details: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "reason": reason or REASONS.get(code, "Unknown"), "code": code}
    if details:
        body["details"] = details
    return body


def success_body(code: int = 201) -> dict[str, Any]:
    """The `Status` a subresource POST (binding, eviction) answers with on success."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}


def resource_name(group: str, plural: str) -> str:
    """`pods`, `leases.coordination.k8s.io`: how kube-apiserver names a resource in messages."""
    return f"{plural}.{group}" if group else plural


def not_found(group: str, plural: str, name: str) -> ApiError:
    qualified = resource_name(group, plural)
    return ApiError(404, f'{qualified} "{name}" not found',
                    details={"name": name, "group": group, "kind": plural})


def already_exists(group: str, plural: str, name: str) -> ApiError:
    qualified = resource_name(group, plural)
    return ApiError(409, f'{qualified} "{name}" already exists', "AlreadyExists",
                    details={"name": name, "group": group, "kind": plural})


def conflict(group: str, plural: str, name: str, why: str) -> ApiError:
    qualified = resource_name(group, plural)
    return ApiError(409, f'Operation cannot be fulfilled on {qualified} "{name}": {why}', "Conflict",
                    details={"name": name, "group": group, "kind": plural})


def stale(group: str, plural: str, name: str) -> ApiError:
    return conflict(group, plural, name,
                    "the object has been modified; please apply your changes to the latest version and try again")


def invalid(kind: str, group: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid; `causes` are (field path, cause reason, message) like field.ErrorList."""
    qualified = f"{kind}.{group}" if group else kind
    text = ", ".join(f"{field}: {message}" for field, _, message in causes)
    summary = f"[{text}]" if len(causes) > 1 else text
    return ApiError(422, f'{qualified} "{name}" is invalid: {summary}', "Invalid",
                    details={"name": name, "group": group, "kind": kind,
                             "causes": [{"reason": reason, "message": message, "field": field}
                                        for field, reason, message in causes]})


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, "BadRequest")
