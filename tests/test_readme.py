"""Every Python example in README.md runs (on whichever backend this machine has)."""

from __future__ import annotations

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index: int) -> None:
    code = compile(BLOCKS[index], f"README.md python block {index}", "exec")
    exec(code, {"__name__": f"readme_example_{index}"})
