"""pygpukit.ops.channels: norms and activations over ``[B, C, L]`` signals.

- :func:`instance_norm`: each (b, c) row normalised over L (``torch.nn.InstanceNorm1d``, biased
  variance, optional affine ``weight``/``bias`` [C]);
- :func:`ada_in`: adaptive instance norm, ``(1 + gamma) * instance_norm(x) + beta`` with
  ``gamma``/``beta`` [B, C] (StyleTTS2's and Kokoro's ``AdaIN1d``), with an optional fused
  LeakyReLU or Snake after it;
- :func:`channel_layernorm`: LayerNorm over C at each position (Kokoro's text-encoder
  ``LayerNorm``, which transposes to channels-last and back);
- :func:`snake`: ``x + sin(alpha * x)**2 / alpha`` with a per-channel ``alpha`` (BigVGAN, the
  iSTFTNet vocoder);
- :func:`leaky_relu`: ``x`` if ``x >= 0`` else ``negative_slope * x``, any shape.

float32, float16 and bfloat16 in and out, math in float32, rounded once. ``out`` may be ``x``
itself (in place). See ``kernels/channels.cu``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import validation
from pygpukit.array import GPUArray

from . import _common as c
from . import _kernel_loader as kl
from ._plan import Launch, PlanCache, per_backend
from .reference import channels as reference

__all__ = ["ada_in", "channel_layernorm", "instance_norm", "leaky_relu", "snake"]

#: Blocks of the grid-stride kernels: enough to fill any current GPU several times over.
_MAX_BLOCKS = 65535
_ACT_NAMES = {None: "ACT_NONE", "leaky_relu": "ACT_LEAKY_RELU", "snake": "ACT_SNAKE"}


def _grid(total: int) -> int:
    return max(1, min(_MAX_BLOCKS, -(-total // kl.constant("channels", "CHANNELS_BLOCK"))))


def _kernel(name: str, dtype: np.dtype[Any]) -> Any:
    return kl.kernel("channels", f"{name}_{c.kernel_suffix(dtype)}")


def _eps(eps: Any, op: str) -> float:
    value = validation.real(eps, "eps", op)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{op}: eps must be a finite number >= 0, got {value!r}")
    return value


def _signal(x: Any, op: str) -> GPUArray:
    x = c.check_array(x, "x", dtypes=c.FLOAT_DTYPES, ndim=3)
    return x


def _per_channel(a: Any, name: str, x: GPUArray, channels: int) -> GPUArray | None:
    """A [C] parameter (any shape of C elements, e.g. PyTorch's [1, C, 1]) as a [C] view."""
    if a is None:
        return None
    a = c.check_array(a, name)
    c.check_same_dtype(x, (name, a))
    if a.size != channels:
        raise ValueError(f"{name} must hold one value per channel ({channels}), got {a.shape}")
    return a.reshape(channels)


def _style(a: Any, name: str, x: GPUArray) -> GPUArray | None:
    """AdaIN's gamma or beta [B, C]: any row stride, unit stride along C (a [B, 2C] half)."""
    if a is None:
        return None
    a = c.check_array(a, name, ndim=2, contiguous=False)
    c.check_same_dtype(x, (name, a))
    c.check_shape(a, name, tuple(x.shape[:2]))
    row, col = a.strides
    if (col != a.itemsize and a.shape[1] > 1) or row % a.itemsize or row < 0:
        raise ValueError(
            f"{name} must have unit stride along C (got strides {a.strides}); pass a copy"
        )
    return a


@dataclass(frozen=True, slots=True)
class InstanceNormPlan:
    """``plan(x, y, weight, bias, gamma, beta, alpha, lengths, eps, slope)`` enqueues the kernel.

    One block per row where a row is short; else ``splits`` blocks a row (a statistics kernel
    into a float32 scratch of ``(mean, M2)`` pairs, then the normalising one).
    """

    launch: Launch
    channels: int
    length: int
    act: int
    splits: int = 1
    chunk: int = 0
    stats: Launch | None = None

    def __call__(self, x: GPUArray, y: GPUArray, *args: Any) -> None:
        weight, bias, gamma, beta, alpha, lengths, eps, slope = args
        styles = (_ptr(gamma), _ptr(beta), _row_stride(gamma), _row_stride(beta), _ptr(alpha))
        if self.stats is None:
            self.launch(
                x, y, _ptr(weight), _ptr(bias), *styles, _ptr(lengths), self.channels,
                self.length, eps, self.act, slope,
            )  # fmt: skip
            return
        partial = gp.empty((self.launch.grid, 2), gp.float32)
        sizes = (self.channels, self.length, self.splits, self.chunk)
        self.stats(x, partial, _ptr(lengths), *sizes)
        self.launch(
            x, y, partial, _ptr(weight), _ptr(bias), *styles, _ptr(lengths), *sizes, eps,
            self.act, slope,
        )  # fmt: skip


def _ptr(a: GPUArray | None) -> GPUArray | int:
    return a if a is not None else 0


def _row_stride(a: GPUArray | None) -> int:
    return a.strides[0] // a.itemsize if a is not None else 0


@dataclass(frozen=True, slots=True)
class ReferenceInstanceNorm:
    """The CPU backend's instance norm: :mod:`.reference.channels` on the host buffers."""

    activation: str | None

    def __call__(self, x: GPUArray, y: GPUArray, *args: Any) -> None:
        weight, bias, gamma, beta, alpha, lengths, eps, slope = args
        h = [c.f32(a) if a is not None else None for a in (weight, bias, gamma, beta, alpha)]
        valid = lengths.to_numpy() if lengths is not None else None
        values = reference.instance_norm(
            c.f32(x), h[0], h[1], h[2], h[3], eps, self.activation, slope, h[4], lengths=valid
        )
        c.write_into(y, values)


def _splits(rows: int, length: int) -> int:
    """Blocks per row: one for a short row, else chunks of ``INSTANCE_CHUNK`` samples."""
    chunk = kl.constant("channels", "INSTANCE_CHUNK")
    if length <= chunk:
        return 1
    return min(kl.constant("channels", "INSTANCE_MAX_SPLITS"), -(-length // chunk))


def _plan_instance_cuda(
    rows: int, channels: int, length: int, activation: str | None, dtype: np.dtype[Any],
    device: int,
) -> InstanceNormPlan:  # fmt: skip
    c.check_int32("instance_norm", rows=rows, length=length)
    act = kl.constant("channels", _ACT_NAMES[activation])
    block = kl.constant("channels", "CHANNELS_BLOCK")
    splits = _splits(rows, length)
    if splits == 1:
        return InstanceNormPlan(Launch(_kernel("instance_norm", dtype), rows, block), channels,
                                length, act)  # fmt: skip
    c.check_int32("instance_norm", blocks=rows * splits)
    chunk = -(-length // splits)
    return InstanceNormPlan(
        Launch(_kernel("instance_apply", dtype), rows * splits, block), channels, length, act,
        splits, chunk, Launch(_kernel("instance_stats", dtype), rows * splits, block),
    )  # fmt: skip


def _plan_instance_numpy(
    rows: int, channels: int, length: int, activation: str | None, dtype: np.dtype[Any],
    device: int,
) -> ReferenceInstanceNorm:  # fmt: skip
    return ReferenceInstanceNorm(activation)


#: Instance-norm plans (one block per (b, c) row, or several per long row) by (rows, channels,
#: length, activation, dtype, device).
INSTANCE_PLANS: PlanCache[InstanceNormPlan | ReferenceInstanceNorm] = PlanCache(
    "instance_norm", per_backend(cpu=_plan_instance_numpy, cuda=_plan_instance_cuda)
)


def _lengths(lengths: Any, batch: int, op: str) -> GPUArray | None:
    """Valid lengths [B] as an int64 GPUArray (host sequences are uploaded), or None."""
    if lengths is None:
        return None
    if not isinstance(lengths, GPUArray):
        host = np.asarray(lengths)
        if host.dtype.kind not in "iu":
            raise TypeError(f"{op}: lengths must be integers, got dtype {host.dtype}")
        lengths = gp.from_numpy(np.ascontiguousarray(host, dtype=np.int64).reshape(-1))
    elif lengths.dtype != np.int64:
        raise TypeError(f"{op}: lengths must be an int64 GPUArray [B], got {lengths.dtype}")
    lengths = c.check_array(lengths, "lengths", ndim=1)
    if lengths.shape[0] != batch:
        raise ValueError(f"{op}: lengths must hold one length per batch row ({batch}), "
                         f"got shape {lengths.shape}")  # fmt: skip
    return lengths


def _instance(
    x: Any,
    weight: Any,
    bias: Any,
    gamma: Any,
    beta: Any,
    eps: float,
    activation: str | None,
    negative_slope: float,
    alpha: Any,
    lengths: Any,
    out: GPUArray | None,
    op: str,
) -> GPUArray:
    x = _signal(x, op)
    batch, channels, length = x.shape
    weight = _per_channel(weight, "weight", x, channels)
    bias = _per_channel(bias, "bias", x, channels)
    gamma, beta = _style(gamma, "gamma", x), _style(beta, "beta", x)
    eps = _eps(eps, op)
    if activation not in _ACT_NAMES:
        raise ValueError(
            f"{op}: activation must be None, 'leaky_relu' or 'snake', got {activation!r}"
        )
    slope = validation.real(negative_slope, "negative_slope", op, finite=True)
    alpha = _per_channel(alpha, "alpha", x, channels)
    if (activation == "snake") != (alpha is not None):
        raise ValueError(f"{op}: alpha (one per channel) goes with activation='snake', only")
    valid = _lengths(lengths, batch, op)
    c.check_out(out, x.shape, x.dtype)
    y = c.result(out, x.shape, x.dtype)
    if x.size == 0:
        return y
    plan = INSTANCE_PLANS.get(
        batch * channels, channels, length, activation, x.dtype, gp.get_device()
    )
    plan(x, y, weight, bias, gamma, beta, alpha, valid, eps, slope)
    return y


def instance_norm(
    x: GPUArray,
    weight: GPUArray | None = None,
    bias: GPUArray | None = None,
    eps: float = 1e-5,
    *,
    lengths: GPUArray | np.ndarray | None = None,
    out: GPUArray | None = None,
) -> GPUArray:
    """Instance norm of ``x`` [B, C, L]: each (b, c) row over L, then ``* weight + bias`` ([C]).

    ``torch.nn.functional.instance_norm`` without running statistics: biased variance from the
    centred values, float32 math. ``weight``/``bias`` may be any shape of C elements.
    ``lengths`` [B] (an int64 GPUArray, or host integers, uploaded): the valid samples of each
    row of a padded batch; the statistics cover those only and the rest is written as zeros.
    """
    return _instance(
        x, weight, bias, None, None, eps, None, 0.0, None, lengths, out, "instance_norm"
    )


def ada_in(
    x: GPUArray,
    gamma: GPUArray,
    beta: GPUArray,
    *,
    weight: GPUArray | None = None,
    bias: GPUArray | None = None,
    eps: float = 1e-5,
    activation: str | None = None,
    negative_slope: float = 0.2,
    alpha: GPUArray | None = None,
    lengths: GPUArray | np.ndarray | None = None,
    out: GPUArray | None = None,
) -> GPUArray:
    """Adaptive instance norm: ``act((1 + gamma) * instance_norm(x, weight, bias) + beta)``.

    ``x`` [B, C, L]; ``gamma`` and ``beta`` [B, C] (the two halves of the style projection
    ``fc(s)`` [B, 2C]: ``h[:, :C]`` and ``h[:, C:]`` are taken as they are, strided views
    need no copy). ``weight``/``bias`` [C] are the instance norm's own affine parameters
    (Kokoro's ``AdaIN1d`` has them; 1 and 0 when untrained). ``activation``: None,
    ``"leaky_relu"`` (``negative_slope``) or ``"snake"`` (with ``alpha`` [C]), fused into the
    same pass. ``lengths`` [B]: the valid samples of each row of a padded batch, as for
    :func:`instance_norm` (statistics over those, zeros after them: ready for a convolution).
    """
    if gamma is None or beta is None:
        raise TypeError("ada_in: gamma and beta must be GPUArrays [B, C], got None")
    return _instance(
        x, weight, bias, gamma, beta, eps, activation, negative_slope, alpha, lengths, out,
        "ada_in",
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class ArgsPlan:
    """A launch whose trailing size arguments are fixed: ``plan(*arrays, *scalars)``."""

    launch: Launch
    tail: tuple[int, ...]

    def __call__(self, *args: Any) -> None:
        self.launch(*args[:-1], *self.tail, *args[-1:])


@dataclass(frozen=True, slots=True)
class ReferenceChannelNorm:
    """The CPU backend's channel LayerNorm: ``plan(x, y, weight, bias, eps)``."""

    def __call__(self, x: GPUArray, y: GPUArray, weight: GPUArray, bias: Any, eps: float) -> None:
        b = c.f32(bias) if isinstance(bias, GPUArray) else None
        c.write_into(y, reference.channel_layernorm(c.f32(x), c.f32(weight), b, eps))


def _plan_channel_cuda(
    batch: int, channels: int, length: int, dtype: np.dtype[Any], device: int
) -> ArgsPlan:
    c.check_int32("channel_layernorm", channels=channels, length=length)
    positions = batch * length
    tiles = -(-positions // kl.constant("channels", "CHANNEL_NORM_POSITIONS"))
    launch = Launch(
        _kernel("channel_norm", dtype), max(1, min(_MAX_BLOCKS, tiles)),
        kl.constant("channels", "CHANNELS_BLOCK"),
    )  # fmt: skip
    return ArgsPlan(launch, (positions, channels, length))


def _plan_channel_numpy(
    batch: int, channels: int, length: int, dtype: np.dtype[Any], device: int
) -> ReferenceChannelNorm:
    return ReferenceChannelNorm()


#: Channel-LayerNorm plans by (batch, channels, length, dtype, device).
CHANNEL_PLANS: PlanCache[ArgsPlan | ReferenceChannelNorm] = PlanCache(
    "channel_layernorm", per_backend(cpu=_plan_channel_numpy, cuda=_plan_channel_cuda)
)


def channel_layernorm(
    x: GPUArray,
    weight: GPUArray,
    bias: GPUArray | None = None,
    eps: float = 1e-5,
    *,
    out: GPUArray | None = None,
) -> GPUArray:
    """LayerNorm over the channels of ``x`` [B, C, L] at each position, ``* weight + bias`` ([C]).

    The same as transposing to [B, L, C], :func:`pygpukit.ops.layernorm` and transposing back,
    in one pass without the copies.
    """
    x = _signal(x, "channel_layernorm")
    batch, channels, length = x.shape
    if weight is None:
        raise TypeError("channel_layernorm: weight must be a GPUArray [C], got None")
    w = _per_channel(weight, "weight", x, channels)
    assert w is not None
    b = _per_channel(bias, "bias", x, channels)
    eps = _eps(eps, "channel_layernorm")
    c.check_out(out, x.shape, x.dtype)
    y = c.result(out, x.shape, x.dtype)
    if x.size:
        CHANNEL_PLANS.get(batch, channels, length, x.dtype, gp.get_device())(x, y, w, _ptr(b), eps)
    return y


@dataclass(frozen=True, slots=True)
class ReferenceElementwise:
    """The CPU backend's Snake / LeakyReLU: ``plan(x, y, alpha_or_slope)``."""

    op: str

    def __call__(self, x: GPUArray, y: GPUArray, param: Any) -> None:
        if self.op == "snake":
            c.write_into(y, reference.snake(c.f32(x), c.f32(param)))
        else:
            c.write_into(y, reference.leaky_relu(c.f32(x), param))


@dataclass(frozen=True, slots=True)
class SnakePlan:
    """``plan(x, y, alpha)`` enqueues the Snake kernel."""

    launch: Launch
    total: int
    channels: int
    length: int

    def __call__(self, x: GPUArray, y: GPUArray, alpha: Any) -> None:
        self.launch(x, y, alpha, self.total, self.channels, self.length)


@dataclass(frozen=True, slots=True)
class LeakyPlan:
    """``plan(x, y, slope)`` enqueues the LeakyReLU kernel."""

    launch: Launch
    total: int

    def __call__(self, x: GPUArray, y: GPUArray, slope: Any) -> None:
        self.launch(x, y, self.total, slope)


def _plan_elementwise_cuda(
    op: str, shape: tuple[int, ...], dtype: np.dtype[Any], device: int
) -> SnakePlan | LeakyPlan:
    total = math.prod(shape)
    launch = Launch(_kernel(op, dtype), _grid(total), kl.constant("channels", "CHANNELS_BLOCK"))
    if op == "snake":
        c.check_int32("snake", channels=shape[1], length=shape[2])
        return SnakePlan(launch, total, shape[1], shape[2])
    return LeakyPlan(launch, total)


def _plan_elementwise_numpy(
    op: str, shape: tuple[int, ...], dtype: np.dtype[Any], device: int
) -> ReferenceElementwise:
    return ReferenceElementwise(op)


#: Snake / LeakyReLU plans by (op, shape, dtype, device).
ELEMENTWISE_PLANS: PlanCache[SnakePlan | LeakyPlan | ReferenceElementwise] = PlanCache(
    "channels_elementwise", per_backend(cpu=_plan_elementwise_numpy, cuda=_plan_elementwise_cuda)
)


def snake(x: GPUArray, alpha: GPUArray, *, out: GPUArray | None = None) -> GPUArray:
    """Snake activation: ``x + sin(alpha * x)**2 / alpha`` over ``x`` [B, C, L].

    ``alpha`` holds one value per channel (shape [C], or PyTorch's [1, C, 1]). ``out`` may be
    ``x`` (in place).
    """
    x = _signal(x, "snake")
    a = _per_channel(alpha, "alpha", x, x.shape[1])
    if a is None:
        raise TypeError("snake: alpha must be a GPUArray of one value per channel, got None")
    c.check_out(out, x.shape, x.dtype)
    y = c.result(out, x.shape, x.dtype)
    if x.size:
        ELEMENTWISE_PLANS.get("snake", tuple(x.shape), x.dtype, gp.get_device())(x, y, a)
    return y


def leaky_relu(
    x: GPUArray, negative_slope: float = 0.01, *, out: GPUArray | None = None
) -> GPUArray:
    """LeakyReLU: ``x`` where ``x >= 0``, else ``negative_slope * x``; any shape (contiguous).

    ``out`` may be ``x`` (in place).
    """
    x = c.check_array(x, "x", dtypes=c.FLOAT_DTYPES)
    slope = validation.real(negative_slope, "negative_slope", "leaky_relu", finite=True)
    c.check_out(out, x.shape, x.dtype)
    y = c.result(out, x.shape, x.dtype)
    if x.size:
        ELEMENTWISE_PLANS.get("leaky_relu", (x.size,), x.dtype, gp.get_device())(x, y, slope)
    return y
