"""The fused FFT kernels' tables and launches.

For ``n_fft`` up to 2048 whose prime factors are at most 64, one kernel
(``audio_stft_fft_f32`` / ``audio_istft_fft_f32``) cuts, windows and transforms the frames in
shared memory (a mixed-radix Stockham FFT, two real frames per complex transform) and writes
the spectrum in the caller's form; the inverse writes windowed frames for the overlap-add. A
power-of-two ``n_fft`` from 64 to 4096 takes, forward, a kernel unrolled for its size
(``audio_stft_pow2_<n_fft>_f32``: radix-16 passes in registers, no integer division), several
times faster than the generic loop. Other sizes take the DFT-as-matmul path (:mod:`.stft`).
The radix plan and the twiddles (computed in float64) are made once per ``n_fft`` and kept on
the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray

from .. import _kernel_loader as kl
from .._plan import Launch, PlanCache
from . import _signal as sig

#: The largest prime factor the fused kernels take (a generic radix loop, O(r^2) per group).
MAX_RADIX = 64
#: The largest n_fft the fused kernels take (the twiddles and two frames fit in 48 KiB).
MAX_N_FFT = 2048
#: At most this many frame pairs per block.
MAX_PAIRS = 8


def radices(n_fft: int) -> list[int] | None:
    """The radix plan of ``n_fft``: 4s first, then 2, then odd primes.

    None when a prime factor is above :data:`MAX_RADIX` or ``n_fft`` above :data:`MAX_N_FFT`.
    """
    if n_fft > MAX_N_FFT:
        return None
    out: list[int] = []
    n = n_fft
    while n % 4 == 0:
        out.append(4)
        n //= 4
    while n % 2 == 0:
        out.append(2)
        n //= 2
    p = 3
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 2
    return None if out and max(out) > MAX_RADIX else out


@dataclass(frozen=True, slots=True)
class FftTables:
    """One ``n_fft``'s twiddles ``[n_fft, 2]`` and radix plan on the device, and launch shape."""

    twiddles: GPUArray
    radices: GPUArray  # int32
    n_radices: int
    pairs: int  # frame pairs per block
    shared_mem: int  # bytes


def _build_tables(n_fft: int, device: int) -> FftTables:
    plan = radices(n_fft)
    assert plan is not None
    angles = -2.0 * np.pi * np.arange(n_fft) / n_fft
    twiddles = sig.upload(np.stack([np.cos(angles), np.sin(angles)], axis=1))
    rad = gp.from_numpy(np.asarray(plan or [1], dtype=np.int32))
    rad.setflags(write=False)
    budget = kl.constant("audio", "AUDIO_FFT_SHARED_COMPLEX")
    pairs = max(1, min(MAX_PAIRS, (budget - n_fft) // (2 * n_fft)))
    return FftTables(twiddles, rad, len(plan), pairs, (2 * pairs + 1) * n_fft * 8)


#: FFT tables by (n_fft, device).
TABLES: PlanCache[FftTables] = PlanCache("audio_fft_tables", _build_tables, maxsize=64)


def launch(name: str, tables: FftTables, total_frames: int) -> Launch:
    """The fused kernel ``name`` over ``total_frames`` frames."""
    frames_per_block = 2 * tables.pairs
    blocks = max(1, -(-total_frames // frames_per_block))
    threads = kl.constant("audio", "AUDIO_FFT_THREADS")
    return Launch(kl.kernel("audio", name), blocks, threads, tables.shared_mem)


def pow2_size(n_fft: int) -> bool:
    """Whether ``n_fft`` has a forward kernel of its own (a power of two in the kernels' range)."""
    lo = kl.constant("audio", "AUDIO_POW2_MIN_LOG2")
    hi = kl.constant("audio", "AUDIO_POW2_MAX_LOG2")
    return n_fft & (n_fft - 1) == 0 and (1 << lo) <= n_fft <= (1 << hi)


def _build_twiddles(n_fft: int, device: int) -> GPUArray:
    angles = -2.0 * np.pi * np.arange(n_fft) / n_fft
    return sig.upload(np.stack([np.cos(angles), np.sin(angles)], axis=1))


#: The twiddles ``exp(-2 pi i k / n_fft)`` ``[n_fft, 2]`` by (n_fft, device), power-of-two kernels.
POW2_TWIDDLES: PlanCache[GPUArray] = PlanCache("audio_pow2_twiddles", _build_twiddles, maxsize=16)


def pow2_launch(n_fft: int, total_frames: int) -> Launch:
    """The forward kernel of a power-of-two ``n_fft`` over ``total_frames`` frames.

    A block of 256 threads takes ``2 * 4096 / n_fft`` frames, with ``4096 / n_fft`` padded
    buffers of ``n_fft + n_fft / 16 + 1`` complex values in shared memory.
    """
    threads = kl.constant("audio", "AUDIO_POW2_THREADS")
    groups = threads * 16 // n_fft
    blocks = max(1, -(-total_frames // (2 * groups)))
    shared = groups * (n_fft + n_fft // 16 + 1) * 8
    return Launch(kl.kernel("audio", f"audio_stft_pow2_{n_fft}_f32"), blocks, threads, shared)
