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

import pytest
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

MUTATION_MAX_EXAMPLES = 30
"""Under the mutation profile a property test draws at most this many examples, whatever its own
`max_examples`: a surviving mutant runs every test that reaches its function, and the queue
properties' 150 examples each made one survivor cost minutes. Fewer examples can only let more
mutants survive, so the score this gives is a lower bound for the suite CI runs."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--hypothesis-profile", default=None) != "mutation":
        return
    for item in items:
        test = getattr(item, "obj", None)
        # where @settings(...) leaves them for @given (hypothesis 6.170, pinned in constraints.txt)
        own = getattr(test, "_hypothesis_internal_use_settings", None)
        if isinstance(own, settings) and own.max_examples > MUTATION_MAX_EXAMPLES:
            test._hypothesis_internal_use_settings = settings(  # type: ignore[union-attr]
                own, max_examples=MUTATION_MAX_EXAMPLES)
