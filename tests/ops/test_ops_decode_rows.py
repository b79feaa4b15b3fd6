"""ops.decode_linear_rows and ops.decode_attention_paged_single: each row bitwise the one-token op.

On the current backend (the CPU here, CUDA on a GPU): M rows computed in one call against
``ops.decode_linear`` / ``ops.decode_attention_single`` run on each row alone, compared bit for
bit (``np.array_equal`` on the raw values), on fresh random data with odd sizes (N not a
multiple of a warp's rows, M not a multiple of a warp's token rows), for every epilogue, with
and without the RMSNorm prologue and bias. The paged forms write and read keys and values at
scattered blocks; caches start random so rows that must stay untouched are checked too.
"""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import ops

ON_GPU = gp.backend_name() == "cuda"
DTYPES = ["bfloat16", "float16"]
# The CPU backend's references loop over rows in Python: a few batch sizes there.
BATCHES = [1, 3, 9, 16, 33, 64] if ON_GPU else [1, 9]


def up(a: np.ndarray) -> gp.GPUArray:
    return gp.from_numpy(np.ascontiguousarray(a))


def _rand(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, scale: float = 1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def _bits(a: gp.GPUArray) -> np.ndarray:
    """The raw values (bit patterns compared, so -0.0 vs 0.0 or NaN payloads would show)."""
    h = a.to_numpy()
    return h.view(np.uint16) if h.dtype.itemsize == 2 else h.view(np.uint32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", BATCHES)
@pytest.mark.parametrize(("n", "k", "norm", "bias", "f32"), [
    (37, 200, True, True, False), (130, 72, False, False, False), (320, 128, True, False, True),
    (29, 1032, True, False, True), (576, 576, True, True, False),
])  # fmt: skip
def test_store_rows_equal_decode_linear_bitwise(dtype, m, n, k, norm, bias, f32):
    rng = np.random.default_rng()
    x = up(_rand(rng, (m, k), dtype))
    w = up(_rand(rng, (n, k), dtype, k**-0.5))
    b = up(_rand(rng, (n,), dtype)) if bias and not f32 else None
    nw = up(_rand(rng, (k,), dtype, 0.3) + 1) if norm else None
    out_dtype = gp.float32 if f32 else None
    got = ops.decode_linear_rows(x, w, b, norm_weight=nw, eps=1e-5, out_dtype=out_dtype)
    assert got.shape == (m, n)
    want = [ops.decode_linear(x[i], w, b, norm_weight=nw, eps=1e-5, out_dtype=out_dtype)
            for i in range(m)]  # fmt: skip
    got_bits = _bits(got)
    for i in range(m):
        assert np.array_equal(got_bits[i], _bits(want[i])), f"row {i} of {m}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", [1, 9, 64] if ON_GPU else [9])
@pytest.mark.parametrize(("n", "k"), [(44, 200), (576, 1536)])
def test_residual_rows_equal_decode_linear_bitwise(dtype, m, n, k):
    rng = np.random.default_rng()
    x = up(_rand(rng, (m, k), dtype))
    w = up(_rand(rng, (n, k), dtype, k**-0.5))
    b = up(_rand(rng, (n,), dtype))
    res0 = _rand(rng, (m, n), dtype)
    res = up(res0)
    assert ops.decode_linear_rows(x, w, b, epilogue="residual", residual=res) is res
    for i in range(m):
        one = up(res0[i])
        ops.decode_linear(x[i], w, b, epilogue="residual", residual=one)
        assert np.array_equal(_bits(res)[i], _bits(one)), f"row {i} of {m}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", [1, 7, 16, 40] if ON_GPU else [7])
@pytest.mark.parametrize(("inter", "k"), [(36, 64), (256, 128), (1536, 576)])
def test_swiglu_rows_equal_decode_linear_bitwise(dtype, m, inter, k):
    rng = np.random.default_rng()
    x = up(_rand(rng, (m, k), dtype))
    w = up(_rand(rng, (2 * inter, k), dtype, k**-0.5))
    nw = up(_rand(rng, (k,), dtype, 0.3) + 1)
    got = ops.decode_linear_rows(x, w, norm_weight=nw, eps=1e-6, epilogue="swiglu")
    assert got.shape == (m, inter)
    for i in range(m):
        want = ops.decode_linear(x[i], w, norm_weight=nw, eps=1e-6, epilogue="swiglu")
        assert np.array_equal(_bits(got)[i], _bits(want)), f"row {i} of {m}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", [1, 5, 16, 33] if ON_GPU else [5])
@pytest.mark.parametrize(("hq", "hkv", "d"), [(2, 1, 64), (9, 3, 64), (4, 2, 128)])
def test_rope_kv_rows_equal_decode_linear_bitwise_into_paged_slots(dtype, m, hq, hkv, d):
    rng = np.random.default_rng()
    k_dim, bs, blocks, max_pos = 200, 16, 3 * m + 2, 300
    n = (hq + 2 * hkv) * d
    x = up(_rand(rng, (m, k_dim), dtype))
    w = up(_rand(rng, (n, k_dim), dtype, k_dim**-0.5))
    b = up(_rand(rng, (n,), dtype))
    nw = up(_rand(rng, (k_dim,), dtype, 0.3) + 1)
    cos, sin = ops.rope_cos_sin(max_pos, d)
    positions = rng.integers(0, max_pos, m).astype(np.int32)
    positions[0] = max_pos + 5  # outside the table: angle 0, as decode_linear
    # Distinct slots in scattered blocks; the last row (when several) stores nothing.
    slots = (rng.permutation(blocks)[:m] * bs + rng.integers(0, bs, m)).astype(np.int32)
    if m > 1:
        slots[-1] = -1
    kc0 = _rand(rng, (blocks, hkv, bs, d), dtype)
    vc0 = _rand(rng, (blocks, hkv, bs, d), dtype)
    kc, vc = up(kc0), up(vc0)
    rope = ops.PagedRopeKV(cos, sin, up(positions), up(slots), kc, vc, hq)
    q = ops.decode_linear_rows(x, w, b, norm_weight=nw, eps=1e-5, epilogue="rope_kv", rope_kv=rope)
    assert q.shape == (m, hq * d)
    k_bits, v_bits = _bits(kc), _bits(vc)
    for i in range(m):
        cap = 4
        kone, vone = (
            up(_rand(rng, (1, hkv, cap, d), dtype)),
            up(_rand(rng, (1, hkv, cap, d), dtype)),
        )
        pos = up(positions[i : i + 1])
        one = ops.RopeKV(cos, sin, pos, kone, vone, hq)
        want = ops.decode_linear(x[i], w, b, norm_weight=nw, eps=1e-5, epilogue="rope_kv",
                                 rope_kv=one)  # fmt: skip
        assert np.array_equal(_bits(q)[i], _bits(want)), f"q of row {i} of {m}"
        if slots[i] < 0:
            continue
        blk, off = divmod(int(slots[i]), bs)
        at = int(positions[i]) % cap
        assert np.array_equal(k_bits[blk, :, off], _bits(kone)[0, :, at]), f"k of row {i}"
        assert np.array_equal(v_bits[blk, :, off], _bits(vone)[0, :, at]), f"v of row {i}"
    written = {divmod(int(s), bs) for s in slots if s >= 0}
    untouched = [(bl, o) for bl in range(blocks) for o in range(bs) if (bl, o) not in written]
    for bl, o in untouched:  # every other cache row kept its value
        assert np.array_equal(k_bits[bl, :, o], kc0.view(np.uint16)[bl, :, o])
        assert np.array_equal(v_bits[bl, :, o], vc0.view(np.uint16)[bl, :, o])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch", [1, 5, 16, 40] if ON_GPU else [5])
@pytest.mark.parametrize(("hq", "hkv", "d"), [(2, 1, 64), (9, 3, 64), (8, 2, 128)])
def test_paged_single_attention_equals_contiguous_single_bitwise(dtype, batch, hq, hkv, d):
    rng = np.random.default_rng()
    bs, width = 16, 40  # up to 640 keys: several 256-key tiles
    lens = rng.integers(0, width * bs + 1, batch).astype(np.int32)
    lens[0] = width * bs
    if batch > 2:
        lens[1], lens[2] = 0, 1
    blocks = batch * width + 1
    order = rng.permutation(blocks)
    table = order[: batch * width].reshape(batch, width).astype(np.int32)
    kc = _rand(rng, (blocks, hkv, bs, d), dtype)
    vc = _rand(rng, (blocks, hkv, bs, d), dtype)
    q = _rand(rng, (batch, hq, d), dtype)
    scale = float(d**-0.5) * 1.1
    got = ops.decode_attention_paged_single(up(q), up(kc), up(vc), up(lens), up(table),
                                            scale=scale)  # fmt: skip
    assert got.shape == (batch, hq, d)
    for b in range(batch):
        # The same keys laid out contiguously for the one-sequence kernel.
        keys = kc[table[b]].transpose(1, 0, 2, 3).reshape(1, hkv, width * bs, d)
        vals = vc[table[b]].transpose(1, 0, 2, 3).reshape(1, hkv, width * bs, d)
        want = ops.decode_attention_single(up(q[b : b + 1]), up(keys), up(vals),
                                           up(lens[b : b + 1]), scale=scale)  # fmt: skip
        assert np.array_equal(_bits(got)[b], _bits(want)[0]), f"sequence {b} of {batch}"
    if batch > 2:
        assert not _bits(got)[1].any()  # length 0 gives zeros


def test_decode_rows_arguments_are_checked():
    rng = np.random.default_rng()
    x = up(_rand(rng, (3, 64), "bfloat16"))
    w = up(_rand(rng, (8, 64), "bfloat16"))
    with pytest.raises(ValueError, match="multiple of 8"):
        ops.decode_linear_rows(
            up(_rand(rng, (3, 60), "bfloat16")), up(_rand(rng, (8, 60), "bfloat16"))
        )
    with pytest.raises(ValueError, match="residual"):
        ops.decode_linear_rows(x, w, epilogue="residual")
    with pytest.raises(ValueError, match="residual"):
        ops.decode_linear_rows(
            x, w, epilogue="residual", residual=up(_rand(rng, (2, 8), "bfloat16"))
        )
    with pytest.raises(ValueError, match="epilogue"):
        ops.decode_linear_rows(x, w, epilogue="gelu")
    q = up(_rand(rng, (2, 2, 96), "bfloat16"))
    cache = up(_rand(rng, (3, 1, 16, 96), "bfloat16"))
    lens, table = up(np.ones(2, np.int32)), up(np.zeros((2, 1), np.int32))
    with pytest.raises(ValueError, match="D in"):
        ops.decode_attention_paged_single(q, cache, cache, lens, table)
