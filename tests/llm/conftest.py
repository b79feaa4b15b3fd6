"""Fixtures of the pygpukit.llm tests: the real SmolLM2-135M-Instruct GGUF and pool checks.

Also puts this folder on ``sys.path`` for ``tests/llm/gpu`` (the file writers in
``llm_files.py`` and the model asset in ``smollm2_asset.py``).
"""

from __future__ import annotations

import gc
import pathlib
import sys
from collections.abc import Callable, Iterator

import pytest

_HERE = str(pathlib.Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from smollm2_asset import AssetUnavailable, smollm2_gguf  # noqa: E402


@pytest.fixture(scope="session")
def smollm2_path() -> pathlib.Path:
    """SmolLM2-135M-Instruct (Q4_1 GGUF), downloaded once into ``<repo>/.cache/models``.

    Skips the test, with the reason, only when the file cannot be downloaded.
    """
    try:
        return smollm2_gguf()
    except AssetUnavailable as exc:
        pytest.skip(f"SmolLM2-135M-Instruct GGUF unavailable: {exc}")


@pytest.fixture
def pool_baseline() -> Iterator[Callable[[], None]]:
    """A check that nothing the code under test allocated is still alive.

    Counts live GPUArrays (every backend) and, on the GPU, the pool's allocated bytes and
    blocks, after a garbage collection, against the values when the test started.
    """
    import pygpukit as gp
    from pygpukit.array import GPUArray

    def state() -> tuple[int, int, int]:
        gc.collect()
        # type(), not isinstance(): a dead weakref.proxy among the objects raises on __class__.
        arrays = sum(issubclass(type(o), GPUArray) for o in gc.get_objects())
        stats = gp.memory.stats()
        return arrays, stats["allocated_bytes"], stats["active_blocks"]

    before = state()

    def check() -> None:
        after = state()
        assert after == before, f"leaked: (arrays, bytes, blocks) {before} -> {after}"

    yield check
