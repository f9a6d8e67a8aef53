"""Hypothesis profiles for the whole suite.

`pytest --hypothesis-profile=mutation` (what `make mutate` passes, docs/testing.md) makes every
property test reproducible: the examples are derived from the test's name (derandomize), no
example database is read or written, and timing never fails a test. A test's own
`@settings(max_examples=...)` still sets how many examples it draws; `max_examples` here only
bounds the tests that name no count, so a mutant meets the same examples on every run. A
failing example is not shrunk: a mutant only needs to fail, and shrinking one failure of a
queue property took over five minutes.
"""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, settings

settings.register_profile(
    "mutation",
    derandomize=True,
    database=None,
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=False,
    phases=[Phase.explicit, Phase.generate, Phase.target],
)
