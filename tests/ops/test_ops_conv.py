"""conv1d and conv_transpose1d against float64 NumPy: strides, padding, dilation, groups,
depthwise, odd lengths, every float dtype; and their typed errors."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ops_references import rel_err
from signal_references import conv1d_ref, conv_transpose1d_ref

import pygpukit as gp
from pygpukit import ops

TOL = {"float32": 1e-5, "float16": 3e-3, "bfloat16": 1e-2}
DTYPES = list(TOL)
Rand = Callable[..., np.ndarray]

#: (batch, c_in, length, c_out, kernel, stride, padding, dilation, groups)
CONV_CASES = [
    (2, 4, 17, 6, 3, 1, 1, 1, 1),  # odd length, "same"-like padding
    (1, 6, 31, 4, 5, 2, 2, 1, 2),  # stride, groups
    (3, 5, 23, 5, 3, 1, 3, 3, 5),  # depthwise, dilation
    (2, 3, 19, 6, 7, 3, 0, 2, 3),  # channel multiplier 2 (one input channel per group)
    (2, 8, 9, 3, 1, 1, 0, 1, 1),  # pointwise
    (1, 4, 8, 4, 4, 1, 0, 1, 1),  # even kernel, no padding
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_conv1d(rand: Rand, dtype: str, case: tuple[int, ...], with_bias: bool) -> None:
    batch, c_in, length, c_out, k, stride, pad, dil, groups = case
    dt = gp.dtypes.normalize(dtype)
    x, w, b = (
        rand((batch, c_in, length), dt),
        rand((c_out, c_in // groups, k), dt),
        rand((c_out,), dt),
    )
    bias = gp.from_numpy(b) if with_bias else None
    y = ops.conv1d(
        gp.from_numpy(x), gp.from_numpy(w), bias, stride=stride, padding=pad, dilation=dil,
        groups=groups,
    )  # fmt: skip
    ref = conv1d_ref(x, w, b if with_bias else None, stride, (pad, pad), dil, groups)
    assert y.shape == ref.shape and y.dtype == dt
    assert rel_err(y.to_numpy(), ref) < TOL[dtype]


@pytest.mark.parametrize("kernel,dilation", [(3, 1), (4, 1), (5, 2), (4, 3)])
def test_conv1d_padding_same_and_valid(rand: Rand, kernel: int, dilation: int) -> None:
    x, w, b = rand((2, 3, 15)), rand((5, 3, kernel)), rand((5,))
    span = dilation * (kernel - 1)
    y = ops.conv1d(gp.from_numpy(x), gp.from_numpy(w), gp.from_numpy(b), padding="same",
                   dilation=dilation)  # fmt: skip
    assert y.shape == (2, 5, 15)
    ref = conv1d_ref(x, w, b, 1, (span // 2, span - span // 2), dilation)
    assert rel_err(y.to_numpy(), ref) < 1e-5
    valid = ops.conv1d(gp.from_numpy(x), gp.from_numpy(w), padding="valid", dilation=dilation)
    assert rel_err(valid.to_numpy(), conv1d_ref(x, w, None, 1, (0, 0), dilation)) < 1e-5


def test_weight_cache_gives_the_same_result(rand: Rand) -> None:
    """``weight_cache`` only keeps a rearranged weight (the GPU's tensor-core path); the result
    is the same with it, in both directions, and a non-dict is refused."""
    x, w = gp.from_numpy(rand((2, 4, 12))), gp.from_numpy(rand((6, 4, 3)))
    cache: dict = {}
    for _ in range(2):
        got = ops.conv1d(x, w, padding=1, weight_cache=cache).to_numpy()
        np.testing.assert_array_equal(got, ops.conv1d(x, w, padding=1).to_numpy())
    wt = gp.from_numpy(rand((4, 5, 4)))
    got = ops.conv_transpose1d(x, wt, stride=2, weight_cache={}).to_numpy()
    np.testing.assert_array_equal(got, ops.conv_transpose1d(x, wt, stride=2).to_numpy())
    with pytest.raises(TypeError, match="weight_cache must be a dict"):
        ops.conv1d(x, w, weight_cache=[])  # type: ignore[arg-type]


def test_conv1d_out(rand: Rand) -> None:
    x, w = rand((2, 4, 12)), rand((6, 4, 3))
    out = gp.empty((2, 6, 10), gp.float32)
    y = ops.conv1d(gp.from_numpy(x), gp.from_numpy(w), out=out)
    assert y is out
    assert rel_err(out.to_numpy(), conv1d_ref(x, w, None)) < 1e-5


#: (batch, c_in, length, c_out, kernel, stride, padding, output_padding, dilation, groups)
TRANSPOSE_CASES = [
    (2, 4, 9, 6, 3, 2, 1, 1, 1, 1),  # the 2x upsampling of an AdaIN residual block
    (1, 6, 11, 4, 20, 10, 5, 0, 1, 2),  # iSTFTNet-like: K = 2 * stride, groups
    (2, 5, 7, 5, 3, 2, 1, 1, 1, 5),  # depthwise 2x upsampling (Kokoro's pool layer)
    (3, 3, 13, 6, 5, 3, 2, 2, 2, 3),  # dilation, channel multiplier 2
    (1, 4, 6, 3, 1, 1, 0, 0, 1, 1),  # K = 1
    (2, 2, 5, 3, 4, 1, 3, 0, 1, 1),  # stride 1, padding cutting into the taps
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", TRANSPOSE_CASES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_conv_transpose1d(rand: Rand, dtype: str, case: tuple[int, ...], with_bias: bool) -> None:
    batch, c_in, length, c_out, k, stride, pad, opad, dil, groups = case
    dt = gp.dtypes.normalize(dtype)
    x, w, b = (
        rand((batch, c_in, length), dt),
        rand((c_in, c_out // groups, k), dt),
        rand((c_out,), dt),
    )
    bias = gp.from_numpy(b) if with_bias else None
    y = ops.conv_transpose1d(
        gp.from_numpy(x), gp.from_numpy(w), bias, stride=stride, padding=pad,
        output_padding=opad, dilation=dil, groups=groups,
    )  # fmt: skip
    ref = conv_transpose1d_ref(x, w, b if with_bias else None, stride, pad, opad, dil, groups)
    assert y.shape == ref.shape and y.dtype == dt
    assert rel_err(y.to_numpy(), ref) < TOL[dtype]


def test_conv_transpose_is_the_adjoint_of_conv(rand: Rand) -> None:
    # <conv(x), y> == <x, conv_transpose(y)> with the same weight: a check independent of
    # either reference's formula.
    x, w, y = rand((2, 4, 21)), rand((6, 2, 5)), rand((2, 6, 8))
    cx = ops.conv1d(gp.from_numpy(x), gp.from_numpy(w), stride=2, padding=1, dilation=2, groups=2)
    assert cx.shape == y.shape
    # conv1d weight [C_out, C_in/g, K] is the transposed conv's [C_in', C_out'/g, K] with the
    # roles of the channels swapped.
    ty = ops.conv_transpose1d(gp.from_numpy(y), gp.from_numpy(w), stride=2, padding=1,
                              dilation=2, groups=2, output_padding=0)  # fmt: skip
    n = min(ty.shape[-1], x.shape[-1])
    left = cx.to_numpy().astype(np.float64) * y
    right = ty.to_numpy()[..., :n].astype(np.float64) * x[..., :n]
    # Both sides are float32 convolutions: their rounding scales with the terms' magnitudes,
    # not with the sums, which random signs may cancel to near zero.
    scale = float(np.sum(np.abs(left)) + np.sum(np.abs(right)))
    assert abs(float(np.sum(left)) - float(np.sum(right))) <= 1e-6 * scale


def test_conv_errors(rand: Rand) -> None:
    x = gp.from_numpy(rand((2, 4, 10)))
    w = gp.from_numpy(rand((6, 4, 3)))
    with pytest.raises(ValueError, match="groups = 3 must divide"):
        ops.conv1d(x, gp.from_numpy(rand((6, 1, 3))), groups=3)
    with pytest.raises(ValueError, match="does not fit"):
        ops.conv1d(x, gp.from_numpy(rand((6, 3, 3))))
    with pytest.raises(ValueError, match="shorter than the kernel"):
        ops.conv1d(x, gp.from_numpy(rand((6, 4, 11))))
    with pytest.raises(ValueError, match="needs stride = 1"):
        ops.conv1d(x, w, padding="same", stride=2)
    with pytest.raises(ValueError, match="padding"):
        ops.conv1d(x, w, padding="full")
    with pytest.raises(ValueError, match="stride"):
        ops.conv1d(x, w, stride=0)
    with pytest.raises(ValueError, match="must be 3-D"):
        ops.conv1d(gp.from_numpy(rand((4, 10))), w)
    with pytest.raises(TypeError, match="dtype"):
        ops.conv1d(x, gp.from_numpy(rand((6, 4, 3), np.float16)))
    with pytest.raises(ValueError, match="bias must have shape"):
        ops.conv1d(x, w, gp.from_numpy(rand((5,))))
    with pytest.raises(ValueError, match="out must have shape"):
        ops.conv1d(x, w, out=gp.empty((2, 6, 9), gp.float32))
    with pytest.raises(TypeError, match="integer"):
        ops.conv1d(x, w, dilation=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="output_padding"):
        ops.conv_transpose1d(x, gp.from_numpy(rand((4, 2, 3))), stride=2, output_padding=2)
    with pytest.raises(ValueError, match="does not fit"):
        ops.conv_transpose1d(x, gp.from_numpy(rand((5, 2, 3))))
    with pytest.raises(ValueError, match="groups = 3 must divide"):
        ops.conv_transpose1d(x, gp.from_numpy(rand((4, 2, 3))), groups=3)
    with pytest.raises(ValueError, match="leaves no output"):
        ops.conv_transpose1d(gp.from_numpy(rand((1, 4, 1))), gp.from_numpy(rand((4, 2, 1))),
                             padding=1)  # fmt: skip


def test_transpose_tiles_cover_every_output_once_with_all_its_inputs() -> None:
    """The tensor-core transposed convolution's tiling (host and kernel share the rule): every
    output belongs to one tile, and that tile holds every input position the output reads."""
    from pygpukit.ops._conv_mma import transpose_tiles

    rng = np.random.default_rng()
    for _ in range(300):
        length = int(rng.integers(1, 400))
        kernel = int(rng.integers(1, 24))
        stride = int(rng.integers(1, 12))
        dilation = int(rng.integers(1, 4))
        cols = int(rng.choice([16, 32, 64]))
        padding = int(rng.integers(0, max(1, dilation * (kernel - 1) // 2 + 1)))
        opad = int(rng.integers(0, max(stride, dilation)))
        out_length = (length - 1) * stride - 2 * padding + dilation * (kernel - 1) + opad + 1
        tiles = transpose_tiles(length, kernel, stride, dilation, cols)
        if out_length < 1 or tiles is None:
            continue
        bounds = [
            tiles.first_output(i, length, out_length, stride, padding)
            for i in range(tiles.count + 1)
        ]
        assert bounds[0] == 0 and bounds[-1] == out_length
        assert bounds == sorted(bounds)
        for i in range(tiles.count):
            lo = i * tiles.step
            for t in range(bounds[i], bounds[i + 1]):
                for k in range(kernel):
                    num = t + padding - k * dilation
                    if num >= 0 and num % stride == 0 and num // stride < length:
                        assert lo <= num // stride < lo + cols, (length, kernel, stride, t)


def test_tensor_core_plans_fit_shared_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """The implicit-GEMM planner's sizes (run on every backend with the launch stubbed out):
    windows hold every position a tile reads, stages fit the device, wide kernels fall back."""
    import pygpukit as gp
    from pygpukit.ops import _conv_mma as mm
    from pygpukit.ops.conv import Conv1dShape

    limit = 227 * 1024
    monkeypatch.setattr(mm, "_launch", lambda name, grid, smem, device: (name, grid, smem))
    monkeypatch.setattr(mm, "_smem_limit", lambda device: limit)
    monkeypatch.setattr(
        gp, "get_device_info", lambda device: {"sm_count": 132, "shared_mem_per_sm": 233472}
    )
    monkeypatch.setattr(mm, "_const", {"CONV_MMA_TRANS_ROWS": 80, "CONV_MMA_TRANS_COLS": 64}.get)
    dtypes = [np.dtype(gp.bfloat16), np.dtype(np.float32)]
    # batch, c_in, length, c_out, kernel, stride, pad_left, pad_right, dilation, groups, L_out
    for shape in [
        (1, 512, 2000, 512, 3, 1, 1, 1, 1, 1, 2000),
        (1, 80, 3000, 384, 3, 1, 1, 1, 1, 1, 3000),
        (1, 256, 301, 256, 11, 1, 25, 25, 5, 1, 301),
        (2, 22, 203, 256, 12, 6, 3, 3, 1, 1, 34),
        (2, 64, 199, 32, 5, 2, 2, 2, 1, 4, 100),
    ]:
        s = Conv1dShape(*shape)
        for dtype in dtypes:
            plan = mm.plan_conv(s, dtype, 0, "mma_64x64")
            assert plan is not None
            _name, grid, smem = plan.launch
            dims = dict(zip(("cg", "og", "groups", "length", "out_length", "kernel", "stride",
                             "pad", "dil", "pitch", "win", "wpitch", "rows", "outs", "halo",
                             "chunk"), plan.dims, strict=True))  # fmt: skip
            assert smem <= limit and dims["chunk"] % 16 == 0
            assert dims["win"] == (64 - 1) * s.stride + (s.kernel - 1) * s.dilation + 1
            assert dims["pitch"] >= dims["win"] and dims["pitch"] % 8 == 0
            assert grid[0] * 64 >= s.out_length and grid[1] * 64 >= s.c_out // s.groups
    # auto: 16-bit only, and only where the estimated cost is low (the Whisper stem yes; the
    # batch-8 512-channel convolution, 16 chunks over 3 waves of CTAs, no).
    stem = Conv1dShape(1, 80, 3000, 384, 3, 1, 1, 1, 1, 1, 3000)
    assert mm.plan_conv(stem, dtypes[0], 0, "auto") is not None
    assert mm.plan_conv(stem, dtypes[1], 0, "auto") is None
    big = Conv1dShape(8, 512, 2000, 512, 3, 1, 1, 1, 1, 1, 2000)
    assert mm.plan_conv(big, dtypes[0], 0, "auto") is None
    up = Conv1dShape(1, 512, 200, 256, 20, 10, 5, 0, 1, 1, 2000)
    assert mm.plan_transpose(up, dtypes[0], 0, "auto") is not None
    wide = Conv1dShape(1, 8, 100, 8, 60, 1, 0, 0, 1, 1, 41)
    assert mm.plan_conv(wide, dtypes[0], 0, "mma_64x64") is None  # the im2col path takes it
    assert (
        mm.plan_conv(Conv1dShape(1, 8, 50, 8, 3, 1, 1, 1, 1, 8, 50), dtypes[0], 0, "auto") is None
    )
    up = Conv1dShape(1, 512, 200, 256, 20, 10, 5, 0, 1, 1, 2000)
    for dtype in dtypes:
        plan = mm.plan_transpose(up, dtype, 0, "mma_64x64")
        assert plan is not None
        _name, grid, smem = plan.launch
        assert smem <= limit and grid == (4, 64, 1)  # 4 tiles of 62 new positions, 4 outputs a CTA
