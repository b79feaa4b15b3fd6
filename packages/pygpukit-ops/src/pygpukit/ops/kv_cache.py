"""KV cache writes: new tokens' keys and values into a contiguous or a paged cache, in place.

Layouts match :func:`pygpukit.ops.decode_attention`: contiguous ``[B, Hkv, max_len, D]``,
paged ``[num_blocks, Hkv, block_size, D]``. Positions or slots outside the cache are
skipped (a kernel cannot raise); when two tokens name the same slot, which one lands is
unspecified on the GPU.
"""

from __future__ import annotations

import numpy as np

from pygpukit.array import GPUArray, check_writeable

from . import _kernel_loader
from ._common import FLOAT_DTYPES, check_array, check_int32, check_same_dtype, host
from ._plan import per_backend
from .reference import kv_cache as reference

__all__ = ["kv_cache_append", "paged_kv_cache_write"]

_INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
_THREADS = 256


def _check_kv(k: GPUArray, v: GPUArray, k_cache: GPUArray, v_cache: GPUArray, ndim: int) -> None:
    check_array(k, "k", dtypes=FLOAT_DTYPES, ndim=ndim)
    check_array(v, "v", dtypes=FLOAT_DTYPES, ndim=ndim)
    check_array(k_cache, "k_cache", dtypes=FLOAT_DTYPES, ndim=4)
    check_array(v_cache, "v_cache", dtypes=FLOAT_DTYPES, ndim=4)
    check_same_dtype(k, ("v", v), ("k_cache", k_cache), ("v_cache", v_cache))
    check_writeable(k_cache, "k_cache")
    check_writeable(v_cache, "v_cache")
    if tuple(k.shape) != tuple(v.shape):
        raise ValueError(f"k and v must have the same shape, got {k.shape} and {v.shape}")
    if tuple(k_cache.shape) != tuple(v_cache.shape):
        raise ValueError(
            f"k_cache and v_cache must have the same shape, got {k_cache.shape} and {v_cache.shape}"
        )
    d = k.shape[-1]
    if d != k_cache.shape[3] or k.shape[1] != k_cache.shape[1]:
        raise ValueError(
            f"k {tuple(k.shape)} and k_cache {tuple(k_cache.shape)} disagree on the KV heads"
            " (axis 1) or the head dim (last axis)"
        )
    if (d * k.itemsize) % 16:
        raise ValueError(
            f"a head of {d} {k.dtype} values is {d * k.itemsize} bytes; the cache kernels move"
            " 16-byte chunks, so it must be a multiple of 16 bytes"
        )


def _launch(func: str, args: tuple[object, ...], total: int) -> None:
    for i, name in enumerate(("k", "v", "k_cache", "v_cache")):
        a = args[i]
        if isinstance(a, GPUArray) and a.data_ptr % 16:
            raise ValueError(
                f"{name} starts at address {a.data_ptr:#x}, not 16-byte aligned (a view at an"
                " odd offset?); pass a copy"
            )
    blocks = max(1, min(-(-total // _THREADS), 65535 * 16))
    _kernel_loader.kernel("kv_cache", func)(*args, total, grid=blocks, block=_THREADS)


def kv_cache_append(
    k: GPUArray, v: GPUArray, k_cache: GPUArray, v_cache: GPUArray, positions: GPUArray
) -> None:
    """Write ``T`` new tokens per sequence into a contiguous cache ``[B, Hkv, max_len, D]``.

    ``k``/``v`` are ``[B, Hkv, T, D]`` in the caches' dtype. ``positions`` (int32 or
    int64, on the device) is either ``[B]``, the position of each sequence's first new
    token (the others follow it), or ``[B, T]``, one position per token. Token ``t`` of
    sequence ``b`` lands at ``k_cache[b, :, pos]``; positions outside ``[0, max_len)``
    are skipped. Writes in place on the current stream and returns None.
    """
    _check_kv(k, v, k_cache, v_cache, 4)
    b, t = k.shape[0], k.shape[2]
    if k_cache.shape[0] != b:
        raise ValueError(f"k_cache must be [B={b}, Hkv, max_len, D], got {tuple(k_cache.shape)}")
    check_array(positions, "positions", dtypes=_INDEX_DTYPES, ndim=(1, 2))
    if tuple(positions.shape) not in ((b,), (b, t)):
        raise ValueError(
            f"positions must have shape ({b},) or ({b}, {t}), got {tuple(positions.shape)}"
        )
    if k.size == 0:
        return
    _append(k, v, k_cache, v_cache, positions)


def _append_numpy(
    k: GPUArray, v: GPUArray, k_cache: GPUArray, v_cache: GPUArray, positions: GPUArray
) -> None:
    reference.append(host(k), host(v), host(k_cache), host(v_cache), host(positions))


def _append_cuda(
    k: GPUArray, v: GPUArray, k_cache: GPUArray, v_cache: GPUArray, positions: GPUArray
) -> None:
    hkv, t, d = k.shape[1], k.shape[2], k.shape[3]
    max_len = k_cache.shape[2]
    check_int32("kv_cache_append", Hkv=hkv, T=t, max_len=max_len)
    suffix = "i32" if positions.dtype == np.int32 else "i64"
    row_chunks = d * k.itemsize // 16
    args = (k, v, k_cache, v_cache, positions, int(positions.ndim == 2), hkv, t, max_len)
    _launch(f"kv_append_{suffix}", (*args, row_chunks), k.size * k.itemsize // 16)


def paged_kv_cache_write(
    k: GPUArray, v: GPUArray, k_cache: GPUArray, v_cache: GPUArray, slot_mapping: GPUArray
) -> None:
    """Write ``N`` tokens into a paged cache ``[num_blocks, Hkv, block_size, D]``.

    ``k``/``v`` are ``[N, Hkv, D]`` in the caches' dtype; ``slot_mapping`` (int32 or
    int64, ``[N]``, on the device) gives each token's slot ``block * block_size + offset``.
    A negative slot skips the token (padding, as in vLLM), and so does a slot past the
    last block. Writes in place on the current stream and returns None.
    """
    _check_kv(k, v, k_cache, v_cache, 3)
    n = k.shape[0]
    check_array(slot_mapping, "slot_mapping", dtypes=_INDEX_DTYPES, ndim=1)
    if slot_mapping.shape[0] != n:
        raise ValueError(f"slot_mapping must have shape ({n},), got {tuple(slot_mapping.shape)}")
    block_size = k_cache.shape[2]
    if k.size == 0:
        return
    if block_size == 0:
        raise ValueError("k_cache has block_size 0 (axis 2)")
    _paged_write(k, v, k_cache, v_cache, slot_mapping)


def _paged_write_numpy(
    k: GPUArray, v: GPUArray, k_cache: GPUArray, v_cache: GPUArray, slot_mapping: GPUArray
) -> None:
    reference.paged_write(host(k), host(v), host(k_cache), host(v_cache), host(slot_mapping))


def _paged_write_cuda(
    k: GPUArray, v: GPUArray, k_cache: GPUArray, v_cache: GPUArray, slot_mapping: GPUArray
) -> None:
    hkv, d = k.shape[1], k.shape[2]
    num_blocks, block_size = k_cache.shape[0], k_cache.shape[2]
    check_int32("paged_kv_cache_write", Hkv=hkv, block_size=block_size)
    suffix = "i32" if slot_mapping.dtype == np.int32 else "i64"
    row_chunks = d * k.itemsize // 16
    args = (k, v, k_cache, v_cache, slot_mapping, hkv, block_size, num_blocks, row_chunks)
    _launch(f"kv_paged_write_{suffix}", args, k.size * k.itemsize // 16)


_append = per_backend(cpu=_append_numpy, cuda=_append_cuda)
_paged_write = per_backend(cpu=_paged_write_numpy, cuda=_paged_write_cuda)
