"""pygpukit.ops._kernel_loader on any backend: the kernels' constants and the cubin choice."""

from __future__ import annotations

import pytest

from pygpukit.backend import select as _select
from pygpukit.ops import _kernel_loader as kl


@pytest.mark.parametrize(
    ("file", "names"),
    [
        (
            "gemv",
            ["GEMV_WARPS", "GEMV_MAX_ROWS", "GEMV_SIMT_ROWS_PER_BLOCK", "GEMV_MMA_ROWS_PER_BLOCK"],
        ),
        ("attention_decode", ["DECODE_THREADS", "DECODE_MMA_HEADS", "DECODE_MAX_SPLITS"]),
        ("attention_prefill", ["PREFILL_THREADS", "PREFILL_ROWS_D128", "PREFILL_KEYS_D64"]),
    ],
)
def test_kernel_constants_come_from_the_manifest(file: str, names: list[str]) -> None:
    """The ops' launch geometry is exported by the kernels (PGK_CONSTANT), on every backend."""
    constants = kl.LIBRARY.constants(file)
    for name in names:
        assert kl.constant(file, name) == constants[name] > 0


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
