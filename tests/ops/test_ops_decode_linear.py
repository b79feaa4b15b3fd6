"""ops.decode_linear and ops.decode_advance on the current backend (the CPU here, CUDA on a GPU).

Each fused form against the unfused ops it replaces, called one after the other on the same
backend (rmsnorm, linear / gemv, add, silu_mul, rope_kv_append), on fresh random data with odd
sizes: N not a multiple of a block's rows, K a multiple of 8 (the fused kernel) or not (the
composed fallback), head dims and intermediate sizes whose halves are odd (fallback) or even.
Caches start random, so rows that must stay untouched are checked too.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ops_references import rel_err

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops.reference import rope as ref_rope

Rand = Callable[..., np.ndarray]
TOL = {"float32": 1e-5, "float16": 3e-3, "bfloat16": 1e-2}
DTYPES = list(TOL)


def up(a: np.ndarray) -> gp.GPUArray:
    return gp.from_numpy(np.ascontiguousarray(a))


def weight(rand: Rand, n: int, k: int, dtype: str) -> gp.GPUArray:
    """A random [N, K] weight scaled like a trained one (outputs of order 1, no fp16 overflow)."""
    return up((rand((n, k)) / np.sqrt(k)).astype(dtype))


def _normed(x: gp.GPUArray, norm_w: gp.GPUArray | None, eps: float) -> gp.GPUArray:
    row = x.reshape(1, -1)
    return row if norm_w is None else ops.rmsnorm(row, norm_w, eps)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n", "k"), [(40, 64), (37, 200), (129, 72), (24, 100), (600, 576)])
@pytest.mark.parametrize("norm", [False, True])
def test_store_matches_rmsnorm_then_linear(rand: Rand, dtype: str, n: int, k: int, norm: bool):
    x, w, b, nw = up(rand((k,), dtype)), weight(rand, n, k, dtype), up(rand((n,), dtype)), None
    if norm:
        nw = up(rand((k,), dtype))
    got = ops.decode_linear(x, w, b, norm_weight=nw, eps=1e-5)
    want = ops.linear(_normed(x, nw, 1e-5), w, b)
    assert got.shape == (n,) and got.dtype == np.dtype(dtype)
    assert rel_err(got.to_numpy(), want.to_numpy().reshape(-1)) < TOL[dtype]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(("n", "k"), [(37, 64), (3001, 136)])
def test_float32_logits_match_gemv(rand: Rand, dtype: str, n: int, k: int):
    x, w, nw = up(rand((1, k), dtype)), weight(rand, n, k, dtype), up(rand((k,), dtype))
    out = gp.empty((1, n), gp.float32)
    got = ops.decode_linear(x, w, norm_weight=nw, out_dtype=gp.float32, out=out)
    want = ops.gemv(_normed(x, nw, 1e-6), w, out_dtype=gp.float32)
    assert got is out
    assert rel_err(got.to_numpy(), want.to_numpy()) < 1e-5
    # Unrounded: most logits are not bf16/f16 values.
    values = got.to_numpy()
    assert np.mean(values != values.astype(dtype).astype(np.float32)) > 0.5


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n", "k"), [(40, 64), (129, 72), (24, 100)])
def test_residual_epilogue_adds_in_place(rand: Rand, dtype: str, n: int, k: int):
    x, w, b = up(rand((k,), dtype)), weight(rand, n, k, dtype), up(rand((n,), dtype))
    res0 = rand((1, n), dtype)
    res = up(res0)
    got = ops.decode_linear(x, w, b, epilogue="residual", residual=res)
    want = gp.add(ops.linear(x.reshape(1, -1), w, b), up(res0))
    assert got is res
    assert rel_err(res.to_numpy(), want.to_numpy()) < TOL[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("inter", "k"), [(18, 64), (7, 64), (100, 136), (1536, 576)])
@pytest.mark.parametrize("norm", [False, True])
def test_swiglu_epilogue(rand: Rand, dtype: str, inter: int, k: int, norm: bool):
    x, w = up(rand((1, k), dtype)), weight(rand, 2 * inter, k, dtype)
    nw = up(rand((k,), dtype)) if norm else None
    got = ops.decode_linear(x, w, norm_weight=nw, epilogue="swiglu")
    want = ops.silu_mul(ops.linear(_normed(x, nw, 1e-6), w))
    assert got.shape == (1, inter)
    assert rel_err(got.to_numpy(), want.to_numpy()) < TOL[dtype]


def _rope_case(rng: np.random.Generator, rand: Rand, dtype: str, hq: int, hkv: int, d: int):
    cap, max_pos, k = 11, 40, 72
    x, nw = up(rand((1, k), dtype)), up(rand((k,), dtype))
    w, b = weight(rand, (hq + 2 * hkv) * d, k, dtype), up(rand(((hq + 2 * hkv) * d,), dtype))
    kc0, vc0 = rand((1, hkv, cap, d), dtype), rand((1, hkv, cap, d), dtype)
    pos = int(rng.integers(cap, max_pos))  # past the capacity: the slot wraps around
    cos, sin = ops.rope_cos_sin(max_pos, d)
    return x, nw, w, b, kc0, vc0, pos, cos, sin


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("hq", "hkv", "d"), [(3, 1, 12), (4, 2, 64), (2, 1, 10)])
def test_rope_kv_epilogue_matches_rope_kv_append(rng, rand: Rand, dtype: str, hq, hkv, d):
    x, nw, w, b, kc0, vc0, pos, cos, sin = _rope_case(rng, rand, dtype, hq, hkv, d)
    position = up(np.array([pos], np.int32))
    kc, vc = up(kc0), up(vc0)
    rope = ops.RopeKV(cos, sin, position, kc, vc, hq)
    got = ops.decode_linear(x, w, b, norm_weight=nw, epilogue="rope_kv", rope_kv=rope)

    kw, vw = up(kc0), up(vc0)
    proj = ops.linear(ops.rmsnorm(x, nw), w, b)
    slot = up(np.array([[pos % kc0.shape[2]]], np.int32))
    want = ops.rope_kv_append(proj.reshape(1, 1, -1), cos, sin, position.reshape(1, 1), kw, vw,
                              slot, q_heads=hq)  # fmt: skip
    assert got.shape == (1, hq * d)
    assert rel_err(got.to_numpy(), want.to_numpy().reshape(1, -1)) < TOL[dtype]
    s = pos % kc0.shape[2]
    for cache, ref, start in ((kc, kw, kc0), (vc, vw, vc0)):
        c, r = cache.to_numpy(), ref.to_numpy()
        assert rel_err(c[:, :, s], r[:, :, s]) < TOL[dtype]
        untouched = np.delete(np.arange(kc0.shape[2]), s)
        np.testing.assert_array_equal(c[:, :, untouched], start[:, :, untouched])


def test_rope_kv_epilogue_rotates_like_an_independent_reference(rng, rand: Rand):
    """float32, no norm: q and k rotated by the position's angles, v stored as projected."""
    hq, hkv, d = 2, 1, 8
    x, _, w, b, kc0, vc0, pos, cos, sin = _rope_case(rng, rand, "float32", hq, hkv, d)
    position = up(np.array([pos], np.int32))
    kc, vc = up(kc0), up(vc0)
    got = ops.decode_linear(x, w, b, epilogue="rope_kv",
                            rope_kv=ops.RopeKV(cos, sin, position, kc, vc, hq))  # fmt: skip
    proj = x.to_numpy().astype(np.float64) @ w.to_numpy().T.astype(np.float64) + b.to_numpy()
    heads = proj.reshape(1, hq + 2 * hkv, d)
    cs, sn = cos.to_numpy()[pos][None], sin.to_numpy()[pos][None]
    q = ref_rope.rotate(heads[:, :hq], cs, sn, d, False)
    k = ref_rope.rotate(heads[:, hq : hq + hkv], cs, sn, d, False)
    s = pos % kc0.shape[2]
    assert rel_err(got.to_numpy().reshape(q.shape), q) < 1e-5
    assert rel_err(kc.to_numpy()[0, :, s], k[0]) < 1e-5
    assert rel_err(vc.to_numpy()[0, :, s], heads[0, hq + hkv :]) < 1e-5


def test_bound_call_reads_the_arrays_again(rand: Rand):
    """A bound call re-run after its input changed computes from the new values."""
    dt = "bfloat16"
    x, w, nw = up(rand((1, 64), dt)), weight(rand, 40, 64, dt), up(rand((64,), dt))
    bound = ops.bind_decode_linear(x, w, norm_weight=nw)
    first = bound().to_numpy().copy()
    x[...] = rand((1, 64), dt)
    second = bound().to_numpy()
    want = ops.linear(ops.rmsnorm(x, nw), w).to_numpy()
    assert rel_err(second, want) < TOL[dt]
    assert not np.array_equal(first, second)


def test_argument_errors(rand: Rand):
    dt = "bfloat16"
    x, w = up(rand((64,), dt)), weight(rand, 40, 64, dt)
    with pytest.raises(ValueError, match="features"):
        ops.decode_linear(up(rand((32,), dt)), w)
    with pytest.raises(ValueError, match="one row"):
        ops.decode_linear(up(rand((2, 64), dt)), w)
    with pytest.raises(ValueError, match="needs residual"):
        ops.decode_linear(x, w, epilogue="residual")
    with pytest.raises(ValueError, match="epilogue must be"):
        ops.decode_linear(x, w, epilogue="gelu")
    with pytest.raises(ValueError, match="even N"):
        ops.decode_linear(x, up(rand((41, 64), dt)), epilogue="swiglu")
    with pytest.raises(TypeError):
        ops.decode_linear(x, up(rand((40, 64), "float16")))
    with pytest.raises(ValueError, match="float32"):
        ops.decode_linear(x, w, up(rand((40,), dt)), out_dtype=gp.float32)


def test_decode_advance(rng):
    history0 = rng.integers(0, 100, 6).astype(np.int32)
    nxt, tok = up(np.array([42], np.int32)), up(np.array([7], np.int32))
    pos, lens, history = up(np.array([2], np.int32)), up(np.array([0], np.int32)), up(history0)
    ops.decode_advance(nxt, tok, pos, lens, history, 3)
    assert int(pos.to_numpy()[0]) == 3 and int(tok.to_numpy()[0]) == 42
    assert int(lens.to_numpy()[0]) == 3  # min(3 + 1, capacity 3)
    want = history0.copy()
    want[3] = 42
    np.testing.assert_array_equal(history.to_numpy(), want)
    pos[...] = np.array([5], np.int32)  # the last position: history ends there
    ops.decode_advance(nxt, tok, pos, lens, history, 10)
    np.testing.assert_array_equal(history.to_numpy(), want)
    assert int(pos.to_numpy()[0]) == 6 and int(lens.to_numpy()[0]) == 7
    with pytest.raises(ValueError, match="capacity"):
        ops.decode_advance(nxt, tok, pos, lens, history, 0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("rows2d", [False, True])
def test_gather_folds_the_embedding_lookup(rng, rand: Rand, dtype: str, rows2d: bool):
    """gather_ids: the table's row is copied out and used as x, as embedding then decode_linear."""
    vocab, k, n = 53, 72, 40
    table, w, nw = up(rand((vocab, k), dtype)), weight(rand, n, k, dtype), up(rand((k,), dtype))
    token = int(rng.integers(0, vocab))
    ids = up(np.array([token], np.int32))
    row_out = gp.zeros((1, k) if rows2d else (k,), dtype)
    got = ops.decode_linear(table, w, norm_weight=nw, gather_ids=ids, gather_out=row_out)
    picked = ops.embedding(ids, table)
    want = ops.decode_linear(picked.reshape(-1), w, norm_weight=nw)
    np.testing.assert_array_equal(row_out.to_numpy().reshape(-1), table.to_numpy()[token])
    assert got.shape == ((1, n) if rows2d else (n,))
    np.testing.assert_array_equal(got.to_numpy().reshape(-1), want.to_numpy())


def test_gather_of_an_id_outside_the_table_is_a_row_of_zeros(rand: Rand):
    dt = "bfloat16"
    table, w, nw = up(rand((20, 64), dt)), weight(rand, 40, 64, dt), up(rand((64,), dt))
    row_out = up(rand((64,), dt))
    got = ops.decode_linear(table, w, norm_weight=nw, gather_ids=up(np.array([20], np.int32)),
                            gather_out=row_out)  # fmt: skip
    assert not row_out.to_numpy().any() and not got.to_numpy().any()


def test_gather_argument_errors(rand: Rand):
    dt = "bfloat16"
    table, w, nw = up(rand((20, 64), dt)), weight(rand, 40, 64, dt), up(rand((64,), dt))
    ids, row = up(np.array([3], np.int32)), gp.zeros((64,), dt)
    with pytest.raises(ValueError, match="needs norm_weight"):
        ops.decode_linear(table, w, gather_ids=ids, gather_out=row)
    with pytest.raises(ValueError, match="come together"):
        ops.decode_linear(table, w, norm_weight=nw, gather_ids=ids)
    with pytest.raises(ValueError, match="row of 64"):
        ops.decode_linear(table, w, norm_weight=nw, gather_ids=ids, gather_out=gp.zeros((8,), dt))
    with pytest.raises(TypeError, match="unknown decode_linear option"):
        ops.decode_linear(table[0], w, gather=ids)  # type: ignore[call-arg]
