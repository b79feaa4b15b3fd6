"""pygpukit.ops.harmonic_source: an iSTFTNet vocoder's merged sine excitation in one pass.

Kokoro's (and StyleTTS2's) ``SourceModuleHnNSF`` turns F0 at the frame rate into nine
harmonics' sines at the sample rate and merges them with a ``Linear(9, 1)`` and ``tanh``. The
phase of each harmonic is linear inside a frame, so it is given as two small per-frame tables
(``start`` and ``slope``, made from a float64 running sum by the caller), and this op expands,
takes the sines, merges and squashes them without writing the ``[B, 9, samples]`` sines out.
See ``kernels/harmonic_source.cu``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pygpukit as gp
from pygpukit import validation
from pygpukit.array import GPUArray

from . import _common as c
from . import _kernel_loader as kl
from ._plan import Launch, PlanCache, per_backend
from .reference import harmonic_source as reference

__all__ = ["harmonic_source"]

_MAX_BLOCKS = 65535


@dataclass(frozen=True, slots=True)
class SourcePlan:
    """``plan(start, slope, f0, weight, bias, out, amp, voiced_f0)`` enqueues the kernel."""

    launch: Launch
    total: int
    frames: int
    up: int
    harmonics: int

    def __call__(self, *args: Any) -> None:
        start, slope, f0, weight, bias, out, amp, voiced_f0 = args
        half, offset = self.up - self.up // 2, 0.5 if self.up % 2 == 0 else 0.0
        self.launch(
            start, slope, f0, weight, bias, out, self.total, self.frames, self.up, half, offset,
            amp, voiced_f0, self.harmonics,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class ReferenceSource:
    """The CPU backend's version: :mod:`.reference.harmonic_source` on the host buffers."""

    up: int

    def __call__(self, *args: Any) -> None:
        start, slope, f0, weight, bias, out, amp, voiced_f0 = args
        values = reference.harmonic_source(
            c.host(start), c.host(slope), c.host(f0), c.host(weight), float(c.host(bias)[0]),
            self.up, amp, voiced_f0,
        )  # fmt: skip
        c.write_into(out, values)


def _plan_cuda(batch: int, harmonics: int, frames: int, up: int, device: int) -> SourcePlan:
    total = batch * frames * up
    c.check_int32("harmonic_source", frames=frames + 1, up=up, harmonics=harmonics)
    block = kl.constant("harmonic_source", "HARMONIC_BLOCK")
    grid = max(1, min(_MAX_BLOCKS, -(-total // block)))
    launch = Launch(kl.kernel("harmonic_source", "harmonic_source_f32"), grid, block)
    return SourcePlan(launch, total, frames, up, harmonics)


def _plan_numpy(batch: int, harmonics: int, frames: int, up: int, device: int) -> ReferenceSource:
    return ReferenceSource(up)


#: Plans by (batch, harmonics, frames, up, device).
SOURCE_PLANS: PlanCache[SourcePlan | ReferenceSource] = PlanCache(
    "harmonic_source", per_backend(cpu=_plan_numpy, cuda=_plan_cuda)
)


def harmonic_source(
    start: GPUArray,
    slope: GPUArray,
    f0: GPUArray,
    weight: GPUArray,
    bias: GPUArray,
    *,
    up: int,
    amp: float = 0.1,
    voiced_f0: float = 10.0,
) -> GPUArray:
    """The merged excitation ``[B, F * up]`` float32 of F0 ``[B, F]`` (Hz).

    ``out[b, t] = tanh(bias + sum_h weight[h] * amp * sin(2 pi phase[b, h, t]))`` where F0 of
    sample ``t``'s frame is above ``voiced_f0``, ``tanh(bias)`` elsewhere. The phase, in cycles,
    is linear inside each frame: ``start[b, h, i] + slope[b, h, i] * ramp`` with ``start`` and
    ``slope`` ``[B, H, F + 1]`` float32 tables extended by one frame on the left, and sample
    ``t`` at place ``p = t + up - up // 2`` of the extended frames (frame ``i = p // up``, ramp
    ``p % up``, plus 0.5 for an even ``up``): the linear interpolation with
    ``align_corners=False`` of a phase sampled at the frame centres. ``weight`` holds the ``H``
    weights of the merging ``Linear(H, 1)`` (any shape of H elements), ``bias`` its one bias.
    """
    start = c.check_array(start, "start", dtypes=(gp.float32,), ndim=3)
    batch, harmonics, table = start.shape
    slope = c.check_array(slope, "slope", dtypes=(gp.float32,), ndim=3)
    c.check_shape(slope, "slope", tuple(start.shape))
    f0 = c.check_array(f0, "f0", dtypes=(gp.float32,), ndim=2)
    c.check_shape(f0, "f0", (batch, table - 1))
    weight = c.check_array(weight, "weight", dtypes=(gp.float32,))
    if harmonics == 0 or weight.size != harmonics:
        raise ValueError(
            f"harmonic_source: weight must hold {harmonics} values, got {weight.shape}"
        )
    bias = c.check_array(bias, "bias", dtypes=(gp.float32,))
    if bias.size != 1:
        raise ValueError(f"harmonic_source: bias must hold one value, got {bias.shape}")
    up = validation.size(up, "up", "harmonic_source", minimum=1)
    amp_value = validation.real(amp, "amp", "harmonic_source", finite=True)
    voiced = validation.real(voiced_f0, "voiced_f0", "harmonic_source", finite=True)
    frames = table - 1
    out = gp.empty((batch, frames * up), gp.float32)
    if out.size == 0:
        return out
    plan = SOURCE_PLANS.get(batch, harmonics, frames, up, gp.get_device())
    plan(start, slope, f0, weight.reshape(harmonics), bias.reshape(1), out, amp_value, voiced)
    return out
