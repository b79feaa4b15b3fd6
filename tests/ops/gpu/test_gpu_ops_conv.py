"""conv1d and conv_transpose1d on the GPU: every path (im2col + matmul, pointwise, depthwise,
col2im, direct transposed) and dtype against float64 NumPy, the NumPy path and PyTorch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from ops_references import rel_err
from signal_references import conv1d_ref, conv_transpose1d_ref, torch_full_fp32

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops.reference import conv as numpy_conv

pytestmark = pytest.mark.gpu

TOL = {"float32": 1e-5, "float16": 3e-3, "bfloat16": 1e-2}
DTYPES = list(TOL)
Rand = Callable[..., np.ndarray]

#: (batch, c_in, length, c_out, kernel, stride, padding, dilation, groups)
CONV_CASES = [
    (2, 64, 301, 96, 3, 1, 1, 1, 1),  # dense, odd length
    (1, 128, 257, 128, 7, 1, 9, 3, 1),  # dilation (an iSTFTNet resblock's)
    (2, 64, 199, 32, 5, 2, 2, 1, 4),  # stride and groups (grouped matmul)
    (3, 96, 403, 96, 3, 1, 1, 1, 96),  # depthwise
    (2, 32, 129, 64, 5, 2, 2, 2, 32),  # one input channel per group, multiplier 2
    (2, 80, 97, 48, 1, 1, 0, 1, 1),  # pointwise
    (1, 80, 3000, 64, 3, 1, 1, 1, 1),  # Whisper's first conv over 30 s of mel frames
    (1, 64, 3000, 64, 3, 2, 1, 1, 1),  # and its stride-2 second conv
]

#: (batch, c_in, length, c_out, kernel, stride, padding, output_padding, dilation, groups)
TRANSPOSE_CASES = [
    (2, 128, 51, 64, 20, 10, 5, 0, 1, 1),  # iSTFTNet upsampling x10
    (1, 64, 203, 32, 12, 6, 3, 0, 1, 1),  # and x6
    (2, 96, 77, 96, 3, 2, 1, 1, 1, 96),  # depthwise x2 (AdaIN residual block pool)
    (2, 64, 33, 48, 5, 3, 2, 2, 2, 4),  # dilation, groups
    (1, 16, 41, 32, 3, 2, 1, 1, 1, 16),  # one input channel per group, multiplier 2
]


def torch_or_none() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def to_torch(torch: Any, a: np.ndarray | None, dtype: str) -> Any:
    if a is None:
        return None
    return torch.from_numpy(a.astype(np.float32)).cuda().to(getattr(torch, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv1d_gpu(rand: Rand, dtype: str, case: tuple[int, ...]) -> None:
    batch, c_in, length, c_out, k, stride, pad, dil, groups = case
    dt = gp.dtypes.normalize(dtype)
    x, w, b = (
        rand((batch, c_in, length), dt),
        rand((c_out, c_in // groups, k), dt),
        rand((c_out,), dt),
    )
    y = ops.conv1d(
        gp.from_numpy(x), gp.from_numpy(w), gp.from_numpy(b), stride=stride, padding=pad,
        dilation=dil, groups=groups,
    ).to_numpy()  # fmt: skip
    ref = conv1d_ref(x, w, b, stride, (pad, pad), dil, groups)
    assert rel_err(y, ref) < TOL[dtype]
    host = numpy_conv.conv1d(
        x.astype(np.float32), w.astype(np.float32), b.astype(np.float32), stride, pad, pad, dil,
        groups,
    )  # fmt: skip
    assert rel_err(y, host) < TOL[dtype]
    torch = torch_or_none()
    if torch is not None:
        with torch_full_fp32(torch):
            want = torch.nn.functional.conv1d(
                to_torch(torch, x, dtype), to_torch(torch, w, dtype), to_torch(torch, b, dtype),
                stride=stride, padding=pad, dilation=dil, groups=groups,
            )  # fmt: skip
        assert rel_err(y, want.float().cpu().numpy()) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", TRANSPOSE_CASES)
def test_conv_transpose1d_gpu(rand: Rand, dtype: str, case: tuple[int, ...]) -> None:
    batch, c_in, length, c_out, k, stride, pad, opad, dil, groups = case
    dt = gp.dtypes.normalize(dtype)
    x, w, b = (
        rand((batch, c_in, length), dt),
        rand((c_in, c_out // groups, k), dt),
        rand((c_out,), dt),
    )
    y = ops.conv_transpose1d(
        gp.from_numpy(x), gp.from_numpy(w), gp.from_numpy(b), stride=stride, padding=pad,
        output_padding=opad, dilation=dil, groups=groups,
    ).to_numpy()  # fmt: skip
    ref = conv_transpose1d_ref(x, w, b, stride, pad, opad, dil, groups)
    assert rel_err(y, ref) < TOL[dtype]
    torch = torch_or_none()
    if torch is not None:
        with torch_full_fp32(torch):
            want = torch.nn.functional.conv_transpose1d(
                to_torch(torch, x, dtype), to_torch(torch, w, dtype), to_torch(torch, b, dtype),
                stride=stride, padding=pad, output_padding=opad, dilation=dil, groups=groups,
            )  # fmt: skip
        assert rel_err(y, want.float().cpu().numpy()) < TOL[dtype]


def test_conv1d_same_padding_and_out_gpu(rand: Rand) -> None:
    x, w, b = rand((2, 32, 101)), rand((48, 32, 4)), rand((48,))
    out = gp.empty((2, 48, 101), gp.float32)
    y = ops.conv1d(gp.from_numpy(x), gp.from_numpy(w), gp.from_numpy(b), padding="same", out=out)
    assert y is out
    assert rel_err(out.to_numpy(), conv1d_ref(x, w, b, 1, (1, 2))) < 1e-5


def test_conv_layers_gpu(rand: Rand) -> None:
    from pygpukit.ops import layers

    x, w, b = rand((2, 64, 151)), rand((128, 64, 5)), rand((128,))
    layer = layers.Conv1d(gp.from_numpy(w), gp.from_numpy(b), padding=2)
    y = layer(gp.from_numpy(x)).to_numpy()
    assert rel_err(y, conv1d_ref(x, w, b, 1, (2, 2))) < 1e-5
    wt = rand((64, 32, 20))
    up = layers.ConvTranspose1d(gp.from_numpy(wt), stride=10, padding=5)
    z = up(gp.from_numpy(x)).to_numpy()
    assert rel_err(z, conv_transpose1d_ref(x, wt, None, 10, 5)) < 1e-5
