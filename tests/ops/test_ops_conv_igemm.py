"""The GEMM the tap-major implicit-GEMM planner describes is the convolution (CPU, float64).

``pygpukit.ops._conv_igemm.geometry`` turns a convolution, and a transposed convolution as
``stride`` interleaved ordinary ones, into GEMM rows, columns, taps and a window; the GPU kernel
(``kernels/conv_igemm.cu``) runs exactly that GEMM. Here the same rearranged weight and GEMM are
written in NumPy from the geometry alone and compared with the float64 reference convolutions,
so the decomposition (phases, flipped taps, left padding, the output scatter) is checked without
a GPU; ``tests/ops/gpu/test_gpu_ops_conv_igemm.py`` checks the kernel itself.
"""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit.ops import _conv_igemm as igemm
from pygpukit.ops.conv import Conv1dShape
from pygpukit.ops.reference import conv as reference


def _rearranged(w: np.ndarray, g: igemm.IgemmGeometry) -> np.ndarray:
    """Wp [groups, rows, taps, cpad] as ``conv_igemm_weights`` writes it."""
    wp = np.zeros((g.groups, g.rows, g.taps, g.cpad))
    m = np.arange(g.rows)
    for grp in range(g.groups):
        for j in range(g.taps):
            if g.up == 0:
                wp[grp, :, j, : g.cg] = w[grp * g.og + m, :, j]
                continue
            o, phase = m // g.up, m % g.up
            k = phase + (g.taps - 1 - j) * g.up
            ok = k < g.kernel
            block = w[grp * g.cg : (grp + 1) * g.cg][:, o[ok], k[ok]]  # [cg, rows_ok]
            wp[grp, ok, j, : g.cg] = block.T
    return wp


def _igemm(x: np.ndarray, w: np.ndarray, b: np.ndarray, g: igemm.IgemmGeometry) -> np.ndarray:
    batch = x.shape[0]
    wp = _rearranged(w, g)
    y = np.zeros((batch, g.groups * g.og, g.out_length))
    for n in range(batch):
        for grp in range(g.groups):
            xg = x[n, grp * g.cg : (grp + 1) * g.cg]
            cols = np.zeros((g.rows, g.cols))
            for j in range(g.taps):
                pos = np.arange(g.cols) * g.stride - g.pad + j * g.dil
                ok = (pos >= 0) & (pos < g.length)
                window = np.zeros((g.cpad, g.cols))
                window[: g.cg, ok] = xg[:, pos[ok]]
                cols += wp[grp, :, j] @ window
            bias = b[grp * g.og : (grp + 1) * g.og]
            if g.up == 0:
                y[n, grp * g.og : (grp + 1) * g.og] = cols + bias[:, None]
                continue
            u = np.arange(g.out_length) + g.up_pad
            q, phase = u // g.up, u % g.up
            o = np.arange(g.og)[:, None]
            y[n, grp * g.og : (grp + 1) * g.og] = cols[o * g.up + phase, q] + bias[:, None]
    return y


#: (batch, c_in, length, c_out, kernel, stride, padding, dilation, groups)
CONV_CASES = [
    (2, 22, 50, 16, 12, 6, 3, 1, 1),
    (1, 17, 33, 10, 5, 2, 2, 2, 1),
    (2, 8, 20, 6, 3, 1, 1, 1, 2),
    (1, 5, 9, 4, 9, 1, 0, 1, 1),
    (1, 40, 31, 8, 11, 1, 25, 5, 1),
]
#: (batch, c_in, length, c_out, kernel, stride, padding, output_padding, groups)
TRANSPOSE_CASES = [
    (1, 6, 7, 4, 20, 10, 5, 0, 1),
    (2, 5, 9, 3, 12, 6, 3, 0, 1),
    (1, 4, 5, 6, 5, 3, 2, 2, 2),
    (1, 3, 6, 2, 3, 1, 1, 0, 1),
    (1, 4, 4, 2, 4, 2, 1, 1, 1),
    (1, 3, 5, 2, 7, 2, 0, 1, 1),
    (1, 3, 5, 2, 3, 7, 0, 0, 1),
]


@pytest.mark.parametrize("chunk", igemm.CHUNKS)
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_geometry_is_the_convolution(
    rng: np.random.Generator, case: tuple[int, ...], chunk: int
) -> None:
    batch, c_in, length, c_out, k, stride, pad, dil, groups = case
    x = rng.standard_normal((batch, c_in, length))
    w = rng.standard_normal((c_out, c_in // groups, k))
    b = rng.standard_normal(c_out)
    out_length = (length + 2 * pad - dil * (k - 1) - 1) // stride + 1
    s = Conv1dShape(batch, c_in, length, c_out, k, stride, pad, pad, dil, groups, out_length)
    g = igemm.geometry(s, False, chunk)
    assert g is not None and g.cpad % chunk == 0 and g.cpad >= g.cg
    want = reference.conv1d(x, w, b, stride, pad, pad, dil, groups)
    np.testing.assert_allclose(_igemm(x, w, b, g), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", TRANSPOSE_CASES)
def test_transposed_geometry_is_interleaved_convolutions(
    rng: np.random.Generator, case: tuple[int, ...]
) -> None:
    batch, c_in, length, c_out, k, stride, pad, opad, groups = case
    x = rng.standard_normal((batch, c_in, length))
    w = rng.standard_normal((c_in, c_out // groups, k))
    b = rng.standard_normal(c_out)
    out_length = (length - 1) * stride - 2 * pad + (k - 1) + opad + 1
    s = Conv1dShape(batch, c_in, length, c_out, k, stride, pad, opad, 1, groups, out_length)
    g = igemm.geometry(s, True, 16)
    assert g is not None
    assert (g.rows, g.taps, g.stride, g.pad) == (c_out // groups * stride, -(-k // stride), 1,
                                                  g.taps - 1)  # fmt: skip
    # Every output position maps to a column of the GEMM.
    assert (out_length - 1 + pad) // stride < g.cols
    want = reference.conv_transpose1d(x, w, b, stride, pad, opad, 1, groups)
    np.testing.assert_allclose(_igemm(x, w, b, g), want, rtol=1e-12, atol=1e-12)


def test_transposed_dilation_has_no_geometry() -> None:
    s = Conv1dShape(1, 4, 10, 4, 3, 2, 0, 0, 2, 1, 23)
    assert igemm.geometry(s, True, 16) is None


def test_a_cta_holds_whole_output_channels() -> None:
    """The transposed GEMM's M tile is a multiple of the stride: every phase of a channel."""
    s = Conv1dShape(1, 512, 456, 256, 20, 10, 5, 0, 1, 1, 4560)
    g = igemm.geometry(s, True, 64)
    assert g is not None
    assert g.mrows(128) == 120 and g.mrows(128) % g.up == 0
    assert igemm.geometry(s, False, 64) is not None


@pytest.mark.parametrize(
    ("channels", "first"), [(1090, 64), (514, 64), (512, 64), (96, 32), (80, 16), (22, 32)]
)
def test_stage_width_prefers_wide_stages_with_little_padding(channels: int, first: int) -> None:
    order = igemm._pick_chunk(channels)
    assert order[0] == first and sorted(order) == sorted(igemm.CHUNKS)
