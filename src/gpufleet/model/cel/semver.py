"""Kubernetes' CEL semver library (`k8s.io/apiserver/pkg/cel/library/semverlib.go`), shimmed.

Parsing and ordering port `github.com/blang/semver/v4` (`Parse`, `Version.Compare`), which
Kubernetes uses for `semver()` and for version attributes; `semver(s, true)` ports
`normalizeAndParse`. As with quantities (`quantity.py`), a version travels through an
evaluation as tagged `bytes`, here "major.minor.patch[-prerelease]": build metadata is
dropped because blang's equality (`Version.EQ`) ignores it and no function reads it, so
equal versions are equal bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

TAG = b"\xffkubernetes.Semver:"
_NUMBERS = frozenset("0123456789")
_ALPHANUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-0123456789")
_UINT64 = 2**64

Raw = bytes | bytearray
"""A runtime value as cel-expr-python hands it to a function (`bytearray`) or gets it (`bytes`)."""


class SemverError(ValueError):
    """A runtime error of the semver library; its text is blang/semver's."""


@dataclass(frozen=True, slots=True)
class Parsed:
    major: int
    minor: int
    patch: int
    pre: tuple[int | str, ...]
    """Prerelease identifiers: ints for numeric ones, strings otherwise."""

    def canonical(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        return text + ("-" + ".".join(map(str, self.pre)) if self.pre else "")


def _only(text: str, allowed: frozenset[str]) -> bool:
    return all(ch in allowed for ch in text)


def _number(text: str, what: str) -> int:
    if not _only(text, _NUMBERS):
        raise SemverError(f"Invalid character(s) found in {what} number {_quote(text)}")
    if len(text) > 1 and text[0] == "0":
        raise SemverError(f"{what.capitalize()} number must not contain leading zeroes {_quote(text)}")
    if not text or int(text) >= _UINT64:
        raise SemverError(f"strconv.ParseUint: parsing {_quote(text)}: "
                          + ("invalid syntax" if not text else "value out of range"))
    return int(text)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@lru_cache(maxsize=4096)
def parse(text: str) -> Parsed:
    """blang/semver's strict `Parse`."""
    if not text:
        raise SemverError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise SemverError("No Major.Minor.Patch elements found")
    major, minor = _number(parts[0], "major"), _number(parts[1], "minor")
    patch_text, build, pre = parts[2], "", ""
    if "+" in patch_text:
        patch_text, build = patch_text.split("+", 1)
        build = "+" + build
    if "-" in patch_text:
        patch_text, pre = patch_text.split("-", 1)
        pre = "-" + pre
    patch = _number(patch_text, "patch")
    prerelease: list[int | str] = []
    for item in pre[1:].split(".") if pre else []:
        if not item:
            raise SemverError("Prerelease is empty")
        if _only(item, _NUMBERS):
            if len(item) > 1 and item[0] == "0":
                raise SemverError(f"Numeric PreRelease version must not contain leading zeroes {_quote(item)}")
            prerelease.append(int(item))
        elif _only(item, _ALPHANUM):
            prerelease.append(item)
        else:
            raise SemverError(f"Invalid character(s) found in prerelease {_quote(item)}")
    for item in build[1:].split(".") if build else []:
        if not item:
            raise SemverError("Build meta data is empty")
        if not _only(item, _ALPHANUM):
            raise SemverError(f"Invalid character(s) found in build meta data {_quote(item)}")
    return Parsed(major, minor, patch, tuple(prerelease))


def normalize_and_parse(text: str) -> Parsed:
    """Kubernetes' `normalizeAndParse`: a "v" prefix, leading zeroes and missing minor or patch
    numbers are accepted ("v1.02" is 1.2.0)."""
    text = text.removeprefix("v")
    parts = text.split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            part = part.lstrip("0")
            if not part or part[0] not in _NUMBERS:
                part = "0" + part
            parts[i] = part
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise SemverError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return parse(".".join(parts))


def compare_parsed(left: Parsed, right: Parsed) -> int:
    """blang/semver's `Version.Compare`."""
    for a, b in ((left.major, right.major), (left.minor, right.minor), (left.patch, right.patch)):
        if a != b:
            return 1 if a > b else -1
    if not left.pre or not right.pre:
        return (not left.pre) - (not right.pre)
    for a_id, b_id in zip(left.pre, right.pre):
        if a_id == b_id:
            continue
        if isinstance(a_id, int) != isinstance(b_id, int):
            return -1 if isinstance(a_id, int) else 1
        return 1 if a_id > b_id else -1  # type: ignore[operator]  # same kind, checked above
    return (len(left.pre) > len(right.pre)) - (len(left.pre) < len(right.pre))


def encode(version: Parsed) -> bytes:
    return TAG + version.canonical().encode()


@lru_cache(maxsize=4096)
def encode_text(text: str) -> bytes:
    """A version attribute as its runtime value; raises SemverError."""
    return encode(parse(text))


def decode(value: Raw) -> Parsed:
    if not value.startswith(TAG):
        raise SemverError("no such overload")
    return parse(bytes(value[len(TAG):]).decode())


def is_semver(value: object) -> bool:
    return isinstance(value, (bytes, bytearray)) and value.startswith(TAG)


# --- the library's functions (runtime side) -------------------------------------------------

def semver(text: str, normalize: bool = False) -> bytes:
    return encode(normalize_and_parse(text) if normalize else parse(text))


def is_semver_string(text: str, normalize: bool = False) -> bool:
    try:
        semver(text, normalize)
    except SemverError:
        return False
    return True


def major(value: Raw) -> int:
    return _int64(decode(value).major)


def minor(value: Raw) -> int:
    return _int64(decode(value).minor)


def patch(value: Raw) -> int:
    return _int64(decode(value).patch)


def _int64(number: int) -> int:
    """Kubernetes converts the uint64 to a CEL int with Go's wrap-around."""
    return number - _UINT64 if number >= 2**63 else number


def compare(value: Raw, other: Raw) -> int:
    return compare_parsed(decode(value), decode(other))
