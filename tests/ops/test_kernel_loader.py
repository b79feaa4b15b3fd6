"""pygpukit.ops._kernel_loader on any backend: cubin choice and the JIT fallback's source."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pygpukit import _jit_cache
from pygpukit.backend import select as _select
from pygpukit.ops import _kernel_loader as kl


@pytest.fixture
def kernel_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private ``_kernels`` folder with one kernel, one header and a manifest."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "k.cu").write_text('#include "h.cuh"\nextern "C" __global__ void f(int n) {}\n')
    (src / "h.cuh").write_text("#define WIDTH 4\n")
    manifest = {"kernel_abi": 1, "archs": ["80"], "options": ["-std=c++17"]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setattr(kl, "KERNEL_DIR", tmp_path)
    kl._source.cache_clear()
    kl.manifest.cache_clear()
    yield tmp_path
    kl._source.cache_clear()
    kl.manifest.cache_clear()


def test_jit_fallback_key_changes_with_a_shipped_header(kernel_dir: Path) -> None:
    """gp.jit's cache key for the fallback compile covers the headers in the shipped src/."""

    def key() -> str:
        return _jit_cache.cache_key(kl._source("k"), (), kl.jit_options(), "sm_90a", (13, 0))

    first = key()
    assert first == key()
    (kernel_dir / "src" / "h.cuh").write_text("#define WIDTH 8\n")
    assert key() != first


def test_cubin_choice() -> None:
    """The loader uses the runtime's rule (_native.choose_cubin_arch); the ops' cases."""
    native = _select.native()
    if native is None:
        pytest.skip("pygpukit._native is not built here")
    have = ["sm_80", "sm_86", "sm_90a"]
    choose = native.choose_cubin_arch
    assert choose(9, 0, have) == "sm_90a"
    assert choose(8, 9, have) == "sm_86"  # newest lower minor of the same major
    assert choose(10, 0, have) == ""  # another major: the JIT fallback
    assert choose(12, 0, ["sm_100a", "sm_120"]) == "sm_120"
    assert choose(10, 3, ["sm_100a"]) == ""  # `a` builds: their exact SM only
