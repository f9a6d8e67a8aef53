"""Object metadata the server owns: names, uids, timestamps, generation; time formats.

`now_rfc3339()` is the `metav1.Time` format (seconds), `now_micro()` the `MicroTime` one
(exactly six fractional digits), which is also the only form `check_micro_time` accepts,
as kube-apiserver's decoder does.
"""

from __future__ import annotations

import calendar
import random
import re
import time
import uuid
from typing import Any

from gpufleet.testing.apiserver.errors import ApiError, invalid

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_MICRO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$")
_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"
"""The alphabet of generateName suffixes (apimachinery's utilrand, no vowels)."""


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def now_micro() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


def parse_time(text: str) -> float | None:
    """Seconds since the epoch of an RFC 3339 UTC time, or None."""
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z$", text or "")
    if not m:
        return None
    return calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")) + float(m.group(2) or 0)


def check_micro_time(value: Any, kind: str, version: str) -> None:
    """400 like the real decoder when a MicroTime lacks exactly six fractional digits."""
    if value is None:
        return
    if not isinstance(value, str) or not _MICRO.match(value):
        raise ApiError(400, f'{kind} in version "{version}" cannot be handled as a {kind}: parsing time '
                            f'{value!r} as "2006-01-02T15:04:05.000000Z07:00": cannot parse as ".000000"',
                       "BadRequest")


def assign_name(meta: dict[str, Any], kind: str, group: str) -> None:
    """Fill `name` from `generateName` (5 random characters) or 422 when neither is set."""
    if not meta.get("name"):
        prefix = meta.get("generateName")
        if not prefix:
            raise invalid(kind, group, "", [("metadata.name", "FieldValueRequired",
                                              "Required value: name or generateName is required")])
        meta["name"] = prefix + "".join(random.choice(_SUFFIX_CHARS) for _ in range(5))


def check_name(name: str, kind: str, group: str, *, label: bool = False) -> None:
    pattern, what = (_LABEL, "RFC 1123 label") if label else (_SUBDOMAIN, "RFC 1123 subdomain")
    if not pattern.match(name) or len(name) > (63 if label else 253):
        raise invalid(kind, group, name, [(
            "metadata.name", "FieldValueInvalid",
            f'Invalid value: "{name}": a lowercase {what} must consist of lower case alphanumeric characters, '
            "'-' or '.', and must start and end with an alphanumeric character")])


def stamp_new(meta: dict[str, Any]) -> None:
    """Server-owned fields of a new object."""
    meta["uid"] = str(uuid.uuid4())
    meta["creationTimestamp"] = now_rfc3339()
    meta["generation"] = 1
    for owned in ("resourceVersion", "deletionTimestamp", "selfLink"):
        meta.pop(owned, None)


def keep_owned(new_meta: dict[str, Any], old_meta: dict[str, Any]) -> None:
    """On update, fields the client cannot change keep their stored values."""
    for owned in ("uid", "creationTimestamp", "generation", "namespace", "name"):
        if owned in old_meta:
            new_meta[owned] = old_meta[owned]
        else:
            new_meta.pop(owned, None)
