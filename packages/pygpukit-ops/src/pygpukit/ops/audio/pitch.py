"""Fundamental frequency by YIN, with voicing: ``pitch(x, sr, fmin, fmax)``.

librosa's ``yin`` (same frames, difference function, threshold rule and parabolic refinement:
:mod:`pygpukit.ops.reference.pitch`), plus the voicing decision YIN makes on the way: a frame
is voiced when its normalised difference has a trough below ``threshold`` at an allowed period.
On the GPU: the framing kernel, then one block per frame computes the autocorrelation over
all lags in shared memory and picks the period.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import validation
from pygpukit.array import GPUArray

from .. import _common as c
from .. import _kernel_loader as kl
from .._plan import Launch, PlanCache, per_backend
from ..reference import pitch as reference
from ..reference import stft as stft_reference
from . import _signal as sig
from .stft import PAD_MODES, Framing, frames_launch

__all__ = ["pitch"]

_THREADS = 256


@dataclass(frozen=True, slots=True)
class YinGeometry:
    """Checked YIN arguments."""

    frame_length: int
    hop: int
    center: bool
    pad_mode: str
    min_period: int
    max_period: int
    threshold: float
    sr: float


@dataclass(frozen=True, slots=True)
class CudaYin:
    """YIN on the GPU for one shape: frames, then one block per frame."""

    g: YinGeometry
    count: int
    frames: Launch
    frame_args: tuple[int, ...]
    yin: Launch

    def __call__(self, x: GPUArray, f0: GPUArray, voiced: GPUArray) -> None:
        g = self.g
        batch = x.shape[0]
        frames = gp.empty((batch, self.count, g.frame_length), np.float32)
        self.frames(x, frames, *self.frame_args)
        self.yin(
            frames,
            f0,
            voiced,
            batch * self.count,
            g.frame_length,
            g.min_period,
            g.max_period,
            g.threshold,
            g.sr,
        )


@dataclass(frozen=True, slots=True)
class ReferenceYin:
    """The CPU backend's YIN (NumPy float64)."""

    g: YinGeometry

    def __call__(self, x: GPUArray, f0: GPUArray, voiced: GPUArray) -> None:
        g = self.g
        frames = stft_reference.frame(c.f32(x), g.frame_length, g.hop, g.center, g.pad_mode)
        freq, v = reference.yin(frames, g.sr, g.min_period, g.max_period, g.threshold)
        c.write_into(f0, freq)
        c.write_into(voiced, v)


def _framing(g: YinGeometry) -> Framing:
    return Framing(g.frame_length, g.hop, g.frame_length, b"", g.center, g.pad_mode)


def _plan_cuda(g: YinGeometry, batch: int, length: int, device: int) -> CudaYin:
    fr = _framing(g)
    count = fr.n_frames(length, "pitch")
    launch, args = frames_launch(fr, batch, length, count)
    shared = (g.frame_length + g.max_period + 1) * 4
    if g.frame_length + g.max_period + 1 > kl.constant("audio", "AUDIO_YIN_MAX_SHARED"):
        raise ValueError(
            f"pitch: frame_length + sr / fmin = {g.frame_length + g.max_period} is too large for "
            "the GPU kernel's shared memory; use a shorter frame_length or a higher fmin"
        )
    yin = Launch(kl.kernel("audio", "audio_yin_f32"), batch * count, _THREADS, shared)
    return CudaYin(g, count, launch, args, yin)


def _plan_numpy(g: YinGeometry, batch: int, length: int, device: int) -> ReferenceYin:
    return ReferenceYin(g)


#: YIN plans by (geometry, batch, length, device).
YIN_PLANS: PlanCache[CudaYin | ReferenceYin] = PlanCache(
    "pitch", per_backend(cpu=_plan_numpy, cuda=_plan_cuda)
)


def _positive(value: Any, name: str) -> float:
    v = float(value)
    if not (v > 0 and math.isfinite(v)):
        raise ValueError(f"pitch: {name} must be a positive number, got {value!r}")
    return v


def pitch(
    x: GPUArray,
    sr: float = 22050,
    fmin: float = 65.0,
    fmax: float = 2093.0,
    frame_length: int = 2048,
    hop_length: int | None = None,
    threshold: float = 0.1,
    center: bool = True,
    pad_mode: str = "constant",
) -> tuple[GPUArray, GPUArray]:
    """YIN fundamental frequency of ``x`` ``[..., L]``: ``(f0, voiced)``, each ``[..., n_frames]``.

    ``f0`` (float32, Hz) is librosa's ``yin`` estimate for every frame (the global minimum's
    period where no trough is below ``threshold``); ``voiced`` (bool) says whether one was
    (``np.where(voiced, f0, np.nan)`` is the usual pitch track). Periods range over
    ``[floor(sr / fmax), min(ceil(sr / fmin), frame_length - 1)]`` samples; frames of
    ``frame_length`` every ``hop_length`` (default ``frame_length // 4``), centred with
    ``pad_mode`` ``"constant"`` (librosa's default) or ``"reflect"``.
    """
    op = "pitch"
    sr_f, lo, hi = _positive(sr, "sr"), _positive(fmin, "fmin"), _positive(fmax, "fmax")
    frame_length = validation.size(frame_length, "frame_length", op, minimum=3)
    hop = (
        frame_length // 4
        if hop_length is None
        else validation.size(hop_length, "hop_length", op, 1)
    )
    center = validation.boolean(center, "center", op)
    validation.choice(pad_mode, PAD_MODES, "pad_mode", op)
    if not 0 < float(threshold) < 1:
        raise ValueError(f"{op}: threshold must be in (0, 1), got {threshold!r}")
    if not lo < hi <= sr_f / 2:
        raise ValueError(f"{op}: need fmin < fmax <= sr / 2, got {fmin!r}, {fmax!r} at sr={sr!r}")
    if sr_f / lo >= frame_length - 1:
        raise ValueError(
            f"{op}: frame_length {frame_length} is too short for fmin {fmin!r} at sr {sr!r}: "
            f"it must exceed sr / fmin + 1 = {sr_f / lo + 1:.0f} samples (two periods are better)"
        )
    min_period = int(np.floor(sr_f / hi))
    max_period = min(int(np.ceil(sr_f / lo)), frame_length - 1)
    g = YinGeometry(
        frame_length, hop, center, pad_mode, min_period, max_period, float(threshold), sr_f
    )
    x2, lead = sig.signal(x, "x", op)
    batch, length = x2.shape
    count = _framing(g).n_frames(length, op)
    f0 = gp.empty((batch, count), np.float32)
    voiced = gp.empty((batch, count), np.bool_)
    if batch and count:
        YIN_PLANS.get(g, batch, length, gp.get_device())(x2, f0, voiced)
    return f0.reshape(*lead, count), voiced.reshape(*lead, count)
