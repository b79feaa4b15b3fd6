"""The fused decode GEMVs on the GPU: every launch shape gives the same bits, and the greedy head
picks argmax of the logits it stores.

``decode_linear`` has entry points with 4, 2 and 1 output rows per warp (more warps, the same
loads in flight each), and a one-pass one for rows of up to 1024 elements. A row's sum is
defined by its lanes' chunks and order, not by how many rows a warp holds, so every epilogue
must give bit-identical results under each of them; a batched twin of the kernel relies on
that too. The greedy head (``decode_argmax``) walks rows
in a grid-stride loop with the same per-row arithmetic: its float32 logits must equal the
plain head's bit for bit, at vocabulary and model sizes of real models.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import ops

pytestmark = pytest.mark.gpu

_decode_linear = sys.modules["pygpukit.ops.decode_linear"]
_decode_head = sys.modules["pygpukit.ops.decode_head"]


def up(a: np.ndarray) -> gp.GPUArray:
    return gp.from_numpy(np.ascontiguousarray(a))


@pytest.fixture
def rows_per_warp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    def choose(plain: int, paired: int, one_pass: bool = False) -> None:
        monkeypatch.setitem(_decode_linear.ROWS_PER_WARP, "plain", plain)
        monkeypatch.setitem(_decode_linear.ROWS_PER_WARP, "paired", paired)
        monkeypatch.setattr(_decode_linear, "ONE_PASS", one_pass)
        _decode_linear.PLANS.clear()

    yield choose
    _decode_linear.PLANS.clear()


def _run_all(dtype: str, n: int, k: int, hq: int, hkv: int, d: int, seed: int):
    """Every epilogue once, on fixed inputs; returns every result array as NumPy."""
    rng = np.random.default_rng(seed)

    def r(shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(dtype)

    x, nw = up(r((1, k))), up(r((k,)))
    w, b = up(r((n, k))), up(r((n,)))
    res = up(r((1, n)))
    gate_up = up(r((2 * n, k)))
    cap = 9
    qkv = up(r(((hq + 2 * hkv) * d, k)))
    kc, vc = up(r((1, hkv, cap, d))), up(r((1, hkv, cap, d)))
    cos, sin = ops.rope_cos_sin(64, d)
    pos = up(np.array([13], np.int32))
    store = ops.decode_linear(x, w, b, norm_weight=nw)
    logits = ops.decode_linear(x, w, norm_weight=nw, out_dtype=gp.float32)
    ops.decode_linear(x, w, b, epilogue="residual", residual=res)
    swiglu = ops.decode_linear(x, gate_up, norm_weight=nw, epilogue="swiglu")
    q = ops.decode_linear(x, qkv, norm_weight=nw, epilogue="rope_kv",
                          rope_kv=ops.RopeKV(cos, sin, pos, kc, vc, hq))  # fmt: skip
    return [a.to_numpy() for a in (store, logits, res, swiglu, q, kc, vc)]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize(
    ("n", "k", "hq", "hkv", "d"),
    [(896, 4864, 14, 2, 64), (896, 896, 14, 2, 64), (576, 1536, 9, 3, 64), (37, 136, 3, 1, 12)],
)
def test_every_rows_per_warp_gives_the_same_bits(rows_per_warp, dtype, n, k, hq, hkv, d):
    seed = int(np.random.default_rng().integers(1 << 31))
    rows_per_warp(4, 4)
    want = _run_all(dtype, n, k, hq, hkv, d, seed)
    for plain, paired, one_pass in ((2, 2, False), (1, 4, False), (1, 2, False), (4, 4, True)):
        if d // 2 % (paired // 2):
            continue
        rows_per_warp(plain, paired, one_pass)
        got = _run_all(dtype, n, k, hq, hkv, d, seed)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w, err_msg=f"r{plain} r{paired} one pass {one_pass}")


@pytest.mark.parametrize(("n", "k"), [(151936, 896), (49152, 576), (32000, 4096), (1001, 64)])
@pytest.mark.parametrize("blocks_per_sm", [1, 8])
def test_greedy_head_logits_are_the_plain_heads_bits(monkeypatch, rng, n, k, blocks_per_sm):
    monkeypatch.setattr(_decode_head, "HEAD_BLOCKS_PER_SM", blocks_per_sm)
    _decode_head.PLANS.clear()
    dt = "bfloat16"
    x = up(rng.standard_normal((1, k), np.float32).astype(dt))
    nw = up((1 + 0.1 * rng.standard_normal(k, np.float32)).astype(dt))
    w = up((rng.standard_normal((n, k), np.float32) * 0.02).astype(dt))
    want = ops.decode_linear(x, w, norm_weight=nw, out_dtype=gp.float32).to_numpy().reshape(-1)
    logits, out = gp.zeros((n,), gp.float32), gp.zeros((1,), gp.int32)
    bound = ops.bind_decode_argmax(x, w, out=out, norm_weight=nw, logits=logits)
    for _ in range(3):  # the kernel's scratch words must come back to zero each time
        bound()
        np.testing.assert_array_equal(logits.to_numpy(), want)
        assert int(out.to_numpy()[0]) == int(np.argmax(want))
    _decode_head.PLANS.clear()
