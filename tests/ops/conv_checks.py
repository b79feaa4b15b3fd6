"""Shared pieces of the GPU convolution kernel tests (``gpu/test_gpu_ops_conv_{mma,igemm}.py``).

Both kernel families are checked the same way: inputs scaled so every output stays near 1,
a float64 reference (the independent loop reference of ``signal_references`` for small cases,
``pygpukit.ops.reference.conv`` above), PyTorch's float64 convolution on the GPU, a weight view
off a 16-byte boundary and a NaN input. The kernel under test is picked with
``config.override(conv_kernel=...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from ops_references import rel_err
from signal_references import conv1d_ref, conv_transpose1d_ref

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops import config
from pygpukit.ops import conv as conv_module
from pygpukit.ops.reference import conv as numpy_conv

Rand = Callable[..., np.ndarray]

#: Below this many multiply-adds the loop references are quick enough.
SMALL = 2_000_000


def scaled_inputs(rand: Rand, dtype: str, *shapes: tuple[int, ...]) -> list[np.ndarray]:
    """Random ``x`` of ``shapes[0]`` and weights (and bias) scaled by 1/sqrt(fan-in)."""
    dt = gp.dtypes.normalize(dtype)
    out = [rand(shapes[0], dt)]
    fan = int(np.prod(shapes[1][1:]))
    out += [(rand(s, np.float32) / np.sqrt(fan)).astype(dt) for s in shapes[1:]]
    return out


def conv_inputs(rand: Rand, dtype: str, case: tuple[int, ...]) -> list[np.ndarray]:
    """``x, w, b`` of a conv case (:func:`scaled_inputs`)."""
    batch, c_in, length, c_out, k, _, _, _, groups = case
    return scaled_inputs(rand, dtype, (batch, c_in, length), (c_out, c_in // groups, k), (c_out,))


def transpose_inputs(rand: Rand, dtype: str, case: tuple[int, ...]) -> list[np.ndarray]:
    """``x, w, b`` of a transpose case (:func:`scaled_inputs`)."""
    batch, c_in, length, c_out, k, _, _, _, _, groups = case
    return scaled_inputs(rand, dtype, (batch, c_in, length), (c_in, c_out // groups, k), (c_out,))


def conv_options(case: tuple[int, ...]) -> dict[str, int]:
    """The keyword arguments of a ``(batch, c_in, length, c_out, kernel, stride, padding,
    dilation, groups)`` case."""
    _, _, _, _, _, stride, pad, dil, groups = case
    return {"stride": stride, "padding": pad, "dilation": dil, "groups": groups}


def transpose_options(case: tuple[int, ...]) -> dict[str, int]:
    """The keyword arguments of a ``(batch, c_in, length, c_out, kernel, stride, padding,
    output_padding, dilation, groups)`` case."""
    _, _, _, _, _, stride, pad, opad, dil, groups = case
    return {
        "stride": stride, "padding": pad, "output_padding": opad, "dilation": dil,
        "groups": groups,
    }  # fmt: skip


def conv_reference(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, case: tuple[int, ...]
) -> Any:
    """The float64 convolution of a conv case (the loop reference when it is small)."""
    batch, c_in, length, c_out, k, stride, pad, dil, groups = case
    if batch * c_out * length * (c_in // groups) * k < SMALL:
        return conv1d_ref(x, w, b, stride, (pad, pad), dil, groups)
    f64 = [a.astype(np.float64) if a is not None else None for a in (x, w, b)]
    return numpy_conv.conv1d(*f64, stride, pad, pad, dil, groups)


def transpose_reference(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, case: tuple[int, ...]
) -> Any:
    """The float64 transposed convolution of a transpose case."""
    batch, c_in, length, c_out, k, stride, pad, opad, dil, groups = case
    if batch * c_in * length * (c_out // groups) * k < SMALL:
        return conv_transpose1d_ref(x, w, b, stride, pad, opad, dil, groups)
    f64 = [a.astype(np.float64) if a is not None else None for a in (x, w, b)]
    return numpy_conv.conv_transpose1d(*f64, stride, pad, opad, dil, groups)


def torch_cuda() -> Any:
    """``torch``, or a skip when PyTorch or its CUDA device is missing."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device here")
    return torch


def torch_reference(transposed: bool, *arrays: np.ndarray, **options: int) -> np.ndarray:
    """PyTorch's float64 ``conv1d`` / ``conv_transpose1d`` of ``x, w, b`` on the GPU."""
    torch = torch_cuda()
    tensors = [torch.from_numpy(a.astype(np.float64)).cuda() for a in arrays]
    fn = torch.nn.functional.conv_transpose1d if transposed else torch.nn.functional.conv1d
    return np.asarray(fn(*tensors, **options).cpu().numpy())


def misaligned_weight_error(rand: Rand, kernel: str, transposed: bool) -> float:
    """The relative error of a bfloat16 convolution, without bias, whose weight is a view one
    element past a 16-byte boundary (the kernels' plain loads and weight rearrangement)."""
    dt = gp.bfloat16
    shape = (64, 48, 4) if transposed else (48, 64, 3)
    x = rand((2, 64, 130), dt)
    w = (rand(shape, np.float32) / np.sqrt(48 * 4)).astype(dt)
    flat = np.concatenate([rand((1,), dt), w.reshape(-1)])
    w_view = gp.from_numpy(flat)[1:].reshape(shape)
    assert w_view.data_ptr % 16 != 0
    xg = gp.from_numpy(x)
    with config.override(conv_kernel=kernel):
        if transposed:
            y = ops.conv_transpose1d(xg, w_view, stride=2, padding=1).to_numpy()
            ref = conv_transpose1d_ref(x, w, None, 2, 1)
        else:
            y = ops.conv1d(xg, w_view, padding=1).to_numpy()
            ref = conv1d_ref(x, w, None, 1, (1, 1))
    return float(rel_err(y, ref))


def nan_positions(rand: Rand, kernel: str) -> list[int]:
    """The output positions a NaN at input position 40 reaches through a kernel-3, padding-1
    bfloat16 convolution (``[39, 40, 41]`` when it propagates exactly)."""
    x, w, b = scaled_inputs(rand, "bfloat16", (1, 32, 100), (16, 32, 3), (16,))
    x[0, 5, 40] = np.nan
    with config.override(conv_kernel=kernel):
        y = ops.conv1d(*[gp.from_numpy(a) for a in (x, w, b)], padding=1).to_numpy()
    bad = np.isnan(y.astype(np.float32)).any(axis=1)[0]
    return [int(i) for i in np.flatnonzero(bad)]


def case_error(
    rand: Rand,
    dtype: str,
    case: tuple[int, ...],
    kernel: str,
    plan_type: type | None = None,
    *,
    against: str = "numpy",
) -> float:
    """The relative error of a conv case (9 fields) or transpose case (10 fields) run with
    ``conv_kernel=kernel``, against the float64 reference (``against="torch"``: PyTorch's).

    With ``plan_type``, the case must plan that kernel family (not fall back to another path).
    """
    transposed = len(case) == 10
    x, w, b = (transpose_inputs if transposed else conv_inputs)(rand, dtype, case)
    options = (transpose_options if transposed else conv_options)(case)
    args = [gp.from_numpy(a) for a in (x, w, b)]
    plan_of = conv_module.conv_transpose1d_plan if transposed else conv_module.conv1d_plan
    op = ops.conv_transpose1d if transposed else ops.conv1d
    with config.override(conv_kernel=kernel):
        if plan_type is not None:
            plan, _ = plan_of(*args, **options)
            assert isinstance(plan, plan_type), f"{kernel} planned {type(plan).__name__}"
        y = op(*args, **options).to_numpy()
    if against == "torch":
        want = torch_reference(transposed, x, w, b, **options)
    else:
        want = (transpose_reference if transposed else conv_reference)(x, w, b, case)
    return float(rel_err(y, want))
