"""iSTFTNet's harmonic sine source on the device: F0 at the frame rate -> excitation samples.

KModel's ``SineGen`` repeats F0 to the sample rate, takes each harmonic's phase increment per
sample, averages it back to the frame rate (linear interpolation, ``align_corners=False``),
accumulates it (``cumsum``) and interpolates the phase up to the sample rate again. F0 is
constant inside a frame, so the downsampled increments are exactly the per-frame ones, and the
upsampled phase of sample ``t`` is, with ``i`` the frame left of ``t - up/2`` and ``w`` how far
``t`` lies past that frame's centre::

    phase(t) = up * cumsum[i] + up * w * increment[i + 1]

The running sum is taken in float64 and reduced modulo one cycle before it is multiplied by
``up`` (an integer, so the fractional part is all ``sin`` needs): float32 alone would lose a
tenth of a radian after a few seconds, as KModel does. Everything stays on the device.
"""

from __future__ import annotations

import math

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray
from pygpukit.ops.harmonic_source import harmonic_source

__all__ = ["HARMONICS", "harmonic_sines", "merged_source"]

HARMONICS = 9  # the fundamental and 8 overtones
_VOICED_F0_HZ = 10.0
_SINE_AMP = 0.1
_NOISE_STD = 0.003


def _orders() -> GPUArray:
    """``[1, HARMONICS, 1]`` float64 harmonic numbers on the current device.

    Made by a kernel at each call (no host copy, so a CUDA graph can capture it), not cached:
    a module-level array would outlive every model and pin its pool segment for the process.
    """
    return gp.arange(1, HARMONICS + 1, dtype=gp.float64).reshape(1, HARMONICS, 1)


def _phase_tables(f0: GPUArray, up: int, sample_rate: int) -> tuple[GPUArray, GPUArray]:
    """Each harmonic's phase at the frame centres and its slope, ``[B, HARMONICS, frames + 1]``.

    Extended by one frame on the left (the clamp of the first half frame: slope 0 there), as
    float32 cycles and cycles per sample.
    """
    batch, frames = f0.shape
    # Cycles per sample of each harmonic in each frame, wrapped as torch's ``% 1``.
    increment = (f0.astype(gp.float64).reshape(batch, 1, frames) * _orders()) / sample_rate
    increment = increment % 1.0  # [B, H, F]
    cycles = (gp.cumsum(increment, axis=-1) * up) % 1.0
    zero = gp.zeros((batch, HARMONICS, 1), gp.float64)
    start = gp.concatenate([cycles[:, :, :1], cycles], axis=-1).astype(gp.float32)
    slope = gp.concatenate([zero, increment[:, :, 1:], zero], axis=-1).astype(gp.float32)
    return start, slope


def merged_source(
    f0: GPUArray, up: int, sample_rate: int, weight: GPUArray, bias: GPUArray
) -> GPUArray:
    """The noiseless source merged by ``Linear(HARMONICS, 1)`` and ``tanh``: ``[B, frames * up]``.

    The same values as :func:`harmonic_sines` without ``rng`` followed by the merge, in one
    fused pass (:func:`pygpukit.ops.harmonic_source.harmonic_source`) over the samples.
    """
    start, slope = _phase_tables(f0, up, sample_rate)
    return harmonic_source(
        start, slope, f0, weight, bias, up=up, amp=_SINE_AMP, voiced_f0=_VOICED_F0_HZ
    )


def harmonic_sines(
    f0: GPUArray, up: int, sample_rate: int, rng: np.random.Generator | None
) -> GPUArray:
    """The harmonics' sines ``[B, HARMONICS, frames * up]`` of F0 ``[B, frames]`` (Hz).

    Voiced samples (F0 above 10 Hz) carry ``0.1 * sin(phase)``; unvoiced ones are silent.
    Without ``rng`` the source is deterministic (no noise, as kokoro-onnx exported it); with
    one, KModel's Gaussian noise (0.003 in voiced samples, 0.033 elsewhere) is drawn on the
    host from ``rng`` and added.
    """
    batch, frames = f0.shape
    length = frames * up
    start, slope = _phase_tables(f0, up, sample_rate)
    # Offset of sample j inside its frame from the frame's centre, in samples (an odd ``up``
    # puts the centre on a sample, an even one between two).
    ramp = gp.from_numpy(np.arange(up, dtype=np.float32) + np.float32(0.5 if up % 2 == 0 else 0))
    half = up - up // 2  # the first sample's place in the left-extended frames
    phase = start.reshape(batch, HARMONICS, frames + 1, 1) + slope.reshape(
        batch, HARMONICS, frames + 1, 1
    ) * ramp.reshape(1, 1, 1, up)
    phase = phase.reshape(batch, HARMONICS, (frames + 1) * up)[:, :, half : half + length]
    sines = gp.sin(phase * np.float32(2.0 * math.pi)) * np.float32(_SINE_AMP)
    voiced = gp.repeat(f0 > _VOICED_F0_HZ, up, axis=-1).astype(gp.float32)  # [B, L]
    voiced = voiced.reshape(batch, 1, length)
    sines = sines * voiced
    if rng is not None:
        noise = gp.from_numpy(rng.standard_normal((batch, HARMONICS, length)).astype(np.float32))
        amp = voiced * np.float32(_NOISE_STD - _SINE_AMP / 3.0) + np.float32(_SINE_AMP / 3.0)
        sines = sines + amp * noise
    return sines
