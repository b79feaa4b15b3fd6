"""pygpukit.ops KV cache writes on the CPU backend, against the loops of ops_references.py."""

from __future__ import annotations

import numpy as np
import pytest
from ops_references import kv_append_ref, paged_write_ref

import pygpukit as gp
from pygpukit import ops

DTYPES = [gp.float16, gp.bfloat16, gp.float32]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("per_token", [False, True])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_append(rand, rng, dtype, per_token, index_dtype):
    b, hkv, t, d, max_len = 3, 2, 4, 64, 12
    k = rand((b, hkv, t, d)).astype(dtype)
    v = rand((b, hkv, t, d)).astype(dtype)
    kc0 = rand((b, hkv, max_len, d)).astype(dtype)
    vc0 = rand((b, hkv, max_len, d)).astype(dtype)
    if per_token:
        pos = np.stack([rng.permutation(max_len)[:t] for _ in range(b)]).astype(index_dtype)
        pos[0, 1] = -1  # skipped
        pos[1, 2] = max_len  # skipped
    else:
        pos = np.array([0, 5, max_len - 2], index_dtype)  # the last one runs off the end
    kc, vc = gp.from_numpy(kc0), gp.from_numpy(vc0)
    assert (
        ops.kv_cache_append(gp.from_numpy(k), gp.from_numpy(v), kc, vc, gp.from_numpy(pos)) is None
    )
    want_k, want_v = kv_append_ref(kc0, vc0, k, v, pos)
    np.testing.assert_array_equal(kc.to_numpy(), want_k)
    np.testing.assert_array_equal(vc.to_numpy(), want_v)
    assert not np.array_equal(want_k, kc0)  # something was written


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_paged_write(rand, rng, dtype, index_dtype):
    n, hkv, d, nblocks, bs = 9, 2, 128, 6, 4
    k = rand((n, hkv, d)).astype(dtype)
    v = rand((n, hkv, d)).astype(dtype)
    kc0 = rand((nblocks, hkv, bs, d)).astype(dtype)
    vc0 = rand((nblocks, hkv, bs, d)).astype(dtype)
    slots = rng.permutation(nblocks * bs)[:n].astype(index_dtype)
    slots[2] = -1  # padding token
    slots[5] = nblocks * bs + 3  # past the last block
    kc, vc = gp.from_numpy(kc0), gp.from_numpy(vc0)
    ops.paged_kv_cache_write(gp.from_numpy(k), gp.from_numpy(v), kc, vc, gp.from_numpy(slots))
    want_k, want_v = paged_write_ref(kc0, vc0, k, v, slots)
    np.testing.assert_array_equal(kc.to_numpy(), want_k)
    np.testing.assert_array_equal(vc.to_numpy(), want_v)


def _a(rand, shape, dtype=gp.float16):
    return gp.from_numpy(rand(shape).astype(dtype))


def test_append_errors(rand):
    k, v = _a(rand, (2, 2, 3, 64)), _a(rand, (2, 2, 3, 64))
    kc, vc = _a(rand, (2, 2, 8, 64)), _a(rand, (2, 2, 8, 64))
    pos = gp.from_numpy(np.array([0, 1], np.int32))
    app = ops.kv_cache_append
    with pytest.raises(TypeError, match="positions must have dtype"):
        app(k, v, kc, vc, gp.from_numpy(np.array([0.0, 1.0], np.float32)))
    with pytest.raises(ValueError, match="positions must have shape"):
        app(k, v, kc, vc, gp.from_numpy(np.zeros((2, 4), np.int32)))
    with pytest.raises(TypeError, match="v has dtype"):
        app(k, _a(rand, (2, 2, 3, 64), gp.bfloat16), kc, vc, pos)
    with pytest.raises(ValueError, match="same shape"):
        app(k, _a(rand, (2, 2, 4, 64)), kc, vc, pos)
    with pytest.raises(ValueError, match="same shape"):
        app(k, v, kc, _a(rand, (2, 2, 9, 64)), pos)
    with pytest.raises(ValueError, match="KV heads"):
        app(k, v, _a(rand, (2, 1, 8, 64)), _a(rand, (2, 1, 8, 64)), pos)
    with pytest.raises(ValueError, match="max_len"):
        app(k, v, _a(rand, (3, 2, 8, 64)), _a(rand, (3, 2, 8, 64)), pos)
    with pytest.raises(ValueError, match="multiple of 16 bytes"):
        app(*(_a(rand, s) for s in [(2, 2, 3, 4), (2, 2, 3, 4), (2, 2, 8, 4), (2, 2, 8, 4)]), pos)
    with pytest.raises(ValueError, match="4-D"):
        app(_a(rand, (2, 3, 64)), v, kc, vc, pos)


def test_paged_errors(rand):
    k, v = _a(rand, (5, 2, 64)), _a(rand, (5, 2, 64))
    kc, vc = _a(rand, (4, 2, 8, 64)), _a(rand, (4, 2, 8, 64))
    wr = ops.paged_kv_cache_write
    with pytest.raises(ValueError, match="slot_mapping must have shape"):
        wr(k, v, kc, vc, gp.from_numpy(np.arange(4, dtype=np.int64)))
    with pytest.raises(TypeError, match="slot_mapping must have dtype"):
        wr(k, v, kc, vc, gp.from_numpy(np.arange(5, dtype=np.int16)))
    with pytest.raises(ValueError, match="3-D"):
        wr(_a(rand, (5, 2, 1, 64)), v, kc, vc, gp.from_numpy(np.arange(5, dtype=np.int32)))
    with pytest.raises(TypeError, match="k_cache has dtype"):
        wr(
            k,
            v,
            _a(rand, (4, 2, 8, 64), gp.float32),
            vc,
            gp.from_numpy(np.arange(5, dtype=np.int32)),
        )
