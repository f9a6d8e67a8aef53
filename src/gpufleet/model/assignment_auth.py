"""Signed GPU assignments: what lets the node agent tell the scheduler's choice from a pod author's.

The scheduler writes a pod's devices in `gpufleet.io/gpu-assignment`. A pod author can write
that annotation too, and can create a pod with `spec.nodeName` already set, so neither the
annotation nor the binding proves that gpufleet chose the devices. The scheduler therefore
also writes `gpufleet.io/gpu-assignment-signature`:

    v1:<key id>:<hex HMAC-SHA256 over "gpufleet-assignment/v1", pod UID, namespace/name, node, assignment>

with a key that only the scheduler and the agents can read (a Secret mounted into both, never
readable by tenants). The pod's UID is in the message, and the API server sets UIDs, so a
signature copied from another pod does not verify; the node and the assignment are in it, so
neither can be changed. Keys rotate without downtime: a key ring holds several keys by id,
the scheduler signs with the `active` one and the agents accept any in the ring.

A key ring is a directory of files, as a mounted Secret gives it: one file per key, named by
its id (letters, digits, `-`, `_`, `.`), holding at least 32 bytes of secret (e.g. `openssl
rand -hex 32`), and a file `active` naming the key to sign with (optional when there is one
key). Names starting with `.` (the volume's own bookkeeping) are ignored.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Mapping

from gpufleet.model.errors import ModelError

log = logging.getLogger(__name__)
SIGNATURE_ANNOTATION = "gpufleet.io/gpu-assignment-signature"
VERSION = "v1"
DOMAIN = b"gpufleet-assignment/v1"
MIN_KEY_BYTES = 32
ACTIVE = "active"
_KEY_ID = re.compile(r"^[A-Za-z0-9_.-]{1,63}$")


@dataclass(frozen=True, slots=True)
class KeyRing:
    keys: Mapping[str, bytes]
    active: str
    """The id of the key to sign with; one of `keys`."""

    def __post_init__(self) -> None:
        if self.active not in self.keys:
            raise ModelError("assignment keys: active", f"names {self.active!r}, which is not one of the keys "
                                                        f"({', '.join(sorted(self.keys)) or 'none'})")
        for key_id, secret in self.keys.items():
            if not _KEY_ID.match(key_id) or key_id == ACTIVE:
                raise ModelError(f"assignment keys: {key_id!r}", "a key id is 1-63 letters, digits, '-', '_' or '.', "
                                                                 "and not 'active'")
            if len(secret) < MIN_KEY_BYTES:
                raise ModelError(f"assignment keys: {key_id}", f"has {len(secret)} bytes; a key needs at least "
                                                               f"{MIN_KEY_BYTES} (openssl rand -hex 32)")


def _message(pod_uid: str, pod_key: str, node: str, assignment: str) -> bytes:
    # Length-prefixed fields: no two different tuples give the same bytes.
    parts = [DOMAIN, *(s.encode() for s in (pod_uid, pod_key, node, assignment))]
    return b"".join(len(p).to_bytes(4, "big") + p for p in parts)


def sign(ring: KeyRing, pod_uid: str, pod_key: str, node: str, assignment: str) -> str:
    """The signature annotation's value for this pod (UID and `namespace/name`), node and encoded assignment."""
    mac = hmac.new(ring.keys[ring.active], _message(pod_uid, pod_key, node, assignment), hashlib.sha256)
    return f"{VERSION}:{ring.active}:{mac.hexdigest()}"


def verify(ring: KeyRing, signature: str | None, pod_uid: str, pod_key: str, node: str, assignment: str) -> str | None:
    """None if `signature` is the scheduler's for exactly this pod, node and assignment; else why not,
    in a few words (for an event and a metric label: missing, malformed, unknown-key, mismatch)."""
    if not signature:
        return "missing"
    version, _, rest = signature.partition(":")
    key_id, _, digest = rest.partition(":")
    if version != VERSION or not key_id or not re.fullmatch(r"[0-9a-f]{64}", digest):
        return "malformed"
    secret = ring.keys.get(key_id)
    if secret is None:
        return "unknown-key"
    want = hmac.new(secret, _message(pod_uid, pod_key, node, assignment), hashlib.sha256).hexdigest()
    return None if hmac.compare_digest(want, digest) else "mismatch"


def load_keyring(directory: Path) -> KeyRing:
    """The key ring in `directory` (a mounted Secret); a `ModelError` naming the file if it is unusable."""
    if not directory.is_dir():
        raise ModelError(f"assignment keys {directory}", "no such directory")
    keys: dict[str, bytes] = {}
    active: str | None = None
    for path in sorted(directory.iterdir()):
        if path.name.startswith(".") or not path.is_file():
            continue
        data = path.read_bytes().strip()
        if path.name == ACTIVE:
            active = data.decode(errors="replace")
        else:
            keys[path.name] = data
    if not keys:
        raise ModelError(f"assignment keys {directory}", "holds no key")
    if active is None:
        if len(keys) != 1:
            raise ModelError(f"assignment keys {directory}", f"holds {len(keys)} keys and no file '{ACTIVE}' naming "
                                                             "the one to sign with")
        active = next(iter(keys))
    try:
        return KeyRing(MappingProxyType(keys), active)
    except ModelError as exc:
        raise ModelError(f"assignment keys {directory}: {exc.where}", exc.problem) from None


class KeyDir:
    """A key ring read from `directory` again at most every `recheck_s` (a mounted Secret changes in
    place when it is rotated). The first read must succeed; a later bad read keeps the last good
    ring and sets `error`, so a half-written rotation cannot stop binding or allocation."""

    def __init__(self, directory: Path, recheck_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.directory, self.recheck_s, self._clock = directory, recheck_s, clock
        self._lock = threading.Lock()
        self._ring = load_keyring(directory)
        self._read_at = clock()
        self.error: str | None = None

    def ring(self) -> KeyRing:
        with self._lock:
            now = self._clock()
            if now - self._read_at >= self.recheck_s:
                self._read_at = now
                try:
                    self._ring, self.error = load_keyring(self.directory), None
                except (ModelError, OSError) as exc:
                    if str(exc) != self.error:
                        log.warning("keeping the assignment keys read before: %s", exc)
                    self.error = str(exc)
            return self._ring
