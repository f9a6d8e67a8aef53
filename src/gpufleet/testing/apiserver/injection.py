"""Failure injection and the request log, for testing clients' error handling.

`Rules.inject(method, path_regex, status, times=, retry_after=, delay_s=)` makes the next
`times` requests whose method matches (`*` or None for any) and whose path (without the
query) matches the regex (`re.search`) fail with a proper Status body of `status`, after
holding the reply `delay_s` seconds (a client timeout). `status=None` with a delay serves
the request normally, late. `watch=True/False` restricts a rule to watch requests or to the
others. Every request is logged as (method, path, status).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import NamedTuple


class RequestRecord(NamedTuple):
    method: str
    path: str
    status: int


@dataclass
class Rule:
    method: str | None
    pattern: re.Pattern[str]
    status: int | None
    remaining: int
    retry_after: int | None = None
    delay_s: float = 0.0
    watch: bool | None = None
    message: str | None = None

    def matches(self, method: str, path: str, watch: bool) -> bool:
        return (self.method in (None, "*", method) and bool(self.pattern.search(path))
                and (self.watch is None or self.watch == watch))


class Rules:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self._log: list[RequestRecord] = []

    def inject(self, method: str | None, path_regex: str, status: int | None, *, times: int = 1,
               retry_after: int | None = None, delay_s: float = 0.0, watch: bool | None = None,
               message: str | None = None) -> Rule:
        rule = Rule(method.upper() if method else None, re.compile(path_regex), status, times, retry_after,
                    delay_s, watch, message)
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def take(self, method: str, path: str, watch: bool) -> Rule | None:
        with self._lock:
            for rule in self._rules:
                if rule.remaining > 0 and rule.matches(method, path, watch):
                    rule.remaining -= 1
                    if rule.remaining == 0:
                        self._rules.remove(rule)
                    return rule
        return None

    def record(self, method: str, path: str, status: int) -> None:
        with self._lock:
            self._log.append(RequestRecord(method, path, status))

    def log(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._log)
