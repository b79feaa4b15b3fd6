"""Shared plumbing of the audio ops: signal and window arguments, and elementwise launch grids."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import validation
from pygpukit.array import GPUArray

from .. import _common as c
from .. import _kernel_loader as kl
from .._plan import Launch
from ..reference import stft as reference

F32 = np.dtype(np.float32)
#: The sample dtypes the audio ops take (all but float32 are converted once).
SAMPLE_DTYPES = (*c.FLOAT_DTYPES, np.dtype(np.float64))
#: Blocks of a grid-stride kernel: at most this many (each thread loops over the rest).
_MAX_BLOCKS = 1 << 20


def signal(x: Any, name: str, op: str, *, min_ndim: int = 1) -> tuple[GPUArray, tuple[int, ...]]:
    """``x`` as a C-contiguous float32 ``[batch, L]`` array, and its leading (batch) shape.

    float16, bfloat16 and float64 inputs are converted (one copy); a strided view is copied.
    """
    if not isinstance(x, GPUArray):
        raise TypeError(
            f"{op}: {name} must be a GPUArray (gp.from_numpy(samples)), got {type(x).__name__}"
        )
    if x.dtype not in SAMPLE_DTYPES:
        raise TypeError(f"{op}: {name} must hold floating-point samples, got dtype {x.dtype}")
    if x.ndim < min_ndim:
        raise ValueError(f"{op}: {name} must have at least {min_ndim} dimension(s), got {x.shape}")
    if x.dtype != F32:
        x = x.astype(F32)
    elif not x.is_contiguous():
        x = x.copy()
    lead = tuple(x.shape[:-1])
    batch = int(np.prod(lead)) if lead else 1
    return x.reshape(batch, x.shape[-1]), lead


def spectrum(x: Any, name: str, op: str) -> GPUArray:
    """``x`` as a C-contiguous float32 array (a strided view or a half-precision one is copied)."""
    if not isinstance(x, GPUArray):
        raise TypeError(f"{op}: {name} must be a GPUArray, got {type(x).__name__}")
    if x.dtype not in SAMPLE_DTYPES:
        raise TypeError(f"{op}: {name} must be floating-point, got dtype {x.dtype}")
    if x.dtype != F32:
        return x.astype(F32)
    return x if x.is_contiguous() else x.copy()


@functools.lru_cache(maxsize=64)
def _named_window(kind: str, win_length: int, n_fft: int) -> tuple[np.ndarray, bytes]:
    """A named window and its bytes, made once per size (every call of an op asks for it)."""
    values = reference.window(kind, win_length, n_fft)
    values.setflags(write=False)
    return values, values.tobytes()


def window_values(window: Any, win_length: int, n_fft: int, op: str) -> tuple[np.ndarray, bytes]:
    """The float64 window padded to ``n_fft``, and its bytes (a hashable plan key).

    ``window``: ``"hann"``, ``"hamming"``, ``"rectangular"``, or ``win_length`` values (a
    sequence, NumPy array or GPUArray, read once here: a GPUArray is copied to the host).
    """
    if isinstance(window, str):
        validation.choice(window, reference.WINDOWS, "window", op)
        return _named_window(window, win_length, n_fft)
    else:
        host = window.to_numpy() if isinstance(window, GPUArray) else np.asarray(window)
        if host.ndim != 1 or host.shape[0] != win_length:
            raise ValueError(
                f"{op}: a window array must be 1-D with win_length = {win_length} values, "
                f"got shape {host.shape}"
            )
        if host.dtype.kind not in "fiu" or not np.isfinite(host).all():
            raise ValueError(f"{op}: the window must hold finite real numbers")
        values = reference.window(host.astype(np.float64), win_length, n_fft)
    return values, values.tobytes()


def framing(n_fft: Any, hop_length: Any, win_length: Any, op: str) -> tuple[int, int, int]:
    """Checked ``(n_fft, hop, win_length)``, with torch's and librosa's defaults.

    ``hop`` defaults to ``win_length // 4``, ``win_length`` to ``n_fft``.
    """
    n_fft = validation.size(n_fft, "n_fft", op, minimum=1)
    win = n_fft if win_length is None else validation.size(win_length, "win_length", op, 1)
    if win > n_fft:
        raise ValueError(f"{op}: win_length ({win}) must be at most n_fft ({n_fft})")
    hop = (
        max(1, win // 4) if hop_length is None else validation.size(hop_length, "hop_length", op, 1)
    )
    return n_fft, hop, win


def elementwise(file: str, name: str, total: int, threads: int = 256) -> Launch:
    """A grid-stride launch of ``name`` covering ``total`` elements."""
    blocks = max(1, min(_MAX_BLOCKS, -(-total // threads)))
    return Launch(kl.kernel(file, name), blocks, threads)


def upload(values: np.ndarray) -> GPUArray:
    """A read-only float32 copy of host values on the current device (bases, windows, taps)."""
    arr = gp.from_numpy(np.ascontiguousarray(values, dtype=np.float32))
    arr.setflags(write=False)
    return arr
