"""ops.decode_attention_single on the current backend (the CPU here, CUDA on a GPU machine).

Against ops.decode_attention (the split kernel + combine on the GPU) on random caches: lengths
0, 1, within and across the kernel's 256-key tiles, the whole cache and beyond it (clamped), GQA
groups, two sequences of different lengths, head dims 64 and 128.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ops_references import rel_err

import pygpukit as gp
from pygpukit import ops

Rand = Callable[..., np.ndarray]
TOL = {"float16": 3e-3, "bfloat16": 1e-2}


def up(a: np.ndarray) -> gp.GPUArray:
    return gp.from_numpy(np.ascontiguousarray(a))


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize(("hq", "hkv", "d"), [(9, 3, 64), (14, 2, 64), (4, 4, 128)])
@pytest.mark.parametrize("lens", [(1, 13), (255, 256), (257, 600), (600, 999)])
def test_matches_split_decode_attention(rand: Rand, dtype, hq, hkv, d, lens):
    cap = 600
    q = up(rand((2, hq, d), dtype))
    kc, vc = up(rand((2, hkv, cap, d), dtype)), up(rand((2, hkv, cap, d), dtype))
    seq = up(np.array(lens, np.int32))
    got = ops.decode_attention_single(q, kc, vc, seq)
    want = ops.decode_attention(q, kc, vc, seq)
    assert got.shape == (2, hq, d) and got.dtype == np.dtype(dtype)
    assert rel_err(got.to_numpy(), want.to_numpy()) < TOL[dtype]


def test_zero_length_gives_zeros_and_scale_is_used(rand: Rand):
    dt = "bfloat16"
    q, kc, vc = up(rand((2, 2, 64), dt)), up(rand((2, 1, 40, 64), dt)), up(rand((2, 1, 40, 64), dt))
    seq = up(np.array([0, 30], np.int32))
    out = gp.empty((2, 2, 64), dt)
    got = ops.decode_attention_single(q, kc, vc, seq, scale=0.3, out=out)
    assert got is out
    np.testing.assert_array_equal(got.to_numpy()[0], 0)
    want = ops.decode_attention(q, kc, vc, seq, scale=0.3).to_numpy()[1]
    assert rel_err(got.to_numpy()[1], want) < TOL[dt]


def test_argument_errors(rand: Rand):
    dt = "bfloat16"
    kc = up(rand((1, 2, 16, 64), dt))
    seq = up(np.array([3], np.int32))
    with pytest.raises(ValueError, match="multiple"):
        ops.decode_attention_single(up(rand((1, 3, 64), dt)), kc, kc, seq)
    with pytest.raises(ValueError, match="D in"):
        ops.decode_attention_single(up(rand((1, 4, 32), dt)), up(rand((1, 2, 16, 32), dt)),
                                    up(rand((1, 2, 16, 32), dt)), seq)  # fmt: skip
    with pytest.raises(TypeError):
        ops.decode_attention_single(up(rand((1, 4, 64), "float32")), kc, kc, seq)
