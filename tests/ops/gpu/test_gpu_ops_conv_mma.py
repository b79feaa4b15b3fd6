"""The tensor-core conv1d / conv_transpose1d kernels (kernels/conv_mma.cu) on the GPU.

Every tile of the implicit GEMM and the transposed kernel against float64 NumPy at Kokoro's and
Whisper's shapes and at the awkward ones: odd lengths and channel counts (weight rows that are
not 16-byte aligned, channel chunks cut short), dilation, stride, groups, a single position,
and a weight that starts off a 16-byte boundary. The small cases also run through the
independent loop reference (``signal_references``).
"""

from __future__ import annotations

import numpy as np
import pytest
from conv_checks import (
    Rand,
    case_error,
    conv_inputs,
    conv_options,
    misaligned_weight_error,
    nan_positions,
    scaled_inputs,
)
from ops_references import rel_err

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

#: (dtype, tile, case) whose smallest pipeline stage needs more shared memory than a block may
#: use on SM 9.0 (227 KiB): the float32 128-row tile over the 12 taps of the stride-6 noise
#: convolution needs about 250 KB at its smallest (16-channel) chunk. The pinned tile then plans
#: the matmul path, which must still be right.
OVER_SHARED_MEMORY = {("float32", "mma_128x64", (2, 22, 203, 256, 12, 6, 3, 1, 1))}

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


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv1d_mma(rand: Rand, dtype: str, kernel: str, case: tuple[int, ...]) -> None:
    if (dtype, kernel, case) in OVER_SHARED_MEMORY:
        assert case_error(rand, dtype, case, kernel, conv_module.ConvPlan) < TOL[dtype]
        return
    tol = TOL_3XTF32 if dtype == "float32" else TOL[dtype]
    assert case_error(rand, dtype, case, kernel, MmaConvPlan) < tol


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", TRANSPOSE_CASES)
def test_conv_transpose1d_mma(rand: Rand, dtype: str, case: tuple[int, ...]) -> None:
    tol = TOL_3XTF32 if dtype == "float32" else TOL[dtype]
    assert case_error(rand, dtype, case, "mma_64x64", MmaConvPlan) < tol


@pytest.mark.parametrize("transposed", [False, True])
def test_conv_mma_without_bias_and_misaligned_weight(rand: Rand, transposed: bool) -> None:
    """A weight one element past a 16-byte boundary takes the kernels' plain loads."""
    assert misaligned_weight_error(rand, "mma_64x64", transposed) < TOL["bfloat16"]


def test_conv_mma_matches_gemm_path(rand: Rand) -> None:
    """The implicit GEMM and the im2col + matmul path agree (both fp32-accumulated)."""
    x, w, b = scaled_inputs(rand, "float16", (2, 96, 257), (64, 96, 5), (64,))
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
    assert nan_positions(rand, "mma_64x64") == [39, 40, 41]


@pytest.mark.parametrize("case", [CONV_CASES[0], CONV_CASES[1], CONV_CASES[4]])
def test_conv1d_mma_against_torch(rand: Rand, case: tuple[int, ...]) -> None:
    assert case_error(rand, "bfloat16", case, "mma_64x128", against="torch") < TOL["bfloat16"]


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
    _, _, _, _, _, stride, pad, dil, groups = case
    x, w, b = conv_inputs(rand, dtype, case)
    y = ops.conv1d(*[gp.from_numpy(a) for a in (x, w, b)], **conv_options(case)).to_numpy()
    f64 = [a.astype(np.float64) for a in (x, w, b)]
    want = numpy_conv.conv1d(*f64, stride, pad, pad, dil, groups)
    assert rel_err(y, want) < TOL[dtype]
