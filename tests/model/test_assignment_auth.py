"""Signed assignments: what verifies, what does not, and key rings read from a mounted Secret."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.model import ModelError
from gpufleet.model.assignment_auth import KeyDir, KeyRing, load_keyring, sign, verify

K1, K2 = b"1" * 32, b"2" * 64
RING = KeyRing({"k1": K1, "k2": K2}, "k2")
ARGS = ("uid-1", "ns/p", "node-1", '{"node":"node-1","gpus":["GPU-a"],"milli":250}')


def test_the_schedulers_signature_verifies_and_names_its_key() -> None:
    s = sign(RING, *ARGS)
    assert s.startswith("v1:k2:") and verify(RING, s, *ARGS) is None
    old = sign(KeyRing({"k1": K1}, "k1"), *ARGS)
    assert verify(RING, old, *ARGS) is None  # a key still in the ring verifies after rotation


@pytest.mark.parametrize("i, other", [(0, "uid-2"), (1, "ns/q"), (2, "node-2"),
                                      (3, '{"node":"node-1","gpus":["GPU-b"],"milli":250}')],
                         ids=["another pod's UID (a copied signature)", "another pod's name", "another node",
                              "other devices"])
def test_a_signature_holds_for_its_pod_node_and_devices_only(i: int, other: str) -> None:
    s = sign(RING, *ARGS)
    changed = list(ARGS)
    changed[i] = other
    assert verify(RING, s, *changed) == "mismatch"


@pytest.mark.parametrize("signature, why", [(None, "missing"), ("", "missing"), ("v2:k2:" + "0" * 64, "malformed"),
                                            ("v1:k2:xyz", "malformed"), ("v1::" + "0" * 64, "malformed"),
                                            ("v1:k9:" + "0" * 64, "unknown-key"), ("v1:k2:" + "0" * 64, "mismatch")])
def test_what_a_pod_author_can_write_does_not_verify(signature: str | None, why: str) -> None:
    assert verify(RING, signature, *ARGS) == why


@settings(max_examples=200)
@given(st.text(max_size=80), st.text(max_size=20), st.text(max_size=20), st.text(max_size=20), st.text(max_size=80))
def test_no_crafted_input_verifies_or_crashes(signature: str, uid: str, pod: str, node: str, text: str) -> None:
    assert verify(RING, signature, uid, pod, node, text) is not None


@given(st.lists(st.text(max_size=8), min_size=4, max_size=4), st.lists(st.text(max_size=8), min_size=4, max_size=4))
def test_fields_cannot_be_shifted_between_each_other(a: list[str], b: list[str]) -> None:
    if a != b:
        assert verify(RING, sign(RING, *a), *b) is not None


def write_ring(d: Path, files: dict[str, bytes]) -> Path:
    d.mkdir(exist_ok=True)
    for name, data in files.items():
        (d / name).write_bytes(data)
    return d


def test_a_ring_from_a_secret_volume(tmp_path: Path) -> None:
    d = write_ring(tmp_path / "keys", {"k1": K1 + b"\n", "k2": K2, "active": b"k2\n"})
    (d / "..data").mkdir()  # a Secret volume's own bookkeeping is ignored
    ring = load_keyring(d)
    assert ring.active == "k2" and ring.keys == {"k1": K1, "k2": K2}
    one = load_keyring(write_ring(tmp_path / "one", {"k1": K1}))
    assert one.active == "k1"


@pytest.mark.parametrize("files, says", [
    ({}, "holds no key"),
    ({"k1": K1, "k2": K2}, "no file 'active'"),
    ({"k1": K1, "active": b"k3"}, "names 'k3', which is not one of the keys (k1)"),
    ({"k1": b"short"}, "k1: has 5 bytes; a key needs at least 32"),
    ({"k 1": K1}, "a key id is 1-63 letters"),
])
def test_an_unusable_ring_is_one_clear_error(tmp_path: Path, files: dict[str, bytes], says: str) -> None:
    d = write_ring(tmp_path / "keys", files)
    with pytest.raises(ModelError, match=re.escape(says)) as err:
        load_keyring(d)
    assert str(d) in str(err.value)
    with pytest.raises(ModelError, match="no such directory"):
        load_keyring(tmp_path / "nope")


def test_a_key_dir_follows_a_rotation_and_keeps_the_last_good_ring(tmp_path: Path) -> None:
    d = write_ring(tmp_path / "keys", {"k1": K1})
    now = [0.0]
    keys = KeyDir(d, recheck_s=10.0, clock=lambda: now[0])
    write_ring(d, {"k2": K2, "active": b"k2"})
    assert keys.ring().active == "k1"  # not yet looked again
    now[0] = 10.0
    assert keys.ring().active == "k2" and set(keys.ring().keys) == {"k1", "k2"}
    (d / "active").write_bytes(b"k9")  # a half-done edit
    now[0] = 20.0
    assert keys.ring().active == "k2" and keys.error is not None and "k9" in keys.error
    os.remove(d / "active")
    (d / "k2").unlink()
    now[0] = 30.0
    assert keys.ring().active == "k1" and keys.error is None
