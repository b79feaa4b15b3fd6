"""Every Python example in the user guides runs (on whichever backend this machine has).

Each ```python block of the guides below runs in a fresh namespace, as in
tests/test_readme.py, so the guides cannot drift from the API.
"""

from __future__ import annotations

import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
GUIDES = (
    "arrays.md",
    "kernels.md",
    "memory.md",
    "scheduler.md",
    "elementwise.md",
    "ops-layers.md",
    "ops-attention.md",
    "ops-linear-sampling.md",
    "ops-signal.md",
    "ops-audio.md",
    "errors.md",
    "llm.md",
    "llm-loading.md",
    "asr.md",
    "tts.md",
)
BLOCKS = [
    (guide, index, code)
    for guide in GUIDES
    for index, code in enumerate(
        re.findall(r"```python\n(.*?)```", (DOCS / guide).read_text(), flags=re.S)
    )
]


@pytest.mark.parametrize("guide", [g for g in GUIDES if g != "elementwise.md"])
def test_guide_has_examples(guide: str) -> None:
    assert any(g == guide for g, _, _ in BLOCKS), f"docs/{guide} has no python examples"


@pytest.mark.parametrize(("guide", "index", "code"), BLOCKS, ids=[f"{g}-{i}" for g, i, _ in BLOCKS])
def test_guide_example_runs(guide: str, index: int, code: str) -> None:
    compiled = compile(code, f"docs/{guide} python block {index}", "exec")
    exec(compiled, {"__name__": f"docs_example_{guide.removesuffix('.md')}_{index}"})
