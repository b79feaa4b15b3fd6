"""pygpukit.ops.conv: 1-D convolution and transposed convolution over ``[B, C, L]`` signals.

Layouts and semantics are PyTorch's (``torch.nn.functional.conv1d`` / ``conv_transpose1d``):

- :func:`conv1d`: ``x`` [B, C_in, L], ``weight`` [C_out, C_in/groups, K] -> [B, C_out, L_out],
  ``L_out = (L + pad_left + pad_right - dilation*(K-1) - 1) // stride + 1``;
- :func:`conv_transpose1d`: ``weight`` [C_in, C_out/groups, K] -> [B, C_out, L_out],
  ``L_out = (L-1)*stride - 2*padding + dilation*(K-1) + output_padding + 1``.

float32, float16 and bfloat16; products summed in float32 and rounded once. On the GPU a
dense or grouped float16/bfloat16 convolution, in either direction, runs the tap-major
tensor-core implicit GEMM (``kernels/conv_igemm.cu``, planned by :mod:`._conv_igemm`): the
weight rearranged tap-major into a scratch copy, then one GEMM launch with the input windows
staged in shared memory (no im2col buffer) and the bias in the epilogue; the transposed
convolution of stride ``s`` runs as ``s`` interleaved ordinary convolutions in the same GEMM.
Where it does not apply (a transposed convolution with dilation, a window too wide for shared
memory) the older channel-major implicit GEMM (``kernels/conv_mma.cu``, :mod:`._conv_mma`) runs
where its estimated cost is low, else the matmul path: a gather of the input windows
(``im2col``) and one batched matmul (float32 always takes it, following ``PYGPUKIT_ALLOW_TF32``
as :func:`pygpukit.matmul` does; a kernel of width 1 is the matmul alone), and for the
transposed convolution the matmul ``W^T @ x`` followed by a gather of the taps (``col2im``).
The ``conv_kernel`` knob (``PYGPUKIT_CONV_KERNEL``) pins a tile of the older implicit GEMM
(float32 then runs it as 3xTF32, about 1e-5 relative error) or the matmul path (``gemm``).
Groups of one input channel (depthwise convolutions) run a direct kernel. See
``kernels/conv.cu``.

A repeated call with the same shapes, dtypes and options skips the argument checks: the
checked shape is cached by that signature.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import validation
from pygpukit.array import GPUArray

from . import _common as c
from . import _conv_igemm, _conv_mma, config
from . import _kernel_loader as kl
from ._conv_igemm import IgemmPlan
from ._conv_mma import MmaConvPlan
from ._plan import Launch, PlanCache, per_backend
from .reference import conv as reference

__all__ = ["conv1d", "conv_transpose1d"]

#: Blocks of the grid-stride kernels: enough to fill any current GPU several times over.
_MAX_BLOCKS = 65535
#: ``conv_kernel`` values that take the tap-major implicit GEMM where it applies.
_IGEMM_CHOICES = ("auto", "igemm")


@dataclass(frozen=True, slots=True)
class Conv1dShape:
    """The sizes of one convolution (either direction), resolved and checked once.

    For :func:`conv1d` ``length`` and ``out_length`` are the input and output lengths and
    ``pad_left``/``pad_right`` the zero padding; for :func:`conv_transpose1d` ``pad_left`` is
    ``padding`` (cut from both ends) and ``pad_right`` the ``output_padding``.
    """

    batch: int
    c_in: int
    length: int
    c_out: int
    kernel: int
    stride: int
    pad_left: int
    pad_right: int
    dilation: int
    groups: int
    out_length: int


def _positive(value: Any, name: str, op: str) -> int:
    return validation.size(value, name, op, minimum=1)


def _check_inputs(
    op: str, x: Any, weight: Any, bias: Any
) -> tuple[GPUArray, GPUArray, GPUArray | None]:
    x = c.check_array(x, "x", dtypes=c.FLOAT_DTYPES, ndim=3)
    weight = c.check_array(weight, "weight", dtypes=c.FLOAT_DTYPES, ndim=3)
    c.check_same_dtype(x, ("weight", weight))
    if bias is not None:
        bias = c.check_array(bias, "bias", ndim=1)
        c.check_same_dtype(x, ("bias", bias))
    return x, weight, bias


def _groups(op: str, groups: Any, c_in: int, c_out: int) -> int:
    groups = _positive(groups, "groups", op)
    for name, channels in (("input channels", c_in), ("output channels", c_out)):
        if channels % groups:
            raise ValueError(
                f"{op}: groups = {groups} must divide the {name} ({channels}); pick a "
                "divisor of both channel counts"
            )
    return groups


def _conv_shape(
    x: GPUArray, weight: GPUArray, stride: Any, padding: Any, dilation: Any, groups: Any
) -> Conv1dShape:
    op = "conv1d"
    batch, c_in, length = x.shape
    c_out, c_group, kernel = weight.shape
    groups = _groups(op, groups, c_in, c_out)
    if c_group * groups != c_in or kernel == 0:
        raise ValueError(
            f"{op}: weight {tuple(weight.shape)} does not fit x {tuple(x.shape)} with groups = "
            f"{groups}: expected [C_out, {c_in // groups}, K >= 1]"
        )
    stride = _positive(stride, "stride", op)
    dilation = _positive(dilation, "dilation", op)
    span = dilation * (kernel - 1)
    if isinstance(padding, str):
        padding = validation.choice(padding, ("same", "valid"), "padding", op)
        if padding == "same" and stride != 1:
            raise ValueError(f"{op}: padding='same' needs stride = 1, got stride = {stride}")
        pad_left = span // 2 if padding == "same" else 0
        pad_right = span - pad_left if padding == "same" else 0
    else:
        pad_left = pad_right = validation.size(padding, "padding", op)
    out_length = (length + pad_left + pad_right - span - 1) // stride + 1
    if out_length < 1:
        raise ValueError(
            f"{op}: the input of length {length} (padded {pad_left}+{pad_right}) is shorter "
            f"than the kernel's span {span + 1} (K = {kernel}, dilation = {dilation}); pad it "
            "or use a shorter kernel"
        )
    return Conv1dShape(
        batch, c_in, length, c_out, kernel, stride, pad_left, pad_right, dilation, groups,
        out_length,
    )  # fmt: skip


def _transpose_shape(
    x: GPUArray,
    weight: GPUArray,
    stride: Any,
    padding: Any,
    output_padding: Any,
    dilation: Any,
    groups: Any,
) -> Conv1dShape:
    op = "conv_transpose1d"
    batch, c_in, length = x.shape
    w_in, c_out_group, kernel = weight.shape
    if w_in != c_in or kernel == 0 or c_out_group == 0:
        raise ValueError(
            f"{op}: weight {tuple(weight.shape)} does not fit x {tuple(x.shape)}: expected "
            f"[{c_in}, C_out/groups, K >= 1] (PyTorch's ConvTranspose1d layout)"
        )
    groups = _positive(groups, "groups", op)
    if c_in % groups:
        raise ValueError(
            f"{op}: groups = {groups} must divide the input channels ({c_in}); pick a divisor"
        )
    stride = _positive(stride, "stride", op)
    dilation = _positive(dilation, "dilation", op)
    padding = validation.size(padding, "padding", op)
    output_padding = validation.size(output_padding, "output_padding", op)
    if output_padding >= max(stride, dilation):
        raise ValueError(
            f"{op}: output_padding = {output_padding} must be smaller than stride ({stride}) "
            f"or dilation ({dilation})"
        )
    out_length = (length - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1
    if out_length < 1:
        raise ValueError(
            f"{op}: padding = {padding} leaves no output for an input of length {length}; "
            "use less padding"
        )
    return Conv1dShape(
        batch, c_in, length, c_out_group * groups, kernel, stride, padding, output_padding,
        dilation, groups, out_length,
    )  # fmt: skip


def _grid(total: int) -> int:
    return max(1, min(_MAX_BLOCKS, -(-total // kl.constant("conv", "CONV_BLOCK"))))


def _launch(name: str, dtype: np.dtype[Any], total: int) -> Launch:
    kernel = kl.kernel("conv", f"{name}_{c.kernel_suffix(dtype)}")
    return Launch(kernel, _grid(total), kl.constant("conv", "CONV_BLOCK"))


@dataclass(frozen=True, slots=True)
class ConvPlan:
    """A forward convolution on the GPU: ``plan(x, weight, bias, y)`` enqueues it.

    ``kind``: ``"depthwise"`` (one direct kernel), ``"pointwise"`` (the matmul alone, K = 1
    with no stride or padding) or ``"im2col"`` (window gather, then the matmul).
    """

    s: Conv1dShape
    kind: str
    main: Launch | None
    bias: Launch | None

    def __call__(self, x: GPUArray, weight: GPUArray, bias: GPUArray | None, y: GPUArray) -> None:
        s = self.s
        total = s.batch * s.c_out * s.out_length
        if self.kind == "depthwise":
            assert self.main is not None
            self.main(
                x, weight, bias if bias is not None else 0, y, total, s.c_in, s.c_out,
                s.length, s.kernel, s.out_length, s.stride, s.pad_left, s.dilation,
            )  # fmt: skip
            return
        width = s.c_in // s.groups * s.kernel
        if self.kind == "pointwise":
            cols = x
        else:
            assert self.main is not None
            cols = gp.empty((s.batch, s.c_in * s.kernel, s.out_length), x.dtype)
            self.main(
                x, cols, cols.size, s.c_in, s.length, s.kernel, s.out_length, s.stride,
                s.pad_left, s.dilation,
            )  # fmt: skip
        _grouped_matmul(weight, cols, y, s.batch, s.groups, s.c_out // s.groups, width)
        if bias is not None:
            assert self.bias is not None
            self.bias(y, bias, total, s.c_out, s.out_length)


def _grouped_matmul(
    a: GPUArray, b: GPUArray, y: GPUArray, batch: int, groups: int, rows: int, inner: int
) -> None:
    """``y[n, g] = a[g] @ b[n, g]``: ``a`` viewed [G, rows, inner], ``b`` [B, G, inner, N]."""
    n = b.size // (batch * groups * inner)
    if groups == 1:
        # A 2-D left operand broadcasts over the batch with stride 0 (no copy).
        gp.matmul(a.reshape(rows, inner), b.reshape(batch, inner, n), out=y.reshape(batch, rows, n))
        return
    gp.matmul(
        a.reshape(1, groups, rows, inner),
        b.reshape(batch, groups, inner, n),
        out=y.reshape(batch, groups, rows, n),
    )


@dataclass(frozen=True, slots=True)
class TransposePlan:
    """A transposed convolution on the GPU: ``plan(x, weight, bias, y)`` enqueues it.

    ``kind``: ``"direct"`` (groups of one input channel: one kernel) or ``"col2im"`` (the
    matmul ``W^T @ x`` into per-tap columns, then their gather into the output).
    """

    s: Conv1dShape
    kind: str
    main: Launch

    def __call__(self, x: GPUArray, weight: GPUArray, bias: GPUArray | None, y: GPUArray) -> None:
        s = self.s
        total = s.batch * s.c_out * s.out_length
        b = bias if bias is not None else 0
        if self.kind == "direct":
            self.main(
                x, weight, b, y, total, s.c_in, s.c_out, s.length, s.kernel, s.out_length,
                s.stride, s.pad_left, s.dilation,
            )  # fmt: skip
            return
        c_in_group, c_out_group = s.c_in // s.groups, s.c_out // s.groups
        rows = c_out_group * s.kernel
        cols = gp.empty((s.batch, s.c_out * s.kernel, s.length), x.dtype)
        # weight [C_in, C_out/g, K] is [G, C_in/g, rows]; its transposed view is read in place.
        wt = weight.reshape(s.groups, c_in_group, rows).swapaxes(1, 2)
        if s.groups == 1:
            gp.matmul(wt.reshape(rows, c_in_group), x, out=cols)
        else:
            gp.matmul(
                wt.reshape(1, s.groups, rows, c_in_group),
                x.reshape(s.batch, s.groups, c_in_group, s.length),
                out=cols.reshape(s.batch, s.groups, rows, s.length),
            )
        self.main(
            cols, b, y, total, s.c_out, s.length, s.kernel, s.out_length, s.stride, s.pad_left,
            s.dilation,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class ReferenceConv:
    """The CPU backend's "plan": :mod:`.reference.conv` on the host buffers."""

    s: Conv1dShape
    transposed: bool

    def __call__(self, x: GPUArray, weight: GPUArray, bias: GPUArray | None, y: GPUArray) -> None:
        s = self.s
        b = c.f32(bias) if bias is not None else None
        if self.transposed:
            values = reference.conv_transpose1d(
                c.f32(x), c.f32(weight), b, s.stride, s.pad_left, s.pad_right, s.dilation,
                s.groups,
            )  # fmt: skip
        else:
            values = reference.conv1d(
                c.f32(x), c.f32(weight), b, s.stride, s.pad_left, s.pad_right, s.dilation,
                s.groups,
            )  # fmt: skip
        c.write_into(y, values)


def _tensor_core_plan(
    s: Conv1dShape, dtype: np.dtype[Any], device: int, *, transposed: bool
) -> IgemmPlan | MmaConvPlan | None:
    """The tensor-core plan ``conv_kernel`` picks for this shape, or None (the CUDA-core paths).

    An implicit-GEMM choice that does not take the shape falls back to ``auto``'s tile kernels.
    """
    choice = config.get().conv_kernel
    if choice in _IGEMM_CHOICES:
        igemm = _conv_igemm.plan(s, dtype, device, transposed=transposed)
        if igemm is not None:
            return igemm
        choice = "auto"
    if choice == "gemm":
        return None
    tiles = _conv_mma.plan_transpose if transposed else _conv_mma.plan_conv
    return tiles(s, dtype, device, choice)


def _plan_conv_cuda(
    s: Conv1dShape, dtype: np.dtype[Any], device: int
) -> ConvPlan | IgemmPlan | MmaConvPlan:
    total = s.batch * s.c_out * s.out_length
    c.check_int32("conv1d", length=s.length, out_length=s.out_length, channels=s.c_in * s.kernel)
    tensor_core = _tensor_core_plan(s, dtype, device, transposed=False)
    if tensor_core is not None:
        return tensor_core
    if s.c_in == s.groups:
        return ConvPlan(s, "depthwise", _launch("conv_depthwise", dtype, total), None)
    bias = _launch("conv_bias", dtype, total)
    if s.kernel == 1 and s.stride == 1 and s.pad_left == 0 and s.pad_right == 0:
        return ConvPlan(s, "pointwise", None, bias)
    cols = s.batch * s.c_in * s.kernel * s.out_length
    return ConvPlan(s, "im2col", _launch("conv_im2col", dtype, cols), bias)


def _plan_conv_numpy(s: Conv1dShape, dtype: np.dtype[Any], device: int) -> ReferenceConv:
    return ReferenceConv(s, transposed=False)


def _plan_transpose_cuda(
    s: Conv1dShape, dtype: np.dtype[Any], device: int
) -> TransposePlan | IgemmPlan | MmaConvPlan:
    total = s.batch * s.c_out * s.out_length
    c.check_int32(
        "conv_transpose1d", length=s.length, out_length=s.out_length, rows=s.c_out * s.kernel
    )
    tensor_core = _tensor_core_plan(s, dtype, device, transposed=True)
    if tensor_core is not None:
        return tensor_core
    if s.c_in == s.groups:
        return TransposePlan(s, "direct", _launch("conv_transpose_direct", dtype, total))
    return TransposePlan(s, "col2im", _launch("conv_col2im", dtype, total))


def _plan_transpose_numpy(s: Conv1dShape, dtype: np.dtype[Any], device: int) -> ReferenceConv:
    return ReferenceConv(s, transposed=True)


#: Convolution plans by (shape, dtype, device).
CONV_PLANS: PlanCache[ConvPlan | IgemmPlan | MmaConvPlan | ReferenceConv] = PlanCache(
    "conv1d", per_backend(cpu=_plan_conv_numpy, cuda=_plan_conv_cuda)
)
#: Transposed-convolution plans by (shape, dtype, device).
TRANSPOSE_PLANS: PlanCache[TransposePlan | IgemmPlan | MmaConvPlan | ReferenceConv] = PlanCache(
    "conv_transpose1d", per_backend(cpu=_plan_transpose_numpy, cuda=_plan_transpose_cuda)
)


#: Checked shapes by call signature (arrays' shapes and dtypes, bias presence, the integer or
#: string options): a repeated call skips the argument checks and the shape arithmetic.
_SHAPES: dict[tuple[Any, ...], Conv1dShape] = {}
_SHAPES_MAX = 1024
_ARRAYS = GPUArray


def _signature(
    op: str, x: Any, weight: Any, bias: Any, options: tuple[Any, ...]
) -> tuple[Any, ...] | None:
    """The cache key of a call whose arguments have the plain types the key describes, else None.

    Only exact ``int`` (and ``str`` padding) options take part: anything else goes through the
    full checks, which say what is wrong with it.
    """
    if not (isinstance(x, _ARRAYS) and isinstance(weight, _ARRAYS)):
        return None
    if bias is not None and not isinstance(bias, _ARRAYS):
        return None
    for value in options:
        if type(value) is not int and type(value) is not str:
            return None
    if not (x.is_contiguous() and weight.is_contiguous()):
        return None
    if bias is None:
        b_key: tuple[Any, ...] | None = None
    elif bias.is_contiguous():
        b_key = (bias.shape, bias.dtype)
    else:
        return None
    return (op, x.shape, x.dtype, weight.shape, weight.dtype, b_key, options)


def _checked_shape(
    op: str, x: Any, weight: Any, bias: Any, options: tuple[Any, ...]
) -> Conv1dShape:
    """The checked :class:`Conv1dShape` of a call to ``op`` (the one validation of both ops).

    ``options`` are ``(stride, padding, dilation, groups)`` for :func:`conv1d` and ``(stride,
    padding, output_padding, dilation, groups)`` for :func:`conv_transpose1d`.
    """
    key = _signature(op, x, weight, bias, options)
    if key is not None:
        found = _SHAPES.get(key)
        if found is not None:
            return found
    x, weight, bias = _check_inputs(op, x, weight, bias)
    if op == "conv1d":
        s = _conv_shape(x, weight, *options)
    else:
        s = _transpose_shape(x, weight, *options)
    c.check_shape(bias, "bias", (s.c_out,))
    if key is not None:
        if len(_SHAPES) >= _SHAPES_MAX:
            _SHAPES.clear()
        _SHAPES[key] = s
    return s


def _run(
    plans: PlanCache[Any],
    s: Conv1dShape,
    x: GPUArray,
    weight: GPUArray,
    bias: GPUArray | None,
    out: GPUArray | None,
    weight_cache: dict[Any, Any] | None = None,
) -> GPUArray:
    """Check ``out``, make the output and enqueue the plan of ``s`` (either direction)."""
    cache = _checked_cache(weight_cache)
    shape = (s.batch, s.c_out, s.out_length)
    if out is not None:
        c.check_out(out, shape, x.dtype)
        y = out
    else:
        y = gp.empty(shape, x.dtype)
    if y.size and x.size:
        plan = plans.get(s, x.dtype, gp.get_device())
        if isinstance(plan, IgemmPlan):
            plan(x, weight, bias, y, cache)
        else:
            plan(x, weight, bias, y)
    elif y.size:  # no input channels or batch: the output is the bias alone
        y.fill(0)
        if bias is not None:
            y += bias.reshape(1, s.c_out, 1)
    return y


def _checked_cache(cache: Any) -> dict[Any, Any] | None:
    if cache is not None and not isinstance(cache, dict):
        raise TypeError(f"weight_cache must be a dict (or None), got {type(cache).__name__}")
    return cache


def conv1d_plan(
    x: GPUArray,
    weight: GPUArray,
    bias: GPUArray | None = None,
    *,
    stride: int = 1,
    padding: int | str = 0,
    dilation: int = 1,
    groups: int = 1,
) -> tuple[ConvPlan | IgemmPlan | MmaConvPlan | ReferenceConv, Conv1dShape]:
    """The checked shape and the (cached) plan of ``conv1d(x, weight, bias, ...)``."""
    s = _checked_shape("conv1d", x, weight, bias, (stride, padding, dilation, groups))
    return CONV_PLANS.get(s, x.dtype, gp.get_device()), s


def conv1d(
    x: GPUArray,
    weight: GPUArray,
    bias: GPUArray | None = None,
    *,
    stride: int = 1,
    padding: int | str = 0,
    dilation: int = 1,
    groups: int = 1,
    out: GPUArray | None = None,
    weight_cache: dict[Any, Any] | None = None,
) -> GPUArray:
    """1-D convolution (cross-correlation, as PyTorch): ``[B, C_in, L] -> [B, C_out, L_out]``.

    ``weight`` is [C_out, C_in/groups, K] and ``bias`` [C_out], of ``x``'s dtype (float32,
    float16 or bfloat16; all C-contiguous). ``padding`` is zeros on both ends (an int), or
    ``"same"`` (stride 1; the extra zero on the right when the span is odd, as PyTorch) or
    ``"valid"`` (none). ``groups`` must divide both channel counts; ``groups == C_in`` is a
    depthwise convolution. ``out`` ([B, C_out, L_out], x's dtype, not overlapping ``x``)
    receives the result. Raises ``ValueError`` / ``TypeError`` for shapes or dtypes that do not
    fit, before anything runs; returns without waiting on the GPU.

    ``weight_cache``: a dict the caller keeps for this one weight (one per layer, say), empty
    at first: the tensor-core path keeps its rearranged copy of the weight there, so later
    calls skip that launch. Pass a fresh dict after changing the weight in place (the copy
    would be stale). Nothing is kept where no copy is made.
    """
    s = _checked_shape("conv1d", x, weight, bias, (stride, padding, dilation, groups))
    return _run(CONV_PLANS, s, x, weight, bias, out, weight_cache)


def conv_transpose1d_plan(
    x: GPUArray,
    weight: GPUArray,
    bias: GPUArray | None = None,
    *,
    stride: int = 1,
    padding: int = 0,
    output_padding: int = 0,
    groups: int = 1,
    dilation: int = 1,
) -> tuple[TransposePlan | IgemmPlan | MmaConvPlan | ReferenceConv, Conv1dShape]:
    """The checked shape and the (cached) plan of ``conv_transpose1d(x, weight, bias, ...)``."""
    options = (stride, padding, output_padding, dilation, groups)
    s = _checked_shape("conv_transpose1d", x, weight, bias, options)
    return TRANSPOSE_PLANS.get(s, x.dtype, gp.get_device()), s


def conv_transpose1d(
    x: GPUArray,
    weight: GPUArray,
    bias: GPUArray | None = None,
    *,
    stride: int = 1,
    padding: int = 0,
    output_padding: int = 0,
    groups: int = 1,
    dilation: int = 1,
    out: GPUArray | None = None,
    weight_cache: dict[Any, Any] | None = None,
) -> GPUArray:
    """1-D transposed convolution (PyTorch's ``conv_transpose1d``): [B, C_in, L] -> [B, C_out, L'].

    ``weight`` is [C_in, C_out/groups, K] (``ConvTranspose1d``'s layout), ``bias`` [C_out].
    ``L_out = (L - 1)*stride - 2*padding + dilation*(K - 1) + output_padding + 1``;
    ``output_padding`` must be smaller than ``stride`` or ``dilation``. Dtypes, ``groups``,
    ``out`` and ``weight_cache`` as :func:`conv1d`.
    """
    options = (stride, padding, output_padding, dilation, groups)
    s = _checked_shape("conv_transpose1d", x, weight, bias, options)
    return _run(TRANSPOSE_PLANS, s, x, weight, bias, out, weight_cache)
