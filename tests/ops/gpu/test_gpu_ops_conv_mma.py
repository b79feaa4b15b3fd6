"""The tensor-core conv1d / conv_transpose1d kernels (kernels/conv_mma.cu) on the GPU.

Every tile of the implicit GEMM and the transposed kernel against float64 NumPy at Kokoro's and
Whisper's shapes and at the awkward ones: odd lengths and channel counts (weight rows that are
not 16-byte aligned, channel chunks cut short), dilation, stride, groups, a single position,
and a weight that starts off a 16-byte boundary. The small cases also run through the
independent loop reference (``signal_references``).
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
from pygpukit.ops._conv_mma import MmaConvPlan
from pygpukit.ops.reference import conv as numpy_conv

pytestmark = pytest.mark.gpu

TOL = {"float32": 1e-5, "float16": 3e-3, "bfloat16": 1e-2}
#: float32 through the pinned tensor-core kernel is 3xTF32: about 1e-5 relative error over
#: reductions of a thousand terms and more (the tensor cores' fp32 accumulation), so its limit
#: sits between float32's and TF32's (5e-4). ``auto`` sends float32 to the matmul path.
TOL_3XTF32 = 5e-5
DTYPES = list(TOL)
KERNELS = ["mma_64x64", "mma_64x128", "mma_128x64"]
Rand = Callable[..., np.ndarray]

#: (batch, c_in, length, c_out, kernel, stride, padding, dilation, groups)
CONV_CASES = [
    (1, 512, 2000, 512, 3, 1, 1, 1, 1),  # Kokoro's decoder convolution
    (1, 80, 3000, 384, 3, 1, 1, 1, 1),  # Whisper's stem over 30 s of mel frames
    (1, 384, 3000, 384, 3, 2, 1, 1, 1),  # and its stride-2 second convolution
    (2, 514, 97, 96, 3, 1, 1, 1, 1),  # 514*3 weights a row: not 16-byte aligned
    (1, 256, 301, 256, 11, 1, 25, 5, 1),  # an iSTFTNet resblock's dilation 5
    (2, 22, 203, 256, 12, 6, 3, 1, 1),  # the harmonic source's stride-6 noise convolution
    (1, 128, 333, 22, 7, 1, 3, 1, 1),  # conv_post: 22 output channels
    (3, 17, 65, 40, 5, 2, 2, 2, 1),  # odd everything, one channel past a chunk
    (2, 64, 199, 32, 5, 2, 2, 1, 4),  # groups of 16 input channels
    (2, 96, 150, 96, 3, 1, 1, 1, 3),  # groups of 32
    (1, 512, 50, 512, 5, 1, 2, 1, 1),  # the text encoder's kernel 5
    (2, 80, 97, 48, 1, 1, 0, 1, 1),  # pointwise
    (1, 40, 1, 24, 1, 1, 0, 1, 1),  # one position
    (1, 8, 9, 8, 9, 1, 0, 1, 1),  # the kernel spans the input: one output
]

#: (batch, c_in, length, c_out, kernel, stride, padding, output_padding, dilation, groups)
TRANSPOSE_CASES = [
    (1, 512, 200, 256, 20, 10, 5, 0, 1, 1),  # Kokoro's x10 upsampling
    (1, 256, 2001, 128, 12, 6, 3, 0, 1, 1),  # and x6, many tiles
    (2, 128, 51, 64, 20, 10, 5, 0, 1, 1),
    (2, 64, 33, 48, 5, 3, 2, 2, 2, 4),  # dilation, output padding, groups
    (1, 40, 130, 36, 3, 1, 1, 0, 1, 1),  # stride 1
    (2, 24, 77, 30, 4, 2, 1, 1, 1, 1),  # odd channel counts
    (1, 16, 300, 8, 7, 2, 0, 1, 3, 1),  # a halo of 9 positions
    (1, 32, 1, 16, 20, 10, 5, 0, 1, 1),  # one input position
]

SMALL = 2_000_000  # below this many multiply-adds the loop references are quick enough


def _inputs(rand: Rand, dtype: str, *shapes: tuple[int, ...]) -> list[np.ndarray]:
    dt = gp.dtypes.normalize(dtype)
    # Scaled so every output stays near 1 whatever the reduction length.
    out = [rand(shapes[0], dt)]
    fan = int(np.prod(shapes[1][1:]))
    out += [(rand(s, np.float32) / np.sqrt(fan)).astype(dt) for s in shapes[1:]]
    return out


def _conv_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray, case: tuple[int, ...]) -> np.ndarray:
    batch, c_in, length, c_out, k, stride, pad, dil, groups = case
    if batch * c_out * length * (c_in // groups) * k < SMALL:
        return conv1d_ref(x, w, b, stride, (pad, pad), dil, groups)
    f64 = [a.astype(np.float64) for a in (x, w, b)]
    return numpy_conv.conv1d(*f64, stride, pad, pad, dil, groups)


def _transpose_ref(
    x: np.ndarray, w: np.ndarray, b: np.ndarray, case: tuple[int, ...]
) -> np.ndarray:
    batch, c_in, length, c_out, k, stride, pad, opad, dil, groups = case
    if batch * c_in * length * (c_out // groups) * k < SMALL:
        return conv_transpose1d_ref(x, w, b, stride, pad, opad, dil, groups)
    f64 = [a.astype(np.float64) for a in (x, w, b)]
    return numpy_conv.conv_transpose1d(*f64, stride, pad, opad, dil, groups)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv1d_mma(rand: Rand, dtype: str, kernel: str, case: tuple[int, ...]) -> None:
    batch, c_in, length, c_out, k, stride, pad, dil, groups = case
    x, w, b = _inputs(rand, dtype, (batch, c_in, length), (c_out, c_in // groups, k), (c_out,))
    args = [gp.from_numpy(a) for a in (x, w, b)]
    options = {"stride": stride, "padding": pad, "dilation": dil, "groups": groups}
    with config.override(conv_kernel=kernel):
        plan, _ = conv_module.conv1d_plan(*args, **options)
        assert isinstance(plan, MmaConvPlan)
        y = ops.conv1d(*args, **options).to_numpy()
    tol = TOL_3XTF32 if dtype == "float32" else TOL[dtype]
    assert rel_err(y, _conv_ref(x, w, b, case)) < tol


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", TRANSPOSE_CASES)
def test_conv_transpose1d_mma(rand: Rand, dtype: str, case: tuple[int, ...]) -> None:
    batch, c_in, length, c_out, k, stride, pad, opad, dil, groups = case
    x, w, b = _inputs(rand, dtype, (batch, c_in, length), (c_in, c_out // groups, k), (c_out,))
    args = [gp.from_numpy(a) for a in (x, w, b)]
    options = {
        "stride": stride, "padding": pad, "output_padding": opad, "dilation": dil,
        "groups": groups,
    }  # fmt: skip
    with config.override(conv_kernel="mma_64x64"):
        plan, _ = conv_module.conv_transpose1d_plan(*args, **options)
        assert isinstance(plan, MmaConvPlan)
        y = ops.conv_transpose1d(*args, **options).to_numpy()
    tol = TOL_3XTF32 if dtype == "float32" else TOL[dtype]
    assert rel_err(y, _transpose_ref(x, w, b, case)) < tol


@pytest.mark.parametrize("transposed", [False, True])
def test_conv_mma_without_bias_and_misaligned_weight(rand: Rand, transposed: bool) -> None:
    """A weight one element past a 16-byte boundary takes the kernels' plain loads."""
    dt = gp.bfloat16
    shape = (64, 48, 4) if transposed else (48, 64, 3)
    x = rand((2, 64, 130), dt)
    w = (rand(shape, np.float32) / np.sqrt(48 * 4)).astype(dt)
    flat = np.concatenate([rand((1,), dt), w.reshape(-1)])
    w_view = gp.from_numpy(flat)[1:].reshape(shape)
    assert w_view.data_ptr % 16 != 0
    xg = gp.from_numpy(x)
    with config.override(conv_kernel="mma_64x64"):
        y, ref = _misaligned_run(xg, x, w, w_view, transposed)
    assert rel_err(y, ref) < TOL["bfloat16"]


def _misaligned_run(
    xg: Any, x: np.ndarray, w: np.ndarray, w_view: Any, transposed: bool
) -> tuple[np.ndarray, np.ndarray]:
    if transposed:
        y = ops.conv_transpose1d(xg, w_view, stride=2, padding=1).to_numpy()
        return y, conv_transpose1d_ref(x, w, None, 2, 1)
    y = ops.conv1d(xg, w_view, padding=1).to_numpy()
    return y, conv1d_ref(x, w, None, 1, (1, 1))


def test_conv_mma_matches_gemm_path(rand: Rand) -> None:
    """The implicit GEMM and the im2col + matmul path agree (both fp32-accumulated)."""
    x, w, b = _inputs(rand, "float16", (2, 96, 257), (64, 96, 5), (64,))
    args = [gp.from_numpy(a) for a in (x, w, b)]
    with config.override(conv_kernel="mma_64x64"):
        got = ops.conv1d(*args, padding=2, dilation=2).to_numpy().astype(np.float64)
    with config.override(conv_kernel="gemm"):
        plan, _ = conv_module.conv1d_plan(*args, padding=2, dilation=2)
        assert not isinstance(plan, MmaConvPlan)
        want = ops.conv1d(*args, padding=2, dilation=2).to_numpy().astype(np.float64)
    assert rel_err(got, want) < 2e-3


def test_conv_mma_nan_propagates(rand: Rand) -> None:
    """A NaN input position reaches exactly the outputs whose window covers it."""
    x, w, b = _inputs(rand, "bfloat16", (1, 32, 100), (16, 32, 3), (16,))
    x[0, 5, 40] = np.nan
    with config.override(conv_kernel="mma_64x64"):
        y = ops.conv1d(*[gp.from_numpy(a) for a in (x, w, b)], padding=1).to_numpy()
    bad = np.isnan(y.astype(np.float32)).any(axis=1)[0]
    assert np.flatnonzero(bad).tolist() == [39, 40, 41]


def _torch() -> Any:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device here")
    return torch


@pytest.mark.parametrize("case", [CONV_CASES[0], CONV_CASES[1], CONV_CASES[4]])
def test_conv1d_mma_against_torch(rand: Rand, case: tuple[int, ...]) -> None:
    torch = _torch()
    batch, c_in, length, c_out, k, stride, pad, dil, groups = case
    x, w, b = _inputs(rand, "bfloat16", (batch, c_in, length), (c_out, c_in // groups, k), (c_out,))
    with config.override(conv_kernel="mma_64x128"):
        y = ops.conv1d(
            *[gp.from_numpy(a) for a in (x, w, b)], stride=stride, padding=pad, dilation=dil,
            groups=groups,
        ).to_numpy()  # fmt: skip
    tx, tw, tb = (torch.from_numpy(a.astype(np.float32)).cuda() for a in (x, w, b))
    want = torch.nn.functional.conv1d(
        tx.double(), tw.double(), tb.double(), stride=stride, padding=pad, dilation=dil,
        groups=groups,
    )  # fmt: skip
    assert rel_err(y, want.cpu().numpy()) < TOL["bfloat16"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize(
    "case",
    [
        (2, 96, 2403, 96, 7, 1, 3, 1, 96),  # depthwise k7 over a long signal
        (1, 32, 1500, 64, 3, 1, 2, 2, 32),  # channel multiplier 2, dilation
        (1, 8, 30000, 8, 3, 12, 1, 1, 8),  # stride 12
    ],
)
def test_conv1d_depthwise_long(rand: Rand, dtype: str, case: tuple[int, ...]) -> None:
    batch, c_in, length, c_out, k, stride, pad, dil, groups = case
    x, w, b = _inputs(rand, dtype, (batch, c_in, length), (c_out, c_in // groups, k), (c_out,))
    y = ops.conv1d(
        *[gp.from_numpy(a) for a in (x, w, b)], stride=stride, padding=pad, dilation=dil,
        groups=groups,
    ).to_numpy()  # fmt: skip
    f64 = [a.astype(np.float64) for a in (x, w, b)]
    want = numpy_conv.conv1d(*f64, stride, pad, pad, dil, groups)
    assert rel_err(y, want) < TOL[dtype]
