"""The tap-major implicit GEMM (kernels/conv_igemm.cu) of conv1d / conv_transpose1d on the GPU.

Against float64 NumPy (the loop reference for small cases) and PyTorch's ``conv1d`` /
``conv_transpose1d`` at every convolution shape Kokoro runs (its decoder, iSTFTNet resblocks
with dilation, the stride-6 harmonic-source convolution, the x10 and x6 transposed upsamplings)
and at the awkward ones: odd lengths and channel counts (channel padding of the stage), groups,
output padding, stride-1 transposed convolutions, one position, no bias, a weight view off a
16-byte boundary, a NaN input, both tile widths.
"""

from __future__ import annotations

import numpy as np
import pytest
from conv_checks import (
    Rand,
    case_error,
    conv_reference,
    misaligned_weight_error,
    nan_positions,
    scaled_inputs,
)
from ops_references import rel_err

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops import config
from pygpukit.ops import conv as conv_module
from pygpukit.ops._conv_igemm import IgemmPlan

pytestmark = pytest.mark.gpu

TOL = {"float16": 3e-3, "bfloat16": 1e-2}
DTYPES = list(TOL)

#: (batch, c_in, length, c_out, kernel, stride, padding, dilation, groups)
CONV_CASES = [
    (1, 512, 2000, 512, 3, 1, 1, 1, 1),  # Kokoro's decoder convolution
    (1, 514, 457, 1024, 3, 1, 1, 1, 1),  # decoder.encode: 514 channels, not a stage multiple
    (2, 1090, 97, 1024, 3, 1, 1, 1, 1),  # decoder.decode: asr, F0 and energy concatenated
    (1, 512, 150, 512, 5, 1, 2, 1, 1),  # the text encoder's kernel 5
    (1, 256, 2301, 256, 11, 1, 25, 5, 1),  # an iSTFTNet resblock, kernel 11 dilation 5
    (2, 128, 3001, 128, 7, 1, 9, 3, 1),  # kernel 7 dilation 3 at 128 channels
    (2, 22, 203, 256, 12, 6, 3, 1, 1),  # the harmonic source's stride-6 noise convolution
    (1, 22, 500, 128, 1, 1, 0, 1, 1),  # its pointwise twin
    (1, 128, 333, 22, 7, 1, 3, 1, 1),  # conv_post: 22 output channels
    (1, 512, 301, 1, 1, 1, 0, 1, 1),  # F0_proj: one output channel
    (1, 80, 3000, 384, 3, 1, 1, 1, 1),  # Whisper's stem
    (1, 384, 3000, 384, 3, 2, 1, 1, 1),  # and its stride-2 second convolution
    (3, 17, 65, 40, 5, 2, 2, 2, 1),  # odd everything
    (2, 64, 199, 32, 5, 2, 2, 1, 4),  # groups of 16 input channels
    (2, 96, 150, 96, 3, 1, 1, 1, 3),  # groups of 32
    (1, 40, 1, 24, 1, 1, 0, 1, 1),  # one position
    (1, 8, 9, 8, 9, 1, 0, 1, 1),  # the kernel spans the input: one output
]

#: (batch, c_in, length, c_out, kernel, stride, padding, output_padding, dilation, groups)
TRANSPOSE_CASES = [
    (1, 512, 456, 256, 20, 10, 5, 0, 1, 1),  # Kokoro's x10 upsampling
    (1, 256, 2001, 128, 12, 6, 3, 0, 1, 1),  # and x6
    (3, 128, 51, 64, 20, 10, 5, 0, 1, 1),
    (2, 64, 33, 48, 5, 3, 2, 2, 1, 4),  # output padding, groups
    (1, 40, 130, 36, 3, 1, 1, 0, 1, 1),  # stride 1: one phase
    (2, 24, 77, 30, 4, 2, 1, 1, 1, 1),  # odd channel counts
    (1, 16, 300, 8, 7, 2, 0, 1, 1, 1),  # a kernel that is not a multiple of the stride
    (1, 32, 1, 16, 20, 10, 5, 0, 1, 1),  # one input position
    (1, 48, 40, 20, 3, 7, 0, 0, 1, 1),  # fewer taps than the stride: zero phases
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv1d_igemm(rand: Rand, dtype: str, case: tuple[int, ...]) -> None:
    assert case_error(rand, dtype, case, "igemm", IgemmPlan) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", TRANSPOSE_CASES)
def test_conv_transpose1d_igemm(rand: Rand, dtype: str, case: tuple[int, ...]) -> None:
    assert case_error(rand, dtype, case, "igemm", IgemmPlan) < TOL[dtype]


def test_igemm_takes_16_bit_only(rand: Rand) -> None:
    """``igemm`` plans the implicit GEMM for bfloat16; float32 / depthwise take another path."""
    shapes = ((1, 64, 100), (32, 64, 3))
    with config.override(conv_kernel="igemm"):
        for dtype, expected in (("bfloat16", True), ("float32", False)):
            x, w = scaled_inputs(rand, dtype, *shapes)
            plan, _ = conv_module.conv1d_plan(gp.from_numpy(x), gp.from_numpy(w), padding=1)
            assert isinstance(plan, IgemmPlan) is expected
        x, w = scaled_inputs(rand, "bfloat16", (1, 64, 100), (64, 1, 7))
        plan, _ = conv_module.conv1d_plan(gp.from_numpy(x), gp.from_numpy(w), padding=3, groups=64)
        assert not isinstance(plan, IgemmPlan)
        x, w = scaled_inputs(rand, "bfloat16", (1, 16, 40), (16, 8, 4))
        plan, _ = conv_module.conv_transpose1d_plan(
            gp.from_numpy(x), gp.from_numpy(w), stride=2, dilation=2
        )
        assert not isinstance(plan, IgemmPlan)  # a transposed dilation: the older kernel


def test_auto_takes_igemm(rand: Rand) -> None:
    """The default plans the implicit GEMM for both directions of a 16-bit convolution."""
    x, w = scaled_inputs(rand, "float16", (2, 64, 100), (32, 64, 3))
    plan, _ = conv_module.conv1d_plan(gp.from_numpy(x), gp.from_numpy(w), padding=1)
    assert isinstance(plan, IgemmPlan)
    x, w = scaled_inputs(rand, "bfloat16", (2, 64, 100), (64, 32, 12))
    plan, _ = conv_module.conv_transpose1d_plan(gp.from_numpy(x), gp.from_numpy(w), stride=6)
    assert isinstance(plan, IgemmPlan)


def test_both_tile_widths_are_planned(rand: Rand) -> None:
    """A long signal takes 128-position tiles, a short one 64 (more CTAs for the SMs)."""
    widths = set()
    for length in (100, 200000):
        x, w = scaled_inputs(rand, "bfloat16", (1, 256, length), (256, 256, 3))
        with config.override(conv_kernel="igemm"):
            plan, _ = conv_module.conv1d_plan(gp.from_numpy(x), gp.from_numpy(w), padding=1)
        assert isinstance(plan, IgemmPlan)
        widths.add(plan.main.kernel.name.split("_")[2])
    assert widths == {"64", "128"}


@pytest.mark.parametrize("transposed", [False, True])
def test_igemm_without_bias_and_misaligned_weight(rand: Rand, transposed: bool) -> None:
    """No bias, and a weight one element past a 16-byte boundary (the rearrangement reads it)."""
    assert misaligned_weight_error(rand, "igemm", transposed) < TOL["bfloat16"]


def test_igemm_into_out_and_repeated(rand: Rand) -> None:
    """``out=`` receives the result; a second call (cached plan, fresh scratch) agrees."""
    case = (2, 96, 257, 64, 5, 1, 4, 2, 1)
    x, w, b = scaled_inputs(rand, "float16", (2, 96, 257), (64, 96, 5), (64,))
    args = [gp.from_numpy(a) for a in (x, w, b)]
    out = gp.empty((2, 64, 257), gp.float16)
    with config.override(conv_kernel="igemm"):
        ops.conv1d(*args, padding=4, dilation=2, out=out)
        again = ops.conv1d(*args, padding=4, dilation=2).to_numpy()
    got = out.to_numpy()
    assert rel_err(got, conv_reference(x, w, b, case)) < TOL["float16"]
    np.testing.assert_array_equal(got, again)


def test_igemm_nan_propagates(rand: Rand) -> None:
    """A NaN input position reaches exactly the outputs whose window covers it."""
    assert nan_positions(rand, "igemm") == [39, 40, 41]


#: Kokoro's convolutions at batch 4 (the batched vocoder) and Whisper's stem, vs PyTorch.
TORCH_CONV_CASES = [
    (4, 512, 460, 512, 3, 1, 1, 1, 1),
    (4, 256, 4600, 256, 11, 1, 25, 5, 1),
    (4, 128, 9000, 128, 7, 1, 9, 3, 1),
    (4, 128, 9000, 128, 3, 1, 1, 1, 1),
    (4, 22, 4600, 256, 12, 6, 3, 1, 1),
    (1, 80, 3000, 384, 3, 1, 1, 1, 1),
    (2, 64, 199, 32, 5, 2, 2, 1, 4),
]
TORCH_TRANSPOSE_CASES = [
    (4, 512, 460, 256, 20, 10, 5, 0, 1, 1),
    (4, 256, 4600, 128, 12, 6, 3, 0, 1, 1),
    (2, 64, 33, 48, 5, 3, 2, 2, 1, 4),
]


@pytest.mark.parametrize("case", TORCH_CONV_CASES)
def test_conv1d_igemm_against_torch(rand: Rand, case: tuple[int, ...]) -> None:
    error = case_error(rand, "bfloat16", case, "igemm", IgemmPlan, against="torch")
    assert error < TOL["bfloat16"]


@pytest.mark.parametrize("case", TORCH_TRANSPOSE_CASES)
def test_conv_transpose1d_igemm_against_torch(rand: Rand, case: tuple[int, ...]) -> None:
    error = case_error(rand, "bfloat16", case, "igemm", IgemmPlan, against="torch")
    assert error < TOL["bfloat16"]


@pytest.mark.parametrize("transposed", [False, True])
def test_weight_cache_keeps_one_rearranged_copy(rand: Rand, transposed: bool) -> None:
    """The first call fills the caller's dict, later ones reuse it: the same output, and a
    fresh dict after an in-place weight change gives the new weight's output."""
    if transposed:
        x, w, b = scaled_inputs(rand, "bfloat16", (1, 256, 301), (256, 128, 12), (128,))
        run = lambda xx, ww, cache: ops.conv_transpose1d(  # noqa: E731
            xx, ww, gp.from_numpy(b), stride=6, padding=3, weight_cache=cache
        )
    else:
        x, w, b = scaled_inputs(rand, "bfloat16", (1, 128, 3001), (128, 128, 7), (128,))
        run = lambda xx, ww, cache: ops.conv1d(  # noqa: E731
            xx, ww, gp.from_numpy(b), padding=9, dilation=3, weight_cache=cache
        )
    xg, wg = gp.from_numpy(x), gp.from_numpy(w)
    cache: dict = {}
    want = run(xg, wg, None).to_numpy()
    first = run(xg, wg, cache).to_numpy()
    assert len(cache) == 1
    (copy,) = cache.values()
    second = run(xg, wg, cache).to_numpy()
    assert len(cache) == 1 and next(iter(cache.values())) is copy
    np.testing.assert_array_equal(first, want)
    np.testing.assert_array_equal(second, want)
    wg[...] = (w * 2).astype(w.dtype)
    doubled = run(xg, wg, {}).to_numpy()
    assert rel_err(doubled, run(xg, wg, None).to_numpy()) == 0
    assert rel_err(doubled, want) > 0.1
