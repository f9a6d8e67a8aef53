"""The README's Python example runs as written (documentation that cannot rot silently)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest


def test_the_readme_core_example_binds_both_pods(capsys: pytest.CaptureFixture[str]) -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert blocks, "the README has a Python example"
    exec(compile(blocks[0], "README.md", "exec"), {})  # noqa: S102 - our own documentation
    placed = dict(line.split(" ", 1) for line in capsys.readouterr().out.splitlines())
    # Equal priority and age: uid order, so the notebook's share goes first, on device 0;
    # the 4-GPU pod then takes four whole devices from the same NVLink domain.
    assert placed == {"default/notebook": "n1 (0,)", "default/train": "n1 (1, 2, 3, 4)"}
