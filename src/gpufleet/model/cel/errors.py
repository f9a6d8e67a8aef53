"""`CelError`, and the one place where the library's messages become Kubernetes' wording.

cel-cpp (under cel-expr-python) and cel-go (under Kubernetes) word the same runtime errors
differently; callers and tests match Kubernetes' text ("no such key: x"), so the handful that
selectors meet are rewritten here. Anything else passes through with cel-cpp's status code
stripped.
"""

from __future__ import annotations

import re

from gpufleet.model.errors import ModelError


class CelError(ModelError):
    """A selector that does not compile, or an evaluation that failed; `where` names the
    object and field ("DeviceClass gpu: spec.selectors[0].cel.expression")."""


_STATUS = re.compile(r"^[A-Z_]+: ")
_MISSING_KEY = re.compile(r'^Key not found in map : (?:"((?:[^"\\]|\\.)*)"|(.*))$', re.DOTALL)
_NO_OVERLOAD = re.compile(r"^No matching overloads found : (.*)$", re.DOTALL)


def missing_key(message: str) -> str | None:
    """The key of a cel-cpp "Key not found in map" error, or None for any other error."""
    match = _MISSING_KEY.match(_STATUS.sub("", message, count=1))
    if match is None:
        return None
    if match.group(1) is not None:
        return re.sub(r"\\(.)", r"\1", match.group(1))
    return match.group(2)


def runtime_message(message: str) -> str:
    """Kubernetes' (cel-go's) wording of a cel-cpp evaluation error."""
    text = _STATUS.sub("", message.strip(), count=1).removesuffix(" [UNKNOWN]")
    key = missing_key(text)
    if key is not None:
        return f"no such key: {key}"
    overload = _NO_OVERLOAD.match(text)
    if overload is not None and overload.group(1) == "<iter_range>":
        return "expected iterable type: a comprehension over a value that is neither a list nor a map"
    if overload is not None:
        return f"no such overload: {overload.group(1)}"
    if text == "divide by zero":
        return "division by zero"
    if text == "modulus by zero":
        return "modulus by zero"
    return text


def compile_message(message: str) -> str:
    """A cel-cpp checker or parser report, without its status code and trailing marker."""
    text = _STATUS.sub("", message.strip(), count=1)
    return re.sub(r"\s*\[[A-Z_]+\]$", "", text)
