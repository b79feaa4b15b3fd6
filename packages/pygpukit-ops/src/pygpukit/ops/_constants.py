"""The kernels' compile-time constants that their launches depend on, in one place.

Each value mirrors a ``constexpr`` of a kernel source (named beside it); a launch plan sized
with another value would launch the kernel with a wrong grid or too little shared memory.
``tests/ops/test_kernel_constants.py`` reads the sources and checks that they agree.
"""

from __future__ import annotations

#: gemv.cu kWarps: warps per block of every GEMV kernel.
GEMV_WARPS = 4
#: Rows of x the GEMV kernels take (their accumulators live in registers).
GEMV_MAX_ROWS = 8
#: Output rows per block of the GEMV vector kernels: simt 4 per warp, mma 16 per block.
GEMV_ROWS_PER_BLOCK = {"simt": 4 * GEMV_WARPS, "mma": 16}

#: attention_decode.cu kThreads: threads per CTA of every decode kernel.
DECODE_THREADS = 128
#: Query heads per decode CTA: attention_decode.cu kTcHeads (mma, mma2) and kG (simt).
DECODE_HEADS_PER_CTA = {"mma": 16, "mma2": 16, "simt": 4}
#: attention_decode.cu kTcTile: keys per step of the tensor-core decode kernels.
DECODE_TILE = 64
#: attention_decode.cu kMaxSplits: the most flash-decoding splits the combine kernel merges.
DECODE_MAX_SPLITS = 64

#: attention_prefill.cu kThreads: threads per CTA of the mma.sync prefill kernel.
PREFILL_THREADS = 128
#: Threads per CTA of each Hopper prefill kernel (attention_prefill.cu launch bounds).
PREFILL_WGMMA_THREADS = {"wgmma_pipe": 256, "wgmma_tma": 384}
#: Query rows per CTA of the Hopper prefill kernels.
PREFILL_WGMMA_ROWS = 128

#: sampling.cu kThreads: threads per row of the sampling kernels.
SAMPLING_THREADS = 1024


def prefill_mma_tiles(d: int) -> tuple[int, int]:
    """attention_prefill.cu ``Config<D>``: (query rows per CTA kBM, keys per tile kBN)."""
    rows = 4 * 16 * (2 if d <= 128 else 1)
    keys = 32 if d > 80 else 64
    return rows, keys
