"""Kubernetes' CEL regex library (`k8s.io/apiserver/pkg/cel/library/regex.go`), shimmed.

`<string>.find(<regex>)` and `<string>.findAll(<regex> [, <limit>])` with RE2 (google-re2,
the engine cel-cpp's own `matches` uses and the syntax of Go's `regexp`): linear-time
matching, which the cost model assumes, and no backtracking constructs. `findAll` walks the
matches the way Go's `FindAllString` does (an empty match right after a match is skipped).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False


class RegexError(ValueError):
    """An invalid pattern; the text is Kubernetes' "Illegal regex: ..."."""


@lru_cache(maxsize=1024)
def compiled(pattern: str) -> Any:
    """The RE2 program for `pattern`; raises RegexError."""
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        detail = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise RegexError(f"Illegal regex: error parsing regexp: {detail}") from None


def find(text: str, pattern: str) -> str:
    match = compiled(pattern).search(text)
    return "" if match is None else str(match.group())


def find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    regex, out = compiled(pattern), list[str]()
    pos, previous_end = 0, -1
    while (limit < 0 or len(out) < limit) and pos <= len(text):
        match = regex.search(text, pos)
        if match is None:
            break
        start, end = match.start(), match.end()
        accept = True
        if end == start:
            accept = start != previous_end  # Go skips an empty match abutting the previous one
            pos = end + 1
        else:
            pos = end
        previous_end = end
        if accept:
            out.append(str(match.group()))
    return out
