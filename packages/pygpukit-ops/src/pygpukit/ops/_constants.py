"""The kernels' compile-time constants that their launches depend on.

Most come from the kernel build's manifest: a kernel source exports them with
``PGK_CONSTANT(NAME, value)`` and :func:`constant` reads them (once; plans read them when they
are made, never per call). The few that no kernel exports yet are kept here, each named after
the ``constexpr`` or launch bound it mirrors; ``tests/ops/test_ops_structure.py`` reads the
sources and checks that they agree.
"""

from __future__ import annotations

import functools

from . import _kernel_loader


@functools.cache
def constant(file: str, name: str) -> int:
    """The constant ``name`` exported by ``kernels/<file>.cu`` (from the manifest)."""
    return int(_kernel_loader.constant(file, name))


def gemv_rows_per_block(variant: str) -> int:
    """Output rows per block of a GEMV vector kernel (``simt`` or ``mma``)."""
    return constant("gemv", f"GEMV_{variant.upper()}_ROWS_PER_BLOCK")


def decode_heads_per_cta(kernel: str) -> int:
    """Query heads per CTA of a decode kernel (``mma``, ``mma2`` share the tensor-core value)."""
    return constant(
        "attention_decode", "DECODE_SIMT_HEADS" if kernel == "simt" else "DECODE_MMA_HEADS"
    )


def prefill_mma_tiles(d: int) -> tuple[int, int, int]:
    """The mma.sync prefill kernel's ``Config<D>``.

    Returns (query rows per CTA, keys per tile, padded shared row length in elements).
    """
    return (
        constant("attention_prefill", f"PREFILL_ROWS_D{d}"),
        constant("attention_prefill", f"PREFILL_KEYS_D{d}"),
        constant("attention_prefill", f"PREFILL_STRIDE_D{d}"),
    )


# Not exported by the kernels yet.

#: Threads per CTA of each Hopper prefill kernel (attention_prefill.cu launch bounds).
PREFILL_WGMMA_THREADS = {"wgmma_pipe": 256, "wgmma_tma": 384, "wgmma_persist": 384}
#: Query rows per CTA of the Hopper prefill kernels.
PREFILL_WGMMA_ROWS = 128
#: sampling.cu kThreads: threads per row of the sampling kernels.
SAMPLING_THREADS = 1024
